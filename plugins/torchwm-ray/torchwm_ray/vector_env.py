"""The ``ray`` backend: envs spread over Ray actors, several envs an actor.

Each `EnvActor` builds its envs with `torchwm.factory.build_env` and steps them
with `torchwm.vector.env_group.EnvGroup`, writing into its own small batch
buffers, which it returns. `RayVectorEnv` copies those rows into the batch the
base class returns, so autoreset, seeding and infos are the code ``sync`` runs.
A step of all envs goes through a Ray Compiled Graph (shared-memory channels,
about 1 ms less per actor than an actor call on a small machine); resets,
``call``, ``set_attr``, partial steps and restarts use ordinary actor calls,
which an actor runs beside the graph's loop. Asynchronous batches
(``batch_size < num_envs``) wait on the actors' results with `ray.wait`; an
actor's envs come back together, and rows that arrive before they are asked
for wait in the batch until a later `recv`.

Faults (docs/backends.md, "Faults on Ray"): an env's exception comes back as an
`EnvFailure` with the rows of the envs that went on; a dead actor makes the env
lost for good (``_failure``); envs whose state moved on without their rows
reaching the user (an interrupted wait) are marked ``_lost`` and must be reset;
every wait runs against one `Deadline`.
"""

from __future__ import annotations

import atexit
import collections
import logging
import math
import os
import pickle
import threading
import time
import traceback
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import ray.exceptions
from gymnasium import spaces
from ray import cloudpickle
from ray.dag import InputNode, MultiOutputNode

from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError, WorkerError, worker_error
from torchwm.spec import VecSpec, check_count, check_timeout
from torchwm.vector.base import VectorEnv, check_batch_size
from torchwm.vector.batching import ARRAY_SPACES, create_batch, put_rows, take_rows
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.pool import Batch, Deadline, split_envs

DEFAULT_TIMEOUT = 120.0  # seconds; actors may first have to be scheduled and import torchwm
# Ray sends a return value inline with the reply when it is under 100 KiB (its default
# max_direct_call_object_size) and through the object store otherwise, which is slower.
INLINE_BYTES = 90_000


def obs_chunks(space: gym.Space, rows: int) -> int:
    """In how many return values an actor sends ``rows`` observations (0: with the rest of the result)."""
    if not isinstance(space, spaces.Box):
        return 0
    size = rows * int(np.prod(space.shape)) * space.dtype.itemsize
    return 0 if size <= INLINE_BYTES else math.ceil(size / INLINE_BYTES)


class EnvFailure(Exception):
    """Something raised inside an actor; sent back to the driver, which turns it into a `WorkerError`.

    Args:
        env_index: the global index of the env that raised (None: the actor itself, not one env).
        actor_index: the actor it happened on.
        remote_traceback: the actor's traceback.
        rows: the actor's result for the other envs of the call, which went on without the one that
            raised (``(obs, rewards, terminations, truncations, infos)``; None when there is none).
        pickled_type: the type of the exception, cloudpickled (None: it could not be), so that the
            `WorkerError` is also an instance of it, as on the process backends.
    """

    def __init__(self, env_index: int | None, actor_index: int, remote_traceback: str, rows: tuple | None = None,
                 pickled_type: bytes | None = None) -> None:
        super().__init__(env_index, actor_index, remote_traceback, rows, pickled_type)
        self.env_index = env_index
        self.actor_index = actor_index
        self.remote_traceback = remote_traceback
        self.rows = rows
        self.pickled_type = pickled_type

    @classmethod
    def of(cls, exc: BaseException, env_index: int | None, actor_index: int) -> EnvFailure:
        """The failure of ``exc``: its traceback and its type, as a process backend's worker sends them."""
        try:
            # Ray's cloudpickle, not the cloudpickle package: a class that came to the actor by value
            # (an env defined in the driver's __main__ or a test module) then goes back as the
            # driver's own class, which Ray's cloudpickle tracks.
            pickled_type = cloudpickle.dumps(type(exc))
        except Exception:
            pickled_type = None
        return cls(env_index, actor_index, "".join(traceback.format_exception(exc)), None, pickled_type)

    def error(self, what: str, envs: list[int]) -> WorkerError:
        """The `WorkerError` the user sees (also an instance of the env's exception type); ``envs`` are the actor's envs."""
        where = (f"env {self.env_index} (on Ray actor {self.actor_index})" if self.env_index is not None
                 else f"Ray actor {self.actor_index} (envs {envs})")
        summary = self.remote_traceback.strip().splitlines()[-1] if self.remote_traceback.strip() else "an error"
        try:
            original_type = None if self.pickled_type is None else cloudpickle.loads(self.pickled_type)
        except Exception:  # a type the driver cannot import: plain WorkerError, the message names it
            original_type = None
        return worker_error(f"{what}: {where} raised {summary}", original_type=original_type,
                            env_index=self.env_index, worker_index=self.actor_index,
                            remote_traceback=self.remote_traceback)


class ActorRestarted(Exception):
    """Raised by a restarted actor asked to step envs it has not reset since it came back."""


class ActorDiedError(WorkerError):
    """A Ray actor died (its process ended, or its node went away); ``worker_index`` is the actor."""


class EnvActor:
    """Hosts ``count`` envs of ``spec`` in one Ray actor process (used through `ray.remote`).

    A restarted actor (``max_restarts``) runs ``__init__`` again: its envs are new and
    must be reset before they step, which the driver does.

    An env that raises does not stop the call: the actor's other envs go on, and the error
    goes back as an `EnvFailure` holding their rows, so the driver keeps every row it can.
    """

    def __init__(self, spec: VecSpec, count: int, gym_spec: gym.envs.registration.EnvSpec | None = None,
                 actor_index: int = 0, first_env: int = 0) -> None:
        from torchwm.factory import build_env

        if gym_spec is not None and gym_spec.id not in gym.registry:
            # An env registered at run time in the driver (a user's own, or the conformance
            # kit's) is unknown to a fresh actor process until it is registered here too.
            gym.registry[gym_spec.id] = gym_spec
        self.actor_index = actor_index
        self.first_env = first_env  # the global index of local env 0, so that errors name the env
        envs = [build_env(spec) for _ in range(count)]
        first = envs[0]
        self.count = count
        self.observations = create_batch(first.observation_space, count)
        self.obs_chunks = obs_chunks(first.observation_space, count)
        self.rewards = np.zeros(count, dtype=np.float64)
        self.terminations = np.zeros(count, dtype=np.bool_)
        self.truncations = np.zeros(count, dtype=np.bool_)
        self.group = EnvGroup(envs, spec.autoreset, self.observations, self.rewards, self.terminations,
                              self.truncations)
        self.graph_step_running = False
        # Ray ran __init__ again after a crash: the envs are new, and the driver must hear of it
        # even if the crash happened between two calls.
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed

    def describe(self) -> dict[str, Any]:
        env = self.group.envs[0]
        return {
            "observation_space": env.observation_space,
            "action_space": env.action_space,
            "metadata": dict(env.metadata),
            "render_mode": env.render_mode,
            "node_id": ray.get_runtime_context().get_node_id(),
            "obs_chunks": self.obs_chunks,
            "pid": os.getpid(),
        }

    def _result(self, local_ids: list[int], infos: list[dict], chunked: bool = True) -> tuple:
        """The rows of ``local_ids``: ``(obs, rewards, terminations, truncations, infos)``.

        With ``obs_chunks``, the observations go as that many separate return values instead,
        after ``(None, rewards, terminations, truncations, infos)``: Ray sends return values
        under 100 kB inline with the reply and puts larger ones in its object store, which
        costs more than the step of a few Atari envs.
        """
        if len(local_ids) == self.count:
            # Ray copies the return value when the method returns, so the buffers can be reused.
            obs, rewards, terminations, truncations = self.observations, self.rewards, self.terminations, self.truncations
        else:
            ids = np.asarray(local_ids)
            obs = take_rows(self.group.observation_space, self.observations, ids)
            rewards, terminations, truncations = self.rewards[ids], self.terminations[ids], self.truncations[ids]
        if not (chunked and self.obs_chunks):
            return obs, rewards, terminations, truncations, infos
        return ((None, rewards, terminations, truncations, infos),
                *np.array_split(np.ascontiguousarray(obs).reshape(-1), self.obs_chunks))

    def _each_env(self, local_ids: list[int], run: Any) -> tuple[list[Any], EnvFailure | None]:
        """``run(row, i)`` (a list of one result) for each env in turn; the others go on after a failure.

        Returns the results (``{}`` for an env that raised) and the first failure, without rows.
        """
        results: list[Any] = []
        failed = None
        for row, i in enumerate(local_ids):
            try:
                results += run(row, i)
            except Exception as exc:
                results.append({})
                failed = failed or EnvFailure.of(exc, self.first_env + i, self.actor_index)
        return results, failed

    def _raise_with_rows(self, failed: EnvFailure, local_ids: list[int], infos: list[dict]) -> None:
        """Raise ``failed`` again, carrying the rows of ``local_ids`` (the others' are good)."""
        # A new one, as an exception travels as its constructor's arguments.
        raise EnvFailure(failed.env_index, self.actor_index, failed.remote_traceback,
                         self._result(local_ids, infos, chunked=False), failed.pickled_type)

    def reset(self, local_ids: list[int], seeds: list[int | None], options: dict | None) -> tuple:
        if len(local_ids) == self.count:
            self.restarted = False
        infos, failed = self._each_env(local_ids, lambda row, i: self.group.reset([i], [seeds[row]], options))
        if failed is not None:
            self._raise_with_rows(failed, local_ids, infos)
        return self._result(local_ids, infos)

    def step(self, local_ids: list[int], actions: Any, chunked: bool = True) -> tuple:
        if self.restarted:
            raise ActorRestarted()
        array_actions = isinstance(self.group.action_space, ARRAY_SPACES)

        def step_one(row: int, i: int) -> list[dict]:
            action = actions[row : row + 1] if array_actions else take_rows(self.group.action_space, actions, np.array([row]))
            return self.group.step([i], action)

        infos, failed = self._each_env(local_ids, step_one)
        if failed is not None:
            self._raise_with_rows(failed, local_ids, infos)
        return self._result(local_ids, infos, chunked)

    def step_all(self, actions: Any) -> bytes:
        """Step every env; the compiled graph's task. Its channels take any size, so no chunks.

        The result goes pickled: a compiled graph hands NumPy arrays to the driver as views of its
        shared-memory channel, which cannot take the next step's result until every view is gone,
        and an array in ``infos`` (``final_obs``) may be kept by the user for ever. A failure is
        returned, not raised: when one task of a compiled graph raises, Ray 2.60 raises that error
        for every actor's output and the other actors' rows are lost.
        """
        self.graph_step_running = True
        try:
            return pickle.dumps(self.step(list(range(self.count)), actions, chunked=False), protocol=5)
        except EnvFailure as failure:
            outcome = failure
        except Exception as exc:
            outcome = EnvFailure.of(exc, None, self.actor_index)
        finally:
            self.graph_step_running = False
        try:
            return pickle.dumps(outcome, protocol=5)
        except Exception:  # the rows themselves cannot be pickled (an info value): send the error alone
            return pickle.dumps(EnvFailure(outcome.env_index, self.actor_index,
                                           outcome.remote_traceback + traceback.format_exc(),
                                           pickled_type=outcome.pickled_type), protocol=5)

    def in_graph_step(self) -> bool:
        """Whether a step of the compiled graph runs now (an ordinary call, answered beside the graph's loop)."""
        return self.graph_step_running

    def call(self, name: str, args: tuple, kwargs: dict) -> bytes:
        """Each env's value, pickled here so that a value that cannot travel names its env."""
        values, failed = self._each_env(list(range(self.count)),
                                        lambda row, i: self.group.call([i], name, args, kwargs))
        if failed is not None:
            raise failed
        try:
            return cloudpickle.dumps(values)
        except Exception as exc:
            error = exc  # find the value that cannot travel, to name its env
        for i, value in enumerate(values):
            try:
                cloudpickle.dumps(value)
            except Exception as exc:
                # A TypeError, as the process backends report a reply they cannot pickle.
                raise EnvFailure.of(TypeError(
                    f"{name!r} of this env is a {type(value).__name__}, which cannot be sent from the Ray actor "
                    f"to the driver ({type(exc).__name__}: {exc}); call a method that returns plain data instead"
                ), self.first_env + i, self.actor_index) from None
        raise error

    def set_attr(self, name: str, values: list[Any]) -> None:
        def set_one(row: int, i: int) -> list[dict]:
            self.group.set_attr([i], name, [values[row]])
            return [{}]

        _, failed = self._each_env(list(range(self.count)), set_one)
        if failed is not None:
            raise failed

    def close(self) -> None:
        self.group.close()


class _LocalRay:
    """The local Ray instance torchwm started, shared by the ray envs of this process.

    It stops when the last env using it closes (``stop_ray_on_close=True``) or when the
    process exits. A Ray that someone else started or connected to is never stopped.
    """

    lock = threading.Lock()
    users = 0
    started = False

    @classmethod
    def acquire(cls, address: str | None, init_kwargs: dict[str, Any]) -> bool:
        """Connect to Ray (start it locally if ``address`` is None); True if torchwm owns it."""
        with cls.lock:
            if ray.is_initialized():
                if not cls.started:
                    return False
            else:
                kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                          "configure_logging": False}
                if address is None:
                    kwargs["num_cpus"] = os.cpu_count() or 1
                else:
                    kwargs["address"] = address
                kwargs.update(init_kwargs)
                ray.init(**kwargs)
                cls.started = True
                atexit.register(cls.stop)
            cls.users += 1
            return True

    @classmethod
    def release(cls, stop: bool) -> None:
        with cls.lock:
            cls.users = max(cls.users - 1, 0)
            if stop and cls.users == 0 and cls.started:
                ray.shutdown()
                cls.started = False

    @classmethod
    def stop(cls) -> None:
        with cls.lock:
            if cls.started and ray.is_initialized():
                ray.shutdown()
            cls.started = False


class RayVectorEnv(VectorEnv):
    """torchwm envs on Ray actors: ``num_actors`` actors hosting ``envs_per_actor`` envs each.

    Args:
        spec: what to build (from `torchwm.make_vec`).
        num_actors: how many actors (default: one per CPU of this machine, at most ``num_envs``).
        envs_per_actor: envs in each actor (the last one takes the rest); give this or ``num_actors``, or
            both if they agree. The split is `torchwm.vector.pool.split_envs`'s, as for ``num_workers``.
        address: an existing cluster to join (``"auto"``, ``"ray://host:port"`` or ``"host:port"``).
            ``None`` joins the Ray this process is already connected to, or starts a local one.
            A process connects to one Ray at a time: once connected, ``address`` is not used.
        actor_options: `ray.remote` options of every actor (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ...). By default actors are spread over the nodes (``"SPREAD"``).
        restart_on_crash: let Ray restart a dead actor (``max_restarts`` times); its envs begin new
            episodes and the interrupted steps come back truncated with ``infos["worker_restarted"]``.
        max_restarts: restarts allowed for each actor when ``restart_on_crash`` is set.
        init_kwargs: extra `ray.init` arguments when this env starts or joins Ray.
        stop_ray_on_close: stop the Ray instance this env started when the last env using it
            closes (default); ``False`` keeps it for the next env, until the process exits.
        compiled_graph: step all envs at once through a Ray Compiled Graph (default), compiled at
            the first such step; ``False``: one ordinary actor call per actor and step. Not used with
            ``restart_on_crash`` or ``batch_size < num_envs``. While the graph lives, each actor polls
            its input channel and shows as a busy core even when idle (it yields to other work).
        batch_size: `recv` returns the first ``batch_size`` envs ready (``infos["env_id"]``).
        timeout: seconds a wait on the actors may take before `torchwm.errors.EnvTimeoutError`.
        copy: return copies of the observation batch (default) or the internal buffer.

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="ray", seed=0,
        ...                         backend_kwargs={"num_actors": 2})      # doctest: +SKIP
        >>> envs.actor_env_ids                                             # doctest: +SKIP
        [[0, 1], [2, 3]]
    """

    def __init__(
        self,
        spec: VecSpec,
        *,
        num_actors: int | None = None,
        envs_per_actor: int | None = None,
        address: str | None = None,
        actor_options: dict[str, Any] | None = None,
        restart_on_crash: bool = False,
        max_restarts: int = 3,
        init_kwargs: dict[str, Any] | None = None,
        stop_ray_on_close: bool = True,
        compiled_graph: bool = True,
        batch_size: int | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        copy: bool = True,
    ) -> None:
        self._actors: list[Any] = []
        self._graph: Any = None
        self._owns_ray = False
        self._pending: dict[Any, tuple[int, np.ndarray, list]] = {}  # first ref -> (actor, global ids, all refs)
        self._failure: WorkerError | None = None  # an actor died (without restart_on_crash): nothing more works
        # Everything is checked before Ray starts, so bad options cost nothing.
        self._actor_ranges = split_envs(
            spec.num_envs,
            None if num_actors is None else check_count("num_actors", num_actors),
            None if envs_per_actor is None else check_count("envs_per_actor", envs_per_actor),
            "ray", unit="actor",
        )
        if address is not None and not isinstance(address, str):
            raise TypeError(f"address must be a str such as 'auto' or 'ray://127.0.0.1:10001', got {address!r}")
        if actor_options is not None and not isinstance(actor_options, dict):
            raise TypeError(f"actor_options must be a dict of ray.remote options, got {actor_options!r}")
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise TypeError(f"init_kwargs must be a dict of ray.init arguments, got {init_kwargs!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
        n = spec.num_envs
        check_batch_size(batch_size, n)
        timeout = check_timeout(timeout)  # the base class checks it too, but Ray must not start first

        self._restart_on_crash = bool(restart_on_crash)
        self._stop_ray_on_close = bool(stop_ray_on_close)
        options = {"scheduling_strategy": "SPREAD", **(actor_options or {})}
        options["max_restarts"] = max_restarts if restart_on_crash else 0
        self._owns_ray = _LocalRay.acquire(address, dict(init_kwargs or {}))
        try:
            actor_class = ray.remote(EnvActor).options(**options)
            gym_spec = gym.registry.get(spec.id)
            self._actors = [actor_class.remote(spec, len(r), gym_spec, k, r.start) for k, r in enumerate(self._actor_ranges)]
            # Actors may first have to be scheduled and import torchwm: their start gets at least the default.
            start_timeout = None if timeout is None else max(timeout, DEFAULT_TIMEOUT)
            described = self._get([a.describe.remote() for a in self._actors], Deadline.after(start_timeout),
                                  "starting the actors")
        except BaseException:
            self._release()
            raise
        first = described[0]
        self._actor_node_ids = [d["node_id"] for d in described]
        self._actor_pids = [d["pid"] for d in described]
        super().__init__(spec, first["observation_space"], first["action_space"], metadata=first["metadata"],
                         render_mode=first["render_mode"], batch_size=batch_size, timeout=timeout, copy=copy)
        # The pool's batch (rows and their one `store`), though Ray's actors are not the pool's transports.
        self._batch = Batch(first["observation_space"], n)
        self._observations, self._rewards = self._batch.observations, self._batch.rewards
        self._terminations, self._truncations = self._batch.terminations, self._batch.truncations
        self._actor_of_env = np.zeros(n, dtype=np.int64)
        for k, r in enumerate(self._actor_ranges):
            self._actor_of_env[r.start : r.stop] = k
        self._obs_chunks = [d["obs_chunks"] for d in described]
        # Steps of all envs at once go through a Ray Compiled Graph (compiled at the first such step):
        # shared-memory channels instead of a gRPC call per actor. Not with restart_on_crash (a graph
        # does not survive its actor's death), nor with batch_size < num_envs (a graph's results come
        # all together, never the first ready).
        self._use_graph = bool(compiled_graph) and not self._restart_on_crash and self.batch_size == n
        self._graph_refs: list[Any] | None = None  # the graph's step in flight: one ref per actor
        self._graph_sent = 0.0  # when that step was sent (time.monotonic)
        self._graph_latencies: collections.deque[float] = collections.deque(maxlen=16)  # recent steps, s
        self._graph_warm = False  # the first step of a new graph also starts its actors' loops
        # The graph's channels no longer match its executions (a wait on them was interrupted): it is
        # torn down before the next step of all envs, which compiles a new one.
        self._graph_stale = False
        # Envs whose last results never reached the user although their state moved on (an interrupted
        # wait, an env that raised): they must be reset before they step again.
        self._lost = np.zeros(n, dtype=bool)

    # -- what the cluster looks like ----------------------------------------------------------------

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, one per actor."""
        return list(self._actors)

    @property
    def actor_env_ids(self) -> list[list[int]]:
        """The env ids each actor hosts."""
        return [list(r) for r in self._actor_ranges]

    @property
    def compiled_graph(self) -> bool:
        """Whether steps of all envs now go through a Ray Compiled Graph (compiled at the first one)."""
        return self._graph is not None and not self._graph_stale

    @property
    def worker_pids(self) -> list[int]:
        """The process id of each actor when it started (tests and fault injection use it)."""
        return list(self._actor_pids)

    @property
    def actor_node_ids(self) -> list[str]:
        """The Ray node id each actor runs on (`ray.get_runtime_context().get_node_id()` there)."""
        return list(self._actor_node_ids)

    # -- the backend primitives -------------------------------------------------------------------

    def _by_actor(self, ids: np.ndarray) -> list[tuple[int, np.ndarray]]:
        actors = self._actor_of_env[ids]
        return [(int(k), ids[actors == k]) for k in np.unique(actors)]

    def _remote(self, k: int, method: str, *args: Any) -> list[Any]:
        """Call ``method`` of actor ``k``; the refs of its return values (several when obs are chunked)."""
        chunks = self._obs_chunks[k]
        call = getattr(self._actors[k], method)
        if not chunks:
            return [call.remote(*args)]
        return list(call.options(num_returns=1 + chunks).remote(*args))

    def _fetch(self, k: int, refs: list[Any], deadline: Deadline, what: str) -> tuple:
        """The result of one actor call: ``(obs, rewards, terminations, truncations, infos)``."""
        parts = self._get(refs, deadline, what, [k] * len(refs))
        if len(parts) == 1:
            return parts[0]
        _, rewards, terminations, truncations, infos = parts[0]
        shape = self.single_observation_space.shape
        assert shape is not None  # an array space: the only kind sent in chunks
        obs = np.concatenate(parts[1:]).reshape(len(rewards), *shape)
        return obs, rewards, terminations, truncations, infos

    def _reset_envs(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> list[dict]:
        self._check_usable()
        seed_of = dict(zip(ids.tolist(), seeds, strict=True))
        calls = []
        for k, global_ids in self._by_actor(ids):
            local = (global_ids - self._actor_ranges[k].start).tolist()
            calls.append((k, global_ids, self._remote(k, "reset", local, [seed_of[i] for i in global_ids.tolist()], options)))
        # Until its rows arrive, an env being reset has a state the batch does not show.
        self._lost[ids] = True
        infos = self._collect(calls, Deadline.after(self.timeout), "reset")
        return [infos[i] for i in ids.tolist()]

    def _send_step(self, ids: np.ndarray, actions: Any) -> None:
        self._check_usable()
        if self._lost[ids].any():
            raise gym.error.ResetNeeded(
                f"envs {ids[self._lost[ids]].tolist()} must be reset before they step again: their last reset or "
                f"step failed or was interrupted, so their state is not the one their rows show")
        if self._use_graph and ids.size == self.num_envs:  # every env, in env order (the base class sees to it)
            self._send_graph_step(actions)
            return
        position = {int(i): row for row, i in enumerate(ids.tolist())}
        for k, global_ids in self._by_actor(ids):
            rows = np.asarray([position[i] for i in global_ids.tolist()])
            actor_actions = (actions[rows] if isinstance(self.single_action_space, ARRAY_SPACES)
                             else take_rows(self.single_action_space, actions, rows))
            refs = self._remote(k, "step", (global_ids - self._actor_ranges[k].start).tolist(), actor_actions)
            self._pending[refs[0]] = (k, global_ids, refs)

    def _wait_ready(self, candidates: np.ndarray, count: int, timeout: float | None) -> tuple[np.ndarray, list[dict]]:
        self._check_usable()
        try:
            if self._graph_refs is not None:  # a step of all envs, so candidates are all envs too
                return np.arange(self.num_envs), self._wait_graph_step(timeout)
            return self._wait_calls(candidates, count, Deadline.after(timeout))
        except (WorkerError, EnvTimeoutError, ClosedEnvironmentError):
            raise  # each path left the env in a known state
        except EnvFailure as failure:  # a restarted actor's envs failed to reset
            self._give_up(np.flatnonzero(self._in_flight))
            raise failure.error("step", list(self._actor_ranges[failure.actor_index])) from None
        except BaseException:
            # Interrupted (Ctrl-C) or failed in Ray itself: the results in flight are given up. Their envs
            # stepped, or will, so they must be reset before their next step.
            self._give_up(np.flatnonzero(self._in_flight))
            raise

    def _wait_calls(self, candidates: np.ndarray, count: int, deadline: Deadline) -> tuple[np.ndarray, list[dict]]:
        """`_wait_ready` for steps sent as ordinary actor calls."""
        wanted = set(candidates.tolist())
        while (missing := count - sum(1 for i in self._ready if i in wanted)) > 0:
            calls = [ref for ref, (_, ids, _) in self._pending.items() if wanted.intersection(ids.tolist())]
            if not calls:
                # Envs the base class counts in flight have neither a result nor a call (an interrupt
                # between our return and the base class's bookkeeping): their results are gone.
                lost = np.asarray(sorted(wanted - set(self._ready)), dtype=np.int64)
                self._give_up(lost)
                raise gym.error.ResetNeeded(f"the results of envs {lost.tolist()} were lost (an interrupted recv()); "
                                            f"reset them before they step again")
            if sum(self._pending[ref][1].size for ref in calls) <= missing:
                done = calls  # every call is needed: fetch them in turn, without a ray.wait round trip
            else:
                done, _ = ray.wait(calls, num_returns=1, timeout=deadline.remaining())
                if not done:
                    raise EnvTimeoutError(
                        f"step: no Ray actor answered within {deadline.seconds:g} s; envs "
                        f"{sorted(wanted - set(self._ready))} are still stepping (recv() waits for them again; "
                        f"raise timeout= in backend_kwargs or recv(timeout=) for slow envs)")
            if len(done) > 1:
                # Wait for all of them in one ray.get; the loop below then finds every result ready.
                all_refs = [r for ref in done for r in self._pending[ref][2]]
                ray.wait(all_refs, num_returns=len(all_refs), timeout=deadline.remaining(), fetch_local=True)
            for ref in done:
                k, global_ids, refs = self._pending[ref]
                try:
                    result = self._fetch(k, refs, deadline, "step")
                except EnvTimeoutError:
                    raise  # still pending: a later recv() waits for it again
                except EnvFailure as failure:
                    del self._pending[ref]
                    if failure.rows is not None:
                        self._store(global_ids, failure.rows)
                    self._fail_step(failure.error("step", list(self._actor_ranges[k])), deadline)
                except ActorDiedError:
                    del self._pending[ref]
                    if not self._restart_on_crash:
                        raise  # _get has marked the env as lost for good
                    result = self._recover(k, global_ids)
                except WorkerError as error:  # the actor raised outside any env: none of its rows came
                    del self._pending[ref]
                    self._lost[global_ids] = True
                    self._fail_step(error, deadline)
                else:
                    del self._pending[ref]
                self._ready.update(self._store(global_ids, result))
        chosen = [i for i in self._ready if i in wanted][:count]
        return np.asarray(chosen, dtype=np.int64), [self._ready.pop(i) for i in chosen]

    def _fail_step(self, error: WorkerError, deadline: Deadline) -> None:
        """An env raised during a step: finish the rest of the step, then raise with nothing in flight.

        As with torchwm's process backends, the other envs keep their new state (their rows are in
        the batch) and the env that raised must be reset before it steps again.
        """
        calls = list(self._pending.values())
        self._pending.clear()
        self._ready.clear()
        self._in_flight[:] = False
        for _, ids, _ in calls:
            self._lost[ids] = True  # until their rows arrive: a call that passes the deadline leaves them lost
        try:
            self._collect(calls, deadline, "step")
        except (WorkerError, EnvTimeoutError):
            pass  # the first error is the one to report
        if error.env_index is not None:
            self._lost[error.env_index] = True
        raise error

    def _collect(self, calls: list[tuple[int, np.ndarray, list]], deadline: Deadline, what: str) -> dict[int, dict]:
        """Wait for every actor call ``(actor, global ids, refs)``, store the rows of each, then raise the first error.

        The envs of a call whose rows arrived are no longer lost; the env that raised is.
        """
        infos: dict[int, dict] = {}
        first_error: BaseException | None = None
        for k, global_ids, refs in calls:
            try:
                infos.update(self._store(global_ids, self._fetch(k, refs, deadline, what)))
                self._lost[global_ids] = False
            except EnvFailure as failure:
                if failure.rows is not None:
                    infos.update(self._store(global_ids, failure.rows))
                    self._lost[global_ids] = False
                self._lost[global_ids if failure.env_index is None else failure.env_index] = True
                first_error = first_error or failure.error(what, list(self._actor_ranges[k]))
            except (WorkerError, EnvTimeoutError) as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return infos

    def _give_up(self, envs: np.ndarray) -> None:
        """Forget the results in flight for ``envs`` (their rows will never be stored): they must be reset."""
        self._lost[envs] = True
        self._in_flight[envs] = False
        self._pending.clear()
        self._ready.clear()
        if self._graph_refs is not None:  # a graph step: its channels no longer match its executions
            self._graph_refs = None
            self._graph_stale = True

    def _check_usable(self) -> None:
        """Raise if an actor is lost; before any call, let an interrupted graph step finish.

        An actor runs ordinary calls beside its graph loop, so a reset could otherwise run while
        the interrupted step still steps the same env, which would then move on past the reset.
        Tearing the graph down waits for its loops to end, after their step.
        """
        if self._failure is not None:
            raise WorkerError(f"this Ray vector env lost an actor earlier; close() it and make a new one "
                              f"({self._failure.args[0].splitlines()[0]})", worker_index=self._failure.worker_index)
        if self._graph_stale:
            self._teardown_graph(kill_actors=False)

    # -- the compiled graph (steps of all envs) ---------------------------------------------------

    def _send_graph_step(self, actions: Any) -> None:
        per_actor = [actions[r.start : r.stop] if isinstance(self.single_action_space, ARRAY_SPACES)
                     else take_rows(self.single_action_space, actions, np.arange(r.start, r.stop))
                     for r in self._actor_ranges]
        try:
            if self._graph is None:
                with InputNode() as actions_of:
                    steps = [actor.step_all.bind(actions_of[k]) for k, actor in enumerate(self._actors)]
                submit_timeout = -1 if self.timeout is None else self.timeout  # -1: Ray's "no limit"
                self._graph = MultiOutputNode(steps).experimental_compile(_submit_timeout=submit_timeout)
                self._graph_warm = False
            self._graph_sent = time.monotonic()
            self._graph_refs = self._graph.execute(*per_actor)
        except (ray.exceptions.RayActorError, ray.exceptions.RayChannelError) as exc:
            self._graph_failed(exc)  # an actor died: compiling or sending to it fails
        except BaseException:
            # Interrupted while writing the actions: some actors may step, others not.
            self._give_up(self._all_ids)
            raise

    def _wait_graph_step(self, timeout: float | None) -> list[dict]:
        refs = self._graph_refs
        assert refs is not None
        # Ray 2.60 reads a channel by polling shared memory (a sched_yield loop), so a driver that
        # waits at once takes a core from the actors it waits for (measured: 1 ms of a 2.8 ms step of
        # 8 Pong envs on 2 cores). Sleep most of the shortest recent step first; the poll does the rest.
        if self._graph_latencies:
            nap = 0.7 * min(self._graph_latencies) - (time.monotonic() - self._graph_sent)
            if nap > 0:
                time.sleep(nap if timeout is None else min(nap, timeout))
        if not self._graph_warm and timeout is not None:
            # The first step of a new graph waits for its actors to start their loops (seconds on a
            # busy machine), which is part of starting the actors, so it gets their time limit.
            timeout = max(timeout, DEFAULT_TIMEOUT)
        deadline = Deadline.after(timeout)
        outcomes = []
        try:
            # One get per actor. An env's failure comes back as a value (see EnvActor.step_all), so
            # every actor's rows arrive; an error raised here concerns the whole graph.
            for ref in refs:
                outcomes.append(pickle.loads(ray.get(ref, timeout=deadline.remaining(forever=-1))))
        except ray.exceptions.RayChannelTimeoutError:
            late = self._actors_in_graph_step()
            self.close()  # a compiled graph's result can be asked for only once: nothing else can collect it
            which = ", ".join(f"Ray actor {k} (envs {list(self._actor_ranges[k])})" for k in late) or "the Ray actors"
            raise EnvTimeoutError(
                f"step: {which} did not answer within {deadline.seconds:g} s, and a compiled graph's step "
                f"cannot be waited for again, so this vector env is now closed; make a new one (raise timeout= in "
                f"backend_kwargs for slow envs, or pass compiled_graph=False to be able to recv() again)") from None
        except (ray.exceptions.RayActorError, ray.exceptions.RayChannelError) as exc:
            self._graph_failed(exc)
        except ray.exceptions.RayTaskError as exc:  # not an env: step_all returns those
            self._give_up(self._all_ids)
            raise WorkerError("step: a Ray actor's step of the compiled graph failed; every env must be reset",
                              remote_traceback=str(exc)) from None
        self._graph_refs = None
        infos: list[dict] = []
        first_failure: WorkerError | None = None
        for k, outcome in enumerate(outcomes):
            ids = np.arange(self._actor_ranges[k].start, self._actor_ranges[k].stop)
            if isinstance(outcome, EnvFailure):
                if outcome.rows is not None:
                    self._store(ids, outcome.rows)
                # The env that raised, or all the actor's envs when their rows could not come.
                self._lost[outcome.env_index if outcome.rows is not None else ids] = True
                first_failure = first_failure or outcome.error("step", ids.tolist())
                continue
            infos += self._store(ids, outcome).values()
        if first_failure is not None:
            self._in_flight[:] = False
            raise first_failure
        if self._graph_warm:  # the first step's time says nothing of the next ones
            self._graph_latencies.append(time.monotonic() - self._graph_sent)
        self._graph_warm = True
        return infos

    def _actors_in_graph_step(self) -> list[int]:
        """The actors still in the graph's step, asked with ordinary calls (a result read from the graph
        covers every actor, so a timeout of it does not say which one is late)."""
        asked = [actor.in_graph_step.remote() for actor in self._actors]
        ray.wait(asked, num_returns=len(asked), timeout=5)
        late = []
        for k, ref in enumerate(asked):
            try:
                if ray.get(ref, timeout=0):
                    late.append(k)
            except Exception:  # no answer (an actor held in C code, or dead): it did not finish either
                late.append(k)
        return late

    def _graph_failed(self, exc: BaseException) -> None:
        """The graph broke (an actor died): tear it down and raise `ActorDiedError` naming the dead actor."""
        self._use_graph = False  # its actors are gone; ordinary calls report them from now on
        self._graph_refs = None
        self._teardown_graph(kill_actors=False)
        # The graph's error may not say which actor died: ask each one, briefly.
        for k, actor in enumerate(self._actors):
            try:
                ray.get(actor.describe.remote(), timeout=10)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                self._lose(ActorDiedError(
                    f"step: Ray actor {k} died, taking envs {list(self._actor_ranges[k])} with it (pass "
                    f"restart_on_crash=True in backend_kwargs to let Ray restart it) ({type(exc).__name__})",
                    worker_index=k, remote_traceback=str(exc)))
        self._lose(WorkerError(f"step: the compiled graph of the Ray actors failed ({type(exc).__name__})",
                               remote_traceback=str(exc)))

    def _teardown_graph(self, kill_actors: bool) -> None:
        graph, self._graph = self._graph, None
        self._graph_stale = False
        # With kill_actors the actors were killed first (see _close): Ray would log a traceback for
        # each task it can no longer cancel, which says nothing the user does not know.
        graph_logger = logging.getLogger("ray.dag.compiled_dag_node")
        level = graph_logger.level
        if kill_actors:
            graph_logger.setLevel(logging.CRITICAL)
        try:
            if graph is not None and ray.is_initialized():
                graph.teardown(kill_actors=kill_actors)
        except Exception:
            pass  # a graph whose actor died may fail to tear down cleanly; its actors are killed at close()
        finally:
            graph_logger.setLevel(level)

    def _lose(self, error: WorkerError) -> None:
        """An actor is gone for good: every later call raises, until close()."""
        self._failure = error
        self._pending.clear()
        self._ready.clear()
        if hasattr(self, "_in_flight"):  # not yet while the actors start
            self._in_flight[:] = False
        raise error

    def _call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        self._check_usable()
        refs = [a.call.remote(name, args, kwargs) for a in self._actors]
        results = self._get_each_env(refs, f"call({name!r})")
        return [value for part in results for value in cloudpickle.loads(part)]

    def _set_attr(self, name: str, values: list[Any]) -> None:
        self._check_usable()
        refs = [a.set_attr.remote(name, values[r.start : r.stop]) for a, r in zip(self._actors, self._actor_ranges)]
        self._get_each_env(refs, f"set_attr({name!r})")

    def _get_each_env(self, refs: list[Any], what: str) -> list[Any]:
        """`_get` of one call per actor that concerns no rows (``call``, ``set_attr``); it changes no state here."""
        try:
            return self._get(refs, Deadline.after(self.timeout), what)
        except EnvFailure as failure:
            raise failure.error(what, list(self._actor_ranges[failure.actor_index])) from None

    def _close(self) -> None:
        try:
            if ray.is_initialized():
                step_running = self._graph_refs is not None  # a timed-out step of the graph
                if step_running:
                    # Tearing down the graph would wait for that step to end: its actors go first.
                    for actor in self._actors:
                        ray.kill(actor, no_restart=True)
                self._teardown_graph(kill_actors=step_running)
            if self._actors and ray.is_initialized():
                if not self._pending and self._graph_refs is None:  # else an actor may be stuck in a step
                    closing = [a.close.remote() for a in self._actors]
                    try:
                        ray.wait(closing, num_returns=len(closing), timeout=10)
                    except Exception:
                        pass  # an actor that died already has nothing to close
                for actor in self._actors:
                    ray.kill(actor, no_restart=True)
        finally:
            self._actors = []
            self._pending.clear()
            self._graph_refs = None
            self._release()

    # -- helpers ----------------------------------------------------------------------------------

    def _release(self) -> None:
        if self._owns_ray:
            self._owns_ray = False
            _LocalRay.release(stop=self._stop_ray_on_close)

    def _store(self, global_ids: np.ndarray, result: tuple) -> dict[int, dict]:
        """Copy an actor's rows into the batch; return its infos by env id."""
        obs, rewards, terminations, truncations, infos = result
        first, last = int(global_ids[0]), int(global_ids[-1])
        rows: np.ndarray | slice = slice(first, last + 1) if last - first + 1 == global_ids.size else global_ids
        self._batch.store(rows, obs, rewards, terminations, truncations)
        return dict(zip(global_ids.tolist(), infos, strict=True))

    def _get(self, refs: list[Any], deadline: Deadline, what: str, actors: list[int] | None = None) -> list[Any]:
        """`ray.get` of each ref (``actors[i]`` made ``refs[i]``) before ``deadline``; errors name the actor.

        Ray's errors become torchwm's; an `EnvFailure` is raised as it is, with the rows it carries.
        """
        actors = list(range(len(refs))) if actors is None else actors
        try:
            return ray.get(refs, timeout=deadline.remaining())  # one call for all: the common case, and the cheapest
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayTaskError, ray.exceptions.RayActorError):
            pass  # find which ref failed, one at a time, within the same deadline; those done answer at once
        results = []
        for ref, k in zip(refs, actors, strict=True):
            try:
                results.append(ray.get(ref, timeout=deadline.remaining()))
            except ray.exceptions.GetTimeoutError:
                raise EnvTimeoutError(
                    f"{what}: Ray actor {k} (envs {list(self._actor_ranges[k])}) did not answer within "
                    f"{deadline.seconds:g} s (raise timeout= in backend_kwargs for slow envs)") from None
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, EnvFailure):
                    raise cause from None
                if isinstance(cause, ActorRestarted):
                    raise ActorDiedError(f"{what}: Ray actor {k} died and was restarted by Ray; envs "
                                         f"{list(self._actor_ranges[k])} lost their episodes", worker_index=k) from None
                raise worker_error(f"{what}: Ray actor {k} (envs {list(self._actor_ranges[k])}) raised",
                                   original_type=type(cause), worker_index=k, remote_traceback=str(exc)) from None
            except ray.exceptions.RayActorError as exc:
                died = ActorDiedError(
                    f"{what}: Ray actor {k} died, taking envs {list(self._actor_ranges[k])} with it"
                    + ("" if self._restart_on_crash else
                       " (pass restart_on_crash=True in backend_kwargs to let Ray restart it)")
                    + f" ({type(exc).__name__})",
                    worker_index=k, remote_traceback=str(exc),
                )
                if self._restart_on_crash:
                    raise died from None
                self._lose(died)
        return results

    def _recover(self, k: int, interrupted: np.ndarray) -> tuple:
        """Actor ``k`` was restarted by Ray: reset all its envs; the interrupted steps end truncated."""
        actor_range = self._actor_ranges[k]
        local = list(range(len(actor_range)))
        # Ray queues this call until the restarted actor is up; a restart budget spent raises.
        obs, rewards, terminations, truncations, infos = self._fetch(
            k, self._remote(k, "reset", local, [None] * len(local), None), Deadline.after(self.timeout),
            f"restarting Ray actor {k}")
        all_ids = np.arange(actor_range.start, actor_range.stop)
        # Envs of this actor not in flight lose their episode too: their rows now hold the new start.
        others = np.setdiff1d(all_ids, interrupted)
        if others.size:
            put_rows(self.single_observation_space, self._observations, others,
                     take_rows(self.single_observation_space, obs, others - actor_range.start))
        rows = interrupted - actor_range.start
        restarted = [{**infos[r], "worker_restarted": True} for r in rows.tolist()]
        return (take_rows(self.single_observation_space, obs, rows), np.zeros(rows.size), np.zeros(rows.size, bool),
                np.ones(rows.size, bool), restarted)
