"""The ``ale-native`` backend: a `VecSpec` run by ALE's own C++ vector env.

ALE's `ale_py.vector_env.AtariVectorEnv` steps Atari games in C++ threads with
the standard preprocessing built in. This backend translates the spec's
wrapper stack into its arguments (`ale_vector_kwargs`), passing every one of
them explicitly, because ALE's own defaults (reward clipping, FIRE on reset)
are not torchwm's: the same ``make_vec`` call must mean the same thing on every
backend. A stack ALE cannot express (a callable, ``resize``, ``pixels``,
``scale_obs=True``, ``padding="reset"``, an order ALE does not follow, a
non-Atari id) is refused with `UnsupportedStackError` before any thread starts.

`reset`, `send` and `recv` go straight to ALE rather than through the base
class's row buffers: ALE already returns fresh arrays, in batches of its own
(``batch_size`` envs in its asynchronous mode), so the hot path adds only the
action check, the reward cast to float64 and Gymnasium's ``_key`` info masks.
They are built from the base class's checks and bookkeeping, and hold the vector env for their call as
the base class's do (a second thread's call is refused; `close` from another thread waits for a call under
way, within a bound); attributes and closing are the base class's public methods over this backend's
primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from torchwm.atari_vector_env import check_ale_seeds, check_first_seed
from torchwm.errors import ClosedEnvironmentError
from torchwm.hookspecs import hookimpl
from torchwm.spec import VecSpec, check_count, check_timeout
from torchwm.vector import call_arguments
from torchwm.vector.ale_native_spec import BACKEND_OPTIONS, INFO_KEYS, ale_vector_kwargs, unsupported_stack
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import check_actions
from torchwm.vector.stepper import Stepper
from torchwm.wrappers.atari_stack import parse_for


class AleStepper(Stepper):
    """ALE's C++ `AtariVectorEnv` (``ale_env``, and its C++ interface ``ale``) for an `AleNativeVectorEnv`,
    whose own `reset`, `send` and `recv` call ALE directly: ALE answers with its own batch, which row
    buffers would only copy, and in its asynchronous mode that batch is not every env. The stepper holds
    ALE's env, answers the calls its C++ envs can, and closes it. Its arguments are
    `AleNativeVectorEnv`'s."""

    # An out-of-range action stops ALE's C++ worker with no answer: action values are checked in send.
    check_action_values = True
    resets_while_stepping = False  # ALE's vector env steps and resets its batch as a whole
    state_refusal = (
        "ale-native cannot clone or restore env states (ALE's AtariVectorEnv has no per-env clone); use "
        "backend='shmem' (or 'sync') with the same spec"
    )

    def __init__(
        self,
        spec: VecSpec,
        *,
        batch_size: int | None = None,
        num_threads: int = 0,
        thread_affinity_offset: int = -1,
    ) -> None:
        kwargs = ale_vector_kwargs(
            spec,
            batch_size=batch_size,
            num_threads=num_threads,
            thread_affinity_offset=thread_affinity_offset,
        )
        # Refused here, not at the first reset: every env's seed (seed + i) must fit ALE's range.
        check_first_seed(spec.seed, spec.num_envs, "ale-native: make_vec")
        if batch_size is not None and batch_size < spec.num_envs and spec.autoreset is AutoresetMode.DISABLED:
            raise unsupported_stack(
                spec,
                "autoreset_mode='disabled' with batch_size < num_envs (ALE resets envs in "
                "its asynchronous mode only all together)",
            )
        super().__init__(spec, batch_size=batch_size)
        from ale_py.vector_env import AtariVectorEnv

        ale_env = AtariVectorEnv(**kwargs)
        if kwargs["use_fire_reset"] and not kwargs["full_action_space"]:
            import ale_py

            if ale_py.Action.FIRE not in list(ale_env.ale.get_action_set()):
                ale_env.close()
                raise ValueError(
                    f"wrapper 'fire_reset' needs a game with a FIRE action, and {kwargs['game']!r} has none; "
                    f"remove fire_reset from the stack"
                )
        self.ale_kwargs = kwargs
        self.ale_env: Any = ale_env  # None after close
        self.ale: Any = ale_env.ale
        # Without frame_stack the stack axis ALE always has is dropped, as Gymnasium's chain has none.
        self.squeeze = not any(w.name == "frame_stack" for w in spec.wrappers)
        # grayscale_newaxis: ALE's gray frames get the channel axis AtariPreprocessing adds.
        self.newaxis = parse_for(spec, "ale-native").channel_axis
        single_obs = ale_env.single_observation_space
        assert single_obs.shape is not None  # ALE's Box
        shape = single_obs.shape[1:] if self.squeeze else single_obs.shape
        if self.squeeze or self.newaxis:
            single_obs = spaces.Box(0, 255, (*shape, 1) if self.newaxis else shape, np.uint8)
        self.single_observation_space = single_obs
        self.single_action_space = ale_env.single_action_space
        self.metadata = {"render_modes": []}
        # Whether each env's episode ended, for autoreset_mode 'disabled' (`StepState.check_not_ended`);
        # ALE's own results are returned as they come, never copied into rows.
        self.terminations = np.zeros(self.num_envs, dtype=np.bool_)
        self.truncations = np.zeros(self.num_envs, dtype=np.bool_)

    def reset_envs(
        self, ids: np.ndarray, seeds: list[int | None], options: dict | None, streams: Any = None
    ) -> list[dict]:
        raise NotImplementedError("ale-native resets through AleNativeVectorEnv.reset, which calls ALE")

    def send_step(self, ids: np.ndarray, actions: Any) -> None:
        raise NotImplementedError("ale-native steps through AleNativeVectorEnv.send, which calls ALE")

    def wait_ready(
        self, candidates: np.ndarray, count: int, timeout: float | None, *, min_ready: int | None = None
    ) -> tuple[np.ndarray, list[dict]]:
        raise NotImplementedError("ale-native steps through AleNativeVectorEnv.recv, which calls ALE")

    def call(self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int]) -> list[Any]:
        """Only ``get_action_meanings`` and the spaces: ALE's C++ envs have no Python attributes."""
        if name == "render":
            raise NotImplementedError(
                "ale-native does not render; use backend='shmem' with render_mode='rgb_array'"
            )
        values = {
            "observation_space": self.single_observation_space,
            "action_space": self.single_action_space,
            "render_mode": None,
        }
        if name in values and not args and not kwargs:
            return [values[name]] * len(ids)
        if name == "get_action_meanings" and not args and not kwargs:
            import ale_py

            names = {action: action.name for action in ale_py.Action.__members__.values()}
            return [[names[a] for a in self.ale.get_action_set()] for _ in ids]
        raise NotImplementedError(
            f"ale-native cannot call {name!r} on its envs: they are C++ objects. It answers "
            f"get_action_meanings, observation_space, action_space and render_mode; use backend='shmem' "
            f"for anything else"
        )

    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        raise NotImplementedError(
            f"ale-native cannot set {name!r}: its envs are C++ objects with no Python attributes; "
            f"use backend='shmem'"
        )

    def close(self) -> None:
        # A call of another thread still inside ALE when close() stopped waiting for it keeps its own
        # reference to ALE's env until it returns; dropping the last one stops ALE's threads.
        if self.ale_env is not None:
            self.ale_env.close()
            self.ale_env = None
            self.ale = None


class AleNativeVectorEnv(VectorEnv):
    """A `VecSpec` of an Atari game run by ALE's C++ `AtariVectorEnv`.

    Args:
        spec: what to build; its stack must be one ALE expresses (see `ale_vector_kwargs`).
        batch_size: ``k < num_envs`` is ALE's asynchronous mode: `reset` and `recv` return the first
            ``k`` envs ready, ``infos["env_id"]`` says which, and the next `send` takes their actions.
        num_threads: ALE's worker threads (0: one per env, at most one per core).
        thread_affinity_offset: pin thread ``i`` to core ``offset + i`` (-1: no pinning).

    Example:
        >>> import torchwm
        >>> with torchwm.make_vec("ALE/Pong-v5", num_envs=2, backend="ale-native", seed=0) as envs:
        ...     obs, infos = envs.reset()
        ...     obs.shape, obs.dtype
        ((2, 4, 84, 84), dtype('uint8'))
    """

    _stepper: AleStepper

    def __init__(
        self,
        spec: VecSpec,
        *,
        batch_size: int | None = None,
        num_threads: int = 0,
        thread_affinity_offset: int = -1,
    ) -> None:
        stepper = AleStepper(
            spec,
            batch_size=batch_size,
            num_threads=num_threads,
            thread_affinity_offset=thread_affinity_offset,
        )
        super().__init__(stepper)
        self.ale_kwargs = stepper.ale_kwargs
        self._squeeze, self._newaxis = stepper.squeeze, stepper.newaxis
        self._async = self.batch_size < self.num_envs
        if self._async:
            # ALE's asynchronous mode works on batches of batch_size envs, as EnvPool's does.
            self.observation_space = batch_space(self.single_observation_space, self.batch_size)
            self.action_space = batch_space(self.single_action_space, self.batch_size)
            # else batch_space's copy of the single space's generator, as the base class
            if spec.seed is not None:
                self.action_space.seed(spec.seed)
        self._continuous = self.ale_kwargs["continuous"]
        self._paddle_strength = np.ones(self.batch_size, dtype=np.float32)
        self._info_masks = {f"_{key}": np.ones(self.batch_size, dtype=np.bool_) for key in INFO_KEYS}
        self._last_ids = np.arange(self.batch_size)
        self._row_order: np.ndarray | None = None  # the env_ids order of the batch in flight, if not ALE's

    # -- reset and step ----------------------------------------------------------------------------
    # Overridden, not primitives: ALE answers with its own batch, which the base class's row buffers
    # would only copy, and its batch is not always every env (batch_size=k is ALE's asynchronous mode:
    # a reset or a recv returns the k envs ready first, a send takes the actions of those k). The
    # checks, seeds and bookkeeping are the base class's helpers.

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
        env_ids: Any = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs, or those of ``env_ids`` / ``options["reset_mask"]`` (then their rows only for
        ``env_ids``).

        ``seed=s`` gives env ``i`` ALE's seed ``s + i``; ALE uses it raw for the emulator (sticky
        actions) and for its no-op draws, where Gymnasium's AtariEnv derives both from a
        `numpy.random.SeedSequence`, so the same seed gives other no-op counts than ``sync``.
        """
        with self._hold.held("resetting"):
            self._pending.check_nothing_pending("reset")
            ids, seeds, options = call_arguments.reset_request(
                seed, options, env_ids, self.num_envs, self._first_reset_seed
            )
            if options:
                raise ValueError(f"ale-native reset takes no options but 'reset_mask', got {sorted(options)}")
            if ids.size < self.num_envs and (self._async or not self._state.all_reset):
                raise NotImplementedError(
                    "ale-native resets some envs only after a full reset() and with batch_size == num_envs "
                    "(ALE's partial reset); reset all envs, or use backend='shmem'"
                )
            # Checked before the pending first-reset seed is used up, so that a refused reset changes nothing.
            seeds = check_ale_seeds(seeds, "ale-native reset")
            self._first_reset_seed = None
            # -1: ALE's "no seed"
            obs, infos = self._stepper.ale.reset(ids.tolist(), [-1 if s is None else s for s in seeds])
            if self._stepper.ale is None:  # another thread's close() stopped waiting for this call
                raise ClosedEnvironmentError("ALE's env was dropped during this reset")
            self._mark_reset(ids, seeds)
            self._stepper.terminations[ids] = False
            self._stepper.truncations[ids] = False
            self._last_ids = infos["env_id"].astype(np.int64)
            infos = self._with_masks(infos)
            obs = self._shaped(obs)
            if env_ids is not None:
                # ALE answers with every env's row, in env order; env_ids asks for its rows, in its order.
                return obs[ids], {key: value[ids] for key, value in infos.items()}
            return obs, infos

    def _send(self, actions: Any, env_ids: Any) -> None:
        """Start stepping the envs of the last result: all envs, or ``batch_size`` of them.

        ``env_ids`` may name those same envs in any order (the actions follow that order);
        ALE cannot step any other subset.
        """
        # ALE has one batch in flight at a time, whichever envs send() names.
        self._pending.check_nothing_pending("step_async")
        if not self._state.all_reset:
            raise gym.error.ResetNeeded("call reset() before step() or send()")
        if env_ids is not None:
            ids = self._env_ids(env_ids)
            if ids.size != self._last_ids.size or not np.array_equal(np.sort(ids), np.sort(self._last_ids)):
                raise NotImplementedError(
                    f"ale-native steps exactly the envs of the last result ({self._last_ids.tolist()}); "
                    f"ALE cannot step env_ids={ids.tolist()}. Use backend='shmem' for arbitrary env_ids"
                )
        actions = check_actions(
            self.single_action_space,
            actions,
            self.batch_size,
            check_range=self._stepper.check_action_values,
            env_ids=self._last_ids if env_ids is None else ids,
        )
        actions = actions.astype(np.float32 if self._continuous else np.int64, copy=False)
        if env_ids is not None and not np.array_equal(ids, self._last_ids):
            actions = actions[np.argsort(ids)[np.argsort(np.argsort(self._last_ids))]]
        if self.autoreset_mode is AutoresetMode.DISABLED:
            self._state.check_not_ended(self._last_ids, self._stepper.terminations, self._stepper.truncations)
        if self._continuous:
            self._stepper.ale_env.send(actions)
        else:
            self._stepper.ale.send(actions, self._paddle_strength)
        self._state.batch_sent(self._last_ids)
        # recv returns the rows in the order env_ids gave them, as every backend does; in ALE's
        # asynchronous mode it returns whichever envs are ready first, in ALE's order.
        same_order = env_ids is None or self._async or np.array_equal(ids, self._last_ids)
        self._row_order = None if same_order else ids

    def _recv(
        self, timeout: float | None, min_ready: int | None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The results of the batch in flight (ALE's C++ threads cannot time out: ``timeout`` and
        ``min_ready`` change nothing, and are checked as every backend checks them)."""
        if timeout is not None:
            check_timeout(timeout, "recv(timeout=)")
        self._state.check_can_recv()  # NoAsyncCallError if nothing was sent
        if min_ready is not None:
            check_count("min_ready", min_ready)
        obs, rewards, terminations, truncations, infos = self._stepper.ale.recv()
        if self._stepper.ale is None:  # another thread's close() stopped waiting for this step
            raise ClosedEnvironmentError("ALE's env was dropped during this step")
        self._state.batch_received()
        ids = infos["env_id"]
        if self._async:
            self._last_ids = ids.astype(np.int64)
        if self.autoreset_mode is AutoresetMode.DISABLED:  # for check_not_ended; ALE keeps no rows else
            self._stepper.terminations[ids] = terminations
            self._stepper.truncations[ids] = truncations
        infos = self._with_masks(infos)
        if "final_obs" in infos:
            infos = self._final_obs_info(infos, terminations | truncations)
        obs, rewards = self._shaped(obs), rewards.astype(np.float64)
        if self._row_order is not None:
            row_of = {env: row for row, env in enumerate(ids.tolist())}
            rows = np.array([row_of[env] for env in self._row_order.tolist()])
            obs, rewards, terminations, truncations = (
                obs[rows],
                rewards[rows],
                terminations[rows],
                truncations[rows],
            )
            infos = {key: value[rows] for key, value in infos.items()}
        return obs, rewards, terminations, truncations, infos

    # -- helpers ---------------------------------------------------------------------------------

    def _shaped(self, obs: np.ndarray) -> np.ndarray:
        """ALE's batch of observations (n, stack, h, w[, 3]) in the stack's shape (views, no copy)."""
        if self._squeeze:
            obs = obs[:, 0]
        return obs[..., np.newaxis] if self._newaxis else obs

    def _with_masks(self, infos: dict[str, Any]) -> dict[str, Any]:
        """Gymnasium's ``_key`` masks next to ALE's info arrays (every env reports every key)."""
        for mask_key, mask in self._info_masks.items():
            infos[mask_key] = mask.copy()
        return infos

    def _final_obs_info(self, infos: dict[str, Any], ended: np.ndarray) -> dict[str, Any]:
        """ALE's ``final_obs`` batch in Gymnasium's same-step form: an object array set where an episode
        ended."""
        batch = infos.pop("final_obs")
        final_obs = np.full(ended.size, None, dtype=object)
        for row in np.flatnonzero(ended):
            # A copy, so that no returned array depends on how ALE reuses its result buffers.
            final_obs[row] = self._shaped(batch[row : row + 1])[0].copy()
        infos["final_obs"] = final_obs
        infos["_final_obs"] = ended.copy()
        return infos


def make_ale_native(spec: VecSpec, **backend_kwargs: Any) -> AleNativeVectorEnv:
    """The backend factory: checks ``backend_kwargs`` by name before building."""
    unknown = sorted(set(backend_kwargs) - set(BACKEND_OPTIONS))
    if unknown:
        raise TypeError(
            f"backend 'ale-native' has no option {', '.join(map(repr, unknown))}; its options are: "
            f"{', '.join(BACKEND_OPTIONS)}"
        )
    return AleNativeVectorEnv(spec, **backend_kwargs)


@hookimpl
def register_backends(register):
    register(
        "ale-native",
        make_ale_native,
        family="atari",
        options=BACKEND_OPTIONS,
        description="ALE's C++ AtariVectorEnv: Atari stacks only, threads, fastest",
    )
