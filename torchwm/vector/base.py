"""The base class of every torchwm vector env: the vector contract in one place.

`VectorEnv` subclasses Gymnasium's `VectorEnv` and implements the public methods (`reset`, `step`,
`send`, `recv`, `call`, `get_attr`, `set_attr`, `render`, `close`, the states' and Gymnasium's async
names) once: seeds, ``env_ids``, ``reset_mask``, action checks, the order of rows, infos, closing. What
only a backend knows, how its envs are reset, stepped, called and closed, it hands to its
`torchwm.vector.stepper.Stepper` (``_stepper``) once the caller's arguments are checked: a step goes
from here to the stepper and back once. Which envs are in flight, ready, or must be reset lives in the
stepper's `torchwm.vector.step_state.StepState` (``_state`` here too).

Every method of the class is in this file; its parts are objects it holds, each in its own module:
``_hold`` (`torchwm.vector.thread_hold.ThreadHold`: one thread at a time, and a close from any thread),
``_saved_states`` (`torchwm.vector.saved_states.SavedStates`: the states of `clone_state` and
`restore_state`, checked whole before any env changes) and ``_pending``
(`torchwm.vector.gymnasium_async.PendingCalls`: the reset `reset_async` holds, or a step in flight, and
the refusal of a call meanwhile in Gymnasium's words).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from torchwm.env_state import EnvState
from torchwm.spec import VecSpec, check_count, check_timeout
from torchwm.vector import call_arguments, episode_seeds
from torchwm.vector.batching import ARRAY_SPACES, InfoBatcher, check_actions, take_rows, view_rows
from torchwm.vector.gymnasium_async import PendingCalls
from torchwm.vector.saved_states import SavedStates
from torchwm.vector.stepper import Stepper, wait_ready_with_deadline
from torchwm.vector.thread_hold import ThreadHold

# What step and recv return: observations, rewards, terminations, truncations, infos (Gymnasium's order).
StepResult = tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]


class VectorEnv(gym.vector.VectorEnv):
    """A Gymnasium vector env over a backend's `Stepper`, with Tianshou's and EnvPool's partial and async
    calls.

    Args:
        stepper: the backend's envs, started (its spec, spaces, batch, ``batch_size`` and ``timeout``).
        copy: return copies of the observation batch (``False`` returns the stepper's buffer, which the
            next call overwrites).
    """

    def __init__(self, stepper: Stepper, *, copy: bool = True) -> None:
        owner, backend = f"{type(self).__name__} ({stepper.spec.id})", stepper.spec.backend
        self._hold = ThreadHold(stepper, owner=owner, backend=backend)  # closed until _init opens it
        try:
            self._init(stepper, copy)
        except BaseException:
            stepper.close()  # its workers and shared memory, which no one could close() otherwise
            raise

    def _init(self, stepper: Stepper, copy: bool) -> None:
        spec = stepper.spec
        n = spec.num_envs
        self._stepper = stepper
        self._state = stepper.state
        self._vec_spec = spec
        self.num_envs = n
        single_observation_space = self.single_observation_space = stepper.single_observation_space
        # One array per batch (a Box, Discrete, ...): recv copies it without walking the space.
        self._array_rows = isinstance(single_observation_space, ARRAY_SPACES)
        self.single_action_space = stepper.single_action_space
        batched = stepper.observation_space  # None: Gymnasium's batch of the single space
        self.observation_space = batch_space(single_observation_space, n) if batched is None else batched
        # batch_space gives the batched space a copy of env 0's action-space generator, as in Gymnasium:
        # vector envs of identically seeded envs sample the same actions. Reseeded only for a given seed.
        self.action_space = batch_space(self.single_action_space, n)
        if spec.seed is not None:
            self.action_space.seed(spec.seed)
        self.autoreset_mode: AutoresetMode = spec.autoreset
        self.metadata = {**(stepper.metadata or {}), "autoreset_mode": self.autoreset_mode}
        self.render_mode = stepper.render_mode
        self.batch_size = stepper.state.batch_size
        self.copy = copy
        self._first_reset_seed = spec.seed
        # Seeded autoresets (`torchwm.vector.episode_seeds`): the stepper's book, None where it has none.
        self._episode_seeds = stepper.episode_seeds
        episode_seeds.switch(self._episode_seeds, spec.autoreset_seeds, spec.backend)
        # the last seed each env was reset with; -1: none (seeds may exceed int64)
        self._given_seeds = [-1] * n
        self._pending = PendingCalls(stepper.state)
        self._saved_states = SavedStates(stepper, spec, single_observation_space)
        self._all_ids = np.arange(n)
        self._all_ids.flags.writeable = False  # shared by every full-batch call
        self._hold.closed = False  # built: open

    @property
    def closed(self) -> bool:  # type: ignore[override]  # Gymnasium's is an attribute its close() sets
        """Whether the env was closed (also before its construction finished)."""
        hold = self.__dict__.get("_hold")
        return hold is None or hold.closed

    @property
    def timeout(self) -> float | None:
        """Seconds any wait on envs may take before `EnvTimeoutError` (None: no limit); settable."""
        return self._stepper.timeout

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        # Checked as the constructor checks the backend option, and named as it names it.
        self._stepper.timeout = check_timeout(value, f"{self._vec_spec.backend}: timeout")

    @property
    def in_flight_ids(self) -> list[int]:
        """The envs with a step in flight: sent, and not yet returned by `recv` (Tianshou's ``waiting_id``),
        in env order. A copy: changing it changes nothing."""
        return np.flatnonzero(self._state.in_flight).tolist()

    @property
    def resets_while_stepping(self) -> bool:
        """Whether `reset(env_ids=...)` may reset envs while others have a step in flight (`Stepper`)."""
        return self._stepper.resets_while_stepping

    @property
    def check_action_values(self) -> bool:
        """Whether `send` checks action values too, for envs a bad one would crash (`Stepper`)."""
        return self._stepper.check_action_values

    # -- the public contract ---------------------------------------------------------------------

    @property
    def spec(self) -> VecSpec:  # type: ignore[override]
        """The `VecSpec` this env was built from, every default explicit."""
        return self._vec_spec

    @property
    def autoreset_seeds(self) -> bool:
        """Whether every episode of every env starts from a seed of its own, drawn from the seed of the last
        seeded reset and reported in ``infos["episode_seed"]`` (docs/datasets.md, "Seeded autoresets").

        Settable: each env follows the new value from its next reset (`reset` without ``env_ids``: all of
        them), and ``spec.autoreset_seeds`` says it at once. A backend that does not reset its envs through
        torchwm's `EnvGroup` (``ale-native``, ``envpool``) refuses ``True`` with `UnsupportedStackError`.
        """
        return self._vec_spec.autoreset_seeds

    @autoreset_seeds.setter
    def autoreset_seeds(self, value: bool) -> None:
        spec = self._vec_spec.replace(autoreset_seeds=value)  # the type is checked by the spec
        episode_seeds.switch(self._episode_seeds, value, spec.backend)
        self._vec_spec = spec

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
        env_ids: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs, the envs ``env_ids`` (their rows only), or those of ``options["reset_mask"]``.

        ``seed=s`` seeds env ``i`` with ``s + i``, as Gymnasium does; a list gives one seed per env reset.
        The first reset uses ``make_vec(seed=...)`` when no seed is given.
        """
        with self._hold.held("resetting"):
            ids, seeds, options = call_arguments.reset_request(
                seed, options, env_ids, self.num_envs, self._first_reset_seed
            )
            self._pending.check_can_reset(ids, self._stepper.resets_while_stepping)
            given = self._first_reset_seed if seed is None else seed
            self._first_reset_seed = None
            book = self._episode_seeds
            if book is None:
                infos = self._stepper.reset_envs(ids, seeds, options)
            else:
                vector_seed = int(given) if isinstance(given, (int, np.integer)) else None
                streams = book.for_reset(ids.tolist(), seeds, vector_seed)
                infos = self._stepper.reset_envs(ids, seeds, options, streams)
                book.was_reset(ids.tolist(), seeds, streams)
            self._mark_reset(ids, seeds)
            return self._reset_rows(ids, infos, whole=env_ids is None)

    def step(self, actions: Any, env_ids: Any = None) -> StepResult:
        """`send` then `recv`: all envs, or the rows of ``env_ids`` (``infos["env_id"]`` says which)."""
        self.send(actions, env_ids)
        return self.recv()

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start stepping envs ``env_ids`` (all by default); `recv` collects the results."""
        # The one-thread hold (`ThreadHold`) of send and recv, written out here rather than as a context
        # manager: no call on the hot path. A backend changes `_send`/`_recv`, never the hold.
        hold = self._hold
        if hold.closed or hold.closer is not None or not hold.in_use.acquire(blocking=False):
            hold.enter("sending a step")  # refuses the call, or takes the env after all
        hold.user = threading.get_ident()
        try:
            self._send(actions, env_ids)
        except Exception as exc:
            hold.raise_if_closed_meanwhile("sending a step", exc)
            raise
        finally:
            hold.user = None
            hold.in_use.release()

    def _send(self, actions: Any, env_ids: Any) -> None:
        """`send` under the hold: checks the envs and actions, hands them to the stepper."""
        if self._pending.held_reset is not None:
            self._pending.check_nothing_pending("step_async")
        ids = self._all_ids if env_ids is None else self._env_ids(env_ids)
        self._state.check_can_send(ids)
        # Values are the env's business, as in Gymnasium (only count, shape and dtype are checked),
        # unless the backend's engine cannot take any value.
        actions = check_actions(
            self.single_action_space,
            actions,
            len(ids),
            check_range=self._stepper.check_action_values,
            env_ids=ids,
        )
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._state.check_not_ended(ids, self._stepper.terminations, self._stepper.truncations)
        natural = ids is self._all_ids
        # recv returns a whole batch sent in env order as it is: no rank is read
        ranked = None if natural and self.batch_size == self.num_envs else ids
        if ids.size == self.num_envs and not natural:
            # Every env, in another order: backends take a whole batch in env order.
            order = np.argsort(ids)
            actions, ids = take_rows(self.single_action_space, actions, order), self._all_ids
        self._stepper.send_step(ids, actions)
        self._state.sent(ids, ranked, natural)

    def recv(self, timeout: float | None = None, *, min_ready: int | None = None) -> StepResult:
        """Results of envs in flight: all of them, or the first ``batch_size`` ready.

        ``timeout``: seconds to wait (default: the backend's ``timeout``), then `EnvTimeoutError`. With
        ``min_ready=m`` the timeout is a deadline instead, as Tianshou's ``timeout`` is: at it, recv
        returns the envs ready by then if at least ``m`` are, else it goes on waiting until ``m`` are
        (within the backend's own ``timeout``, counted from the start of the call).

        Every env sent by one ``send`` without ``env_ids`` comes back as Gymnasium's batch, in env order.
        Any other result has the rows of its envs in the order they were sent (the order of
        ``env_ids`` within a send, earlier sends first), and ``infos["env_id"]`` says which env each
        row is, as `reset` and `call` keep the order of their ``env_ids``.
        """
        hold = self._hold
        if hold.closed or hold.closer is not None or not hold.in_use.acquire(blocking=False):
            hold.enter("receiving a step")  # refuses the call, or takes the env after all
        hold.user = threading.get_ident()
        try:
            return self._recv(timeout, min_ready)
        except Exception as exc:
            hold.raise_if_closed_meanwhile("receiving a step", exc)
            raise
        finally:
            hold.user = None
            hold.in_use.release()

    def _recv(self, timeout: float | None, min_ready: int | None) -> StepResult:
        """`recv` under the hold: waits for the stepper's envs, returns their rows."""
        timeout = self._stepper.timeout if timeout is None else check_timeout(timeout, "recv(timeout=)")
        state = self._state
        candidates = state.recv_started()
        count = min(self.batch_size, candidates.size)
        if min_ready is None:
            ids, infos = self._stepper.wait_ready(candidates, count, timeout)
        else:
            ids, infos = wait_ready_with_deadline(
                self._stepper, candidates, count, timeout, min(check_count("min_ready", min_ready), count)
            )
        if len(ids) == self.num_envs and state.in_env_order:
            state.received(slice(None))
            if any(infos):  # else their order does not matter
                by_env = dict(zip(np.asarray(ids).tolist(), infos, strict=True))
                infos = [by_env[i] for i in range(self.num_envs)]
                if self._episode_seeds is not None and self._episode_seeds.drawing:
                    self._episode_seeds.count_drawn(range(self.num_envs), infos)
            observations = self._stepper.observations
            if self.copy:
                # An array batch is copied here: no call on the hot path.
                if self._array_rows:
                    observations = observations.copy()
                else:
                    observations = take_rows(self.single_observation_space, observations, None)
            elif not self._array_rows:
                observations = view_rows(self.single_observation_space, observations, None)
            return (
                observations,
                self._stepper.rewards.copy(),
                self._stepper.terminations.copy(),
                self._stepper.truncations.copy(),
                InfoBatcher(self.num_envs).batch(infos) if any(infos) else {},
            )
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(state.rank(ids), kind="stable")
        ids = ids[order]
        infos = [infos[k] for k in order]
        state.received(ids)
        if self._episode_seeds is not None and self._episode_seeds.drawing:
            self._episode_seeds.count_drawn(ids.tolist(), infos)
        return self._rows(ids, infos)

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """The seed of each env's ``np_random``, as Gymnasium's Sync/AsyncVectorEnv give it
        (``(42, 43, 44, 45)`` after ``reset(seed=42)``, and still after ``reset()``).

        Read from the envs (``get_attr``). Envs that cannot answer (ALE's C++ envs, an env whose
        ``np_random`` is read-only) give the seed this vector env last reset them with, or -1 where
        it gave none: Gymnasium's value for a seed that is not known.
        """
        try:
            return self.get_attr("np_random_seed")
        except (AttributeError, NotImplementedError):
            return tuple(self._given_seeds)

    @property  # type: ignore[misc]  # Gymnasium's is writable (a single env's generator); a batch's is not
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's ``np_random`` (copies, on a process backend), as Gymnasium's vector envs give it."""
        return self.get_attr("np_random")

    def call(self, name: str | Callable, *args: Any, env_ids: Any = None, **kwargs: Any) -> tuple[Any, ...]:
        """Call method ``name`` of every env, or of the envs ``env_ids`` (in that order), or read it if it is
        not callable: one value per env. ``env_ids`` is taken by torchwm, not passed to the method.

        ``name`` may also be a function, called as ``name(env, *args, **kwargs)`` where each env lives (in
        its worker; it travels pickled, so define it at a module's top level): SB3's
        ``env_is_wrapped`` runs its ``isinstance`` test this way."""
        doing = f"calling {name!r}" if isinstance(name, str) else f"calling {getattr(name, '__name__', name)}"
        with self._hold.held(doing):
            self._pending.check_nothing_pending("call_async")
            return tuple(self._stepper.call(name, args, kwargs, self._env_ids(env_ids).tolist()))

    def get_attr(self, name: str, env_ids: Any = None) -> tuple[Any, ...]:
        """Attribute ``name`` of every env, or of the envs ``env_ids`` (in that order)."""
        return self.call(name, env_ids=env_ids)

    def set_attr(self, name: str, values: Any, env_ids: Any = None) -> None:
        """Set attribute ``name`` on every env, or on the envs ``env_ids``: one value for all, or a list/tuple
        of one per env (in the order of ``env_ids``)."""
        with self._hold.held(f"setting {name!r}"):
            self._pending.check_nothing_pending("set_attr")
            ids = self._env_ids(env_ids).tolist()
            if not isinstance(values, (list, tuple)):
                values = [values] * len(ids)
            if len(values) != len(ids):
                raise ValueError(
                    f"set_attr({name!r}) expected {len(ids)} values, one per env, got {len(values)}"
                )
            self._stepper.set_attr(name, list(values), ids)

    def render(self) -> tuple[Any, ...]:
        return self.call("render")

    def clone_state(self, env_ids: Any = None) -> tuple[EnvState, ...]:
        """The state of every env, or of the envs ``env_ids`` (in that order): one picklable `EnvState`
        each, the whole stack's (every wrapper, the emulator or physics and their generators), with its
        last observation, autoreset bookkeeping and what it belongs to (the spec's identity, the
        observations' shape). `restore_state` puts an env back in it; the envs are unchanged (docs/state.md).

        Raises:
            TypeError: a wrapper or env cannot be saved (named by its class); nothing changed.
            AlreadyPendingCallError: a step is in flight (`recv` it first), as for `reset`.
            WorkerError: an env lost its episode to a worker's restart (``restart_on_crash``) that its
                next step has not reported yet; nothing changed.
            NotImplementedError: the backend cannot save states (``ale-native``).
        """
        with self._hold.held("cloning env states"):
            return self._saved_states.clone(self._state_call_ids(env_ids, "clone_state"))

    def restore_state(self, states: Any, env_ids: Any = None) -> tuple[Any, dict[str, Any]]:
        """Put every env, or the envs ``env_ids``, in ``states`` (one `EnvState` from `clone_state` each, in
        the order of ``env_ids``; from any env of the same spec, on any backend). Returns their observations
        and infos as `reset` does (with ``env_ids``: their rows, in that order, and ``infos["env_id"]``).
        The same actions then give the same observations, rewards, terminations and truncations, bit for bit.

        Raises:
            TypeError, ValueError: ``states`` are no states of these envs' stacks, or a state is damaged;
                every state is checked before any env changes, so nothing changed.
            AlreadyPendingCallError: a step is in flight, as for `reset`.
        """
        with self._hold.held("restoring env states"):
            ids = self._state_call_ids(env_ids, "restore_state")
            infos = self._saved_states.restore(states, ids)
            return self._reset_rows(ids, infos, whole=env_ids is None)

    # -- Gymnasium's asynchronous names (``AsyncVectorEnv``'s) ---------------------------------------

    def reset_async(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Check a reset of every env (or of ``options["reset_mask"]``), as Gymnasium checks it, and hold it
        until `reset_wait` runs it; until then a step, reset or call raises `AlreadyPendingCallError`."""
        self._hold.check_open()
        self._pending.check_nothing_pending("reset_async")
        call_arguments.reset_request(seed, options, None, self.num_envs, self._first_reset_seed)  # checked
        self._pending.hold_reset(seed, options)

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """The reset `reset_async` held, run now within ``timeout`` seconds (default: the backend's
        ``timeout``), else `EnvTimeoutError`, a ``multiprocessing.TimeoutError`` as in Gymnasium."""
        self._hold.check_open()
        timeout = self.timeout if timeout is None else check_timeout(timeout, "reset_wait(timeout=)")
        seed, options = self._pending.take_reset()
        # A stepper's methods take no timeout (the documented plugin interface): it reads its `timeout` for
        # each wait on its envs, so this reset's deadline is set there, for this call only.
        default_timeout, self.timeout = self.timeout, timeout
        try:
            return self.reset(seed=seed, options=options)
        finally:
            self.timeout = default_timeout

    def step_async(self, actions: Any) -> None:
        """`send` of every env's action."""
        self.send(actions)

    def step_wait(self, timeout: float | None = None) -> StepResult:
        """`recv` (all envs unless ``batch_size`` is set)."""
        return self.recv(timeout)

    def close_extras(self, **kwargs: Any) -> None:
        self._hold.close()

    def close(self, **kwargs: Any) -> None:
        """Release every env, worker and buffer; safe to call twice.

        Warns, as Gymnasium's ``AsyncVectorEnv`` does, when a step or a `reset_async` is still pending;
        its results are dropped. Gymnasium's keyword arguments (``terminate``, ``timeout``) are taken and
        change nothing: workers are always asked, then made, to stop within a deadline.
        """
        if self.closed:
            return
        pending = self._pending.pending()
        if pending is not None:
            gym.logger.warn(f"Calling `close` while waiting for a pending call to `{pending}` to complete.")
        self._hold.close()

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._hold.close()  # no warning about pending calls from the garbage collector
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self._vec_spec.id}, num_envs={self.num_envs}, "
            f"backend={self._vec_spec.backend!r})"
        )

    # -- helpers ---------------------------------------------------------------------------------

    def _state_call_ids(self, env_ids: Any, calling: str) -> np.ndarray:
        """The envs of a `clone_state`/`restore_state`, once the backend and the pending calls allow it."""
        self._saved_states.check_supported()
        ids = self._env_ids(env_ids)
        self._pending.check_nothing_pending(calling)
        return ids

    def _env_ids(self, env_ids: Any) -> np.ndarray:
        return self._all_ids if env_ids is None else call_arguments.env_ids(env_ids, self.num_envs)

    def _mark_reset(self, ids: np.ndarray, seeds: list[int | None]) -> None:
        """Envs ``ids`` were reset with ``seeds``: remember the seeds (for `np_random_seed`; a reset without
        one keeps the last) and that they may step."""
        for i, seed in zip(ids.tolist(), seeds, strict=True):
            if seed is not None:
                self._given_seeds[i] = seed
        self._state.was_reset(ids)

    def _reset_rows(self, ids: np.ndarray, infos: list[dict], *, whole: bool) -> tuple[Any, dict[str, Any]]:
        """What a reset or restore of envs ``ids`` returns: every env's rows and the infos of ``ids`` at
        their env positions (``whole``: no ``env_ids`` given), else the rows of ``ids`` in that order."""
        if not whole:
            obs, _, _, _, batched = self._rows(ids, infos)
            return obs, batched
        spread: list[dict] = [{}] * self.num_envs
        for i, info in zip(ids.tolist(), infos, strict=True):
            spread[i] = info
        rows = take_rows if self.copy else view_rows  # copy=False: the batch itself
        obs = rows(self.single_observation_space, self._stepper.observations, None)
        return obs, InfoBatcher(self.num_envs).batch(spread)

    def _rows(self, ids: np.ndarray, infos: list[dict]) -> StepResult:
        batched = InfoBatcher(ids.size).batch(infos)
        batched["env_id"] = ids.copy()
        return (
            take_rows(self.single_observation_space, self._stepper.observations, ids),
            self._stepper.rewards[ids],
            self._stepper.terminations[ids],
            self._stepper.truncations[ids],
            batched,
        )
