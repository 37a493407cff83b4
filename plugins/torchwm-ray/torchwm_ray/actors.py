"""The Ray actor transport: both ends of the wire between the driver and one Ray actor.

`EnvActor` is the worker, one share of the pool's envs in a Ray actor process (the pool's
`torchwm.plugin_api.EnvGroup`, built from its `torchwm.plugin_api.WorkerPayload`);
`RayActorTransport` is the driver's end, the `torchwm.plugin_api.Transport` that the ``ray``
backend's pool drives. What Ray adds to the pool's protocol:

- A step of all envs goes through one compiled graph over every actor
  (`torchwm_ray.compiled_graph.CompiledStep`); resets, ``call``, ``set_attr``, partial steps
  and restarts are ordinary actor calls, which an actor runs beside the graph's loop.
- An env that raises does not stop its actor's call: the others go on, and their rows come
  back with the error (`EnvFailure`).
- ``restart_on_crash`` lets Ray restart a dead actor (``max_restarts``); the pool then resets
  its envs, as it does for a worker process it restarts. While Ray restarts it, the actor may
  answer ``ActorUnavailableError``: the transport waits through that, within the deadline.
- Cluster faults become the pool's errors: a lost node names every actor it took (`RayActorTransport.lost`),
  ``ray.shutdown()`` mid-call is a `WorkerGone` that cannot be restarted (`lost_ray`), an actor no
  alive node can take fails at once, and an actor's process ends when its raylet is gone
  (`exit_with_raylet`), since Ray can no longer reach it.
- Observations over Ray's inline limit come back in chunks (`obs_chunks`).
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import time
import traceback
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import ray.exceptions
import ray.util.scheduling_strategies
from gymnasium import spaces
from ray import cloudpickle

from torchwm.plugin_api import (
    ARRAY_SPACES,
    Batch,
    Call,
    ControlCommand,
    Deadline,
    EnvGroup,
    ErrorReply,
    NeedsReset,
    PoolSettings,
    Reset,
    SetAttr,
    ShareDescription,
    Transport,
    VecSpec,
    WorkerGone,
    WorkerPayload,
    create_batch,
    describe_share,
    take_rows,
)
from torchwm_ray.compiled_graph import CompiledStep
from torchwm_ray.connection import (
    RAY_GONE,
    LocalRay,
    check_address,
    client_connected,
    cluster_cpus,
    exit_with_raylet,
    last_line,
    lost_ray,
    one_node_ray,
    with_runtime_env,
)
from torchwm_ray.placement import DEFAULT_TIMEOUT, SCHEDULING_GRACE, ActorPlacement, check_schedulable
from torchwm_ray.same_node import SameNodeWorker
from torchwm_ray.shipping import ship_by_value

# The longest a single wait for a step may block (see RayActorTransport.wait).
WAIT_SLICE_SECONDS = 0.5

logger = logging.getLogger(__name__)
# Ray sends a return value inline with the reply when it is under 100 KiB (its default
# max_direct_call_object_size) and through the object store otherwise, which is slower.
INLINE_BYTES = 90_000
# How steps travel when every actor is on the driver's node (`torchwm_ray.same_node`).
SHARED_MEMORY_STEPS = "shared memory (every actor on this node)"


def obs_chunks(space: gym.Space, rows: int) -> int:
    """In how many return values an actor sends ``rows`` observations (0: with the rest of the result)."""
    if not isinstance(space, spaces.Box):
        return 0
    size = rows * int(np.prod(space.shape)) * space.dtype.itemsize
    return 0 if size <= INLINE_BYTES else math.ceil(size / INLINE_BYTES)


class EnvFailure(Exception):
    """An env (or the actor's own code) raised in an actor call: the pool's `ErrorReply`, and the rows of the
    call's other envs, which went on (``(obs, rewards, terminations, truncations, infos)``; None: none
    came)."""

    def __init__(self, reply: ErrorReply, rows: tuple | None = None) -> None:
        super().__init__(reply, rows)
        self.reply = reply
        self.rows = rows

    @classmethod
    def of(cls, exc: BaseException, env: int | None) -> EnvFailure:
        try:
            # Ray's cloudpickle, not the cloudpickle package: a class that came to the actor by value
            # (an env defined in the driver's __main__ or a test module) then goes back as the
            # driver's own class, which Ray's cloudpickle tracks.
            pickled_type = cloudpickle.dumps(type(exc))
        except Exception:
            pickled_type = None
        return cls(ErrorReply(env, "".join(traceback.format_exception(exc)), repr(exc), pickled_type))


class ActorRestarted(Exception):
    """Raised by a restarted actor asked to step envs it has not reset since it came back."""


class EnvActor:
    """The worker: one share of the pool's envs in a Ray actor process (used through `ray.remote`).

    A restarted actor (``max_restarts``) runs ``__init__`` again: its envs are new and must be reset
    before they step, which the pool does.
    """

    def __init__(self, payload: bytes) -> None:
        self.graph_step_running = False
        # Ray ran __init__ again after a crash: the envs are new, and the driver must hear of it
        # even if the crash happened between two calls.
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        exit_with_raylet()
        try:
            # Unpickled here rather than by Ray: an env class this node cannot import (its package is
            # missing) is then this actor's error reply, with the ImportError, instead of a dead actor
            # whose cause is only in the node's log files.
            self.payload: WorkerPayload = cloudpickle.loads(payload)
            self.envs, self.failed = self.payload.build_envs(), None
        except Exception as exc:
            self.envs, self.failed = [], EnvFailure.of(exc, None).reply

    def describe(self) -> dict[str, Any]:
        return {
            "share": self.failed or describe_share(self.envs),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    def attach(self, observation_space: gym.Space) -> int:
        """Batch rows of its own for its envs' results; returns in how many chunks it sends observations."""
        count = len(self.envs)
        self.observations = create_batch(observation_space, count)
        self.rewards = np.zeros(count, dtype=np.float64)
        self.terminations = np.zeros(count, dtype=np.bool_)
        self.truncations = np.zeros(count, dtype=np.bool_)
        self.group = EnvGroup(
            self.envs,
            self.payload.autoreset_mode,
            self.observations,
            self.rewards,
            self.terminations,
            self.truncations,
            first_env=self.payload.first_env,
        )
        self.obs_chunks = obs_chunks(observation_space, count)
        return self.obs_chunks

    def _result(self, local_ids: list[int], infos: list[dict], chunked: bool = True) -> tuple:
        """The rows of ``local_ids``: ``(obs, rewards, terminations, truncations, infos)``.

        With ``obs_chunks``, the observations go as that many separate return values instead, after
        ``(None, rewards, terminations, truncations, infos)``: Ray puts a return value over 100 kB in its
        object store, which costs more than the step of a few Atari envs.
        """
        if len(local_ids) == len(self.envs):
            # Ray copies the return value when the method returns, so the buffers can be reused.
            obs, rewards, terminations, truncations = (
                self.observations,
                self.rewards,
                self.terminations,
                self.truncations,
            )
        else:
            ids = np.asarray(local_ids)
            obs = take_rows(self.group.observation_space, self.observations, ids)
            rewards, terminations, truncations = (
                self.rewards[ids],
                self.terminations[ids],
                self.truncations[ids],
            )
        if not (chunked and self.obs_chunks):
            return obs, rewards, terminations, truncations, infos
        return (
            (None, rewards, terminations, truncations, infos),
            *np.array_split(np.ascontiguousarray(obs).reshape(-1), self.obs_chunks),
        )

    def _each_env(self, local_ids: list[int], run: Any) -> tuple[list[Any], EnvFailure | None]:
        """``run(row, i)`` (a list of one result) for each env in turn; the others go on after a failure.
        Returns the results (``{}`` for an env that raised) and the first failure."""
        results: list[Any] = []
        failed = None
        for row, i in enumerate(local_ids):
            try:
                results += run(row, i)
            except Exception as exc:
                results.append({})
                failed = failed or EnvFailure.of(exc, i)
        return results, failed

    def _rows_or_failure(
        self, local_ids: list[int], infos: list[dict], failed: EnvFailure | None, chunked: bool = True
    ) -> tuple:
        if failed is not None:  # a new one: an exception travels as its constructor's arguments
            raise EnvFailure(failed.reply, self._result(local_ids, infos, chunked=False))
        return self._result(local_ids, infos, chunked)

    def reset(self, local_ids: list[int], seeds: list[int | None], options: dict | None) -> tuple:
        if len(local_ids) == len(self.envs):
            self.restarted = False
        infos, failed = self._each_env(local_ids, lambda row, i: self.group.reset([i], [seeds[row]], options))
        return self._rows_or_failure(local_ids, infos, failed)

    def step(self, local_ids: list[int], actions: Any, chunked: bool = True) -> tuple:
        if self.restarted:
            raise ActorRestarted()
        array_actions = isinstance(self.group.action_space, ARRAY_SPACES)

        def step_one(row: int, i: int) -> list[dict]:
            action = (
                actions[row : row + 1]
                if array_actions
                else take_rows(self.group.action_space, actions, np.array([row]))
            )
            return self.group.step([i], action)

        infos, failed = self._each_env(local_ids, step_one)
        return self._rows_or_failure(local_ids, infos, failed, chunked)

    def step_all(self, actions: Any) -> bytes:
        """Step every env; the compiled graph's task. Its channels take any size, so no chunks.

        The result goes pickled: a compiled graph hands NumPy arrays to the driver as views of its
        shared-memory channel, which cannot take the next step's result until every view is gone,
        and an array in ``infos`` (``final_obs``) may be kept by the user for ever. A failure is
        returned, not raised: when one task of a compiled graph raises, Ray raises that error for
        every actor's output and the other actors' rows are lost.
        """
        self.graph_step_running = True
        try:
            return pickle.dumps(self.step(list(range(len(self.envs))), actions, chunked=False), protocol=5)
        except EnvFailure as failure:
            outcome = failure
        except Exception as exc:
            outcome = EnvFailure.of(exc, None)
        finally:
            self.graph_step_running = False
        try:
            return pickle.dumps(outcome, protocol=5)
        except Exception:  # the rows themselves cannot be pickled (an info value): send the error alone
            return pickle.dumps(
                EnvFailure(
                    outcome.reply._replace(traceback=outcome.reply.traceback + traceback.format_exc())
                ),
                protocol=5,
            )

    def in_graph_step(self) -> bool:
        """Whether a step of the compiled graph runs now (an ordinary call, answered beside the graph's
        loop)."""
        return self.graph_step_running

    def call(self, name: str, args: tuple, kwargs: dict, local_ids: list[int] | None = None) -> bytes:
        """The value of each env of ``local_ids`` (None: all), pickled here so that a value that cannot travel
        names its env."""
        local_ids = list(range(len(self.envs))) if local_ids is None else local_ids
        values, failed = self._each_env(local_ids, lambda row, i: self.group.call([i], name, args, kwargs))
        if failed is not None:
            raise failed
        try:
            return cloudpickle.dumps(values)
        except Exception as exc:
            error = exc  # find the value that cannot travel, to name its env
        for i, value in zip(local_ids, values, strict=True):
            try:
                cloudpickle.dumps(value)
            except Exception as exc:
                # A TypeError, as the process backends report a reply they cannot pickle.
                raise EnvFailure.of(
                    TypeError(
                        f"{name!r} of this env is a {type(value).__name__}, which cannot be sent from the "
                        f"Ray actor to the driver ({type(exc).__name__}: {exc}); call a method that "
                        f"returns plain data instead"
                    ),
                    i,
                ) from None
        raise error

    def set_attr(self, name: str, values: list[Any], local_ids: list[int] | None = None) -> None:
        def set_one(row: int, i: int) -> list[None]:
            self.group.set_attr([i], name, [values[row]])
            return [None]

        _, failed = self._each_env(list(range(len(self.envs))) if local_ids is None else local_ids, set_one)
        if failed is not None:
            raise failed

    def needs_reset(self) -> None:
        self.group.answer(NeedsReset())

    def close(self) -> None:
        # The envs, not the group: an actor closed before attach has built envs but no group.
        for env in self.envs:
            env.close()


@dataclass
class RaySettings:
    """The Ray options of one vector env, checked; shared by its transports, with its compiled graph."""

    address: str | None
    steps: str  # how a step of all envs travels: "compiled graph" or "actor calls (why)"
    placement: ActorPlacement
    max_restarts: int
    init_kwargs: dict[str, Any] = field(repr=False)
    stop_ray_on_close: bool
    timeout: float | None
    graph: CompiledStep | None = field(default=None, repr=False)
    spin_seconds: float | None = field(default=None, repr=False)  # on the shared-memory path: measured
    # every actor's, to name the lost
    transports: list[RayActorTransport] = field(default_factory=list, repr=False)

    def actor_options(self, index: int) -> dict[str, Any]:
        """The `ray.remote` options of actor ``index``."""
        return {**self.placement.options(index), "max_restarts": self.max_restarts}


class RayActorTransport(Transport):
    """The driver's end of one `EnvActor`."""

    OPTIONS = {
        "address": None,
        "actor_options": None,
        "placement": None,
        "runtime_env": None,
        "max_restarts": 3,
        "init_kwargs": None,
        "stop_ray_on_close": True,
        "compiled_graph": True,
        "shared_memory": None,
    }

    @classmethod
    def configure(
        cls, backend: str, spec: VecSpec, env_fns: list[Any], options: dict[str, Any], pool: PoolSettings
    ) -> RaySettings:
        options = {**cls.OPTIONS, **options}
        address, init_kwargs = options["address"], options["init_kwargs"]
        max_restarts = options["max_restarts"]
        if address is not None and not isinstance(address, str):
            raise TypeError(
                f"address must be a str such as 'auto' or 'ray://127.0.0.1:10001', got {address!r}"
            )
        placement = ActorPlacement.check(options["actor_options"], options["placement"])
        if init_kwargs is not None and not isinstance(init_kwargs, dict):
            raise TypeError(f"init_kwargs must be a dict of ray.init arguments, got {init_kwargs!r}")
        init_kwargs = with_runtime_env(dict(init_kwargs or {}), options["runtime_env"])
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
        shared_memory = options["shared_memory"]
        if shared_memory is not None and not isinstance(shared_memory, bool):
            raise TypeError(
                f"shared_memory must be None (where it can), True or False; got {shared_memory!r}"
            )
        if not (pool.split_given or pool.inline) and placement.per_actor is not None:
            pool.worker_slices = placement.split(len(env_fns), len(placement.per_actor), backend)
        placement.actors(len(pool.worker_slices))
        check_address(address)  # a second env asking for another Ray: refused before anything starts
        LocalRay.connect(address, init_kwargs)
        if not (pool.split_given or pool.inline) and placement.per_actor is None:
            # One actor per CPU of the cluster (not of this machine), at most one per env.
            pool.worker_slices = placement.split(len(env_fns), cluster_cpus(), backend)
        # Every actor on this machine: the shared block of `torchwm_ray.same_node` (a user who turned the
        # graph off asked for actor calls).
        if shared_memory is None:
            shared_memory = bool(options["compiled_graph"]) and one_node_ray()
        elif shared_memory and not one_node_ray():
            raise ValueError(
                "ray: shared_memory=True needs every actor on the driver's machine: a Ray of one node, this "
                "process's (not through Ray Client), on Linux; this Ray has "
                f"{sum(node['Alive'] for node in ray.nodes())} alive nodes"
            )
        # A graph's results come all together, never the first ready (batch_size); a graph does not
        # survive its actor's death (restart_on_crash); Ray Client cannot compile graphs.
        steps = (
            SHARED_MEMORY_STEPS
            if shared_memory
            else "actor calls (compiled_graph=False)"
            if not options["compiled_graph"]
            else "actor calls (restart_on_crash=True)"
            if pool.restart_on_crash
            else "actor calls (batch_size < num_envs)"
            if pool.batch_size not in (None, len(env_fns))
            else "actor calls (Ray Client: no compiled graph)"
            if client_connected()
            else "compiled graph"
        )
        if steps.endswith("(Ray Client: no compiled graph)"):
            logger.info(
                "ray: connected through Ray Client, which cannot run a Ray Compiled Graph: every step "
                "is one actor call per actor"
            )
        # factories of a test module or a script's helper module: the actors cannot import them
        ship_by_value(env_fns)
        placement.reserve(len(pool.worker_slices), pool.timeout)
        return RaySettings(
            address=address,
            steps=steps,
            placement=placement,
            max_restarts=max_restarts if pool.restart_on_crash else 0,
            init_kwargs=init_kwargs,
            stop_ray_on_close=bool(options["stop_ray_on_close"]),
            timeout=pool.timeout,
            graph=CompiledStep(DEFAULT_TIMEOUT) if steps == "compiled graph" else None,
        )

    @classmethod
    def chosen(cls, settings: RaySettings) -> type[Transport]:
        return SameNodeWorker if settings.steps == SHARED_MEMORY_STEPS else cls

    def __init__(self, index: int, envs: range, settings: RaySettings) -> None:
        super().__init__(index, envs, settings)
        self.settings = settings
        self.timeout = settings.timeout
        self.actor: Any = None
        self.node_id: str | None = None
        self._pid: int | None = None
        self._owns_ray = False
        self._all_ids = np.arange(envs.start, envs.stop)
        self._batch: Batch | None = None
        self._chunks = 0
        self._starting: Any = None  # the ref of describe(), until started() reads it
        self._command: tuple[ControlCommand | None, list[Any]] | None = None  # a control command and its refs
        self._step: tuple[np.ndarray, list[Any]] | None = None  # an actor-call step: its env ids and refs
        self._in_graph = False  # this actor's rows are in the graph's step in flight
        self._options: dict[str, Any] = {}  # the ray.remote options of its actor
        self._lost: WorkerGone | None = None  # Ray went away (ray.shutdown()) when a call was to be sent

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, payload: WorkerPayload) -> None:
        if not self._owns_ray:
            self._owns_ray = LocalRay.acquire(self.settings.address, self.settings.init_kwargs)
        self._options = self.settings.actor_options(self.index)
        # Pickled here, unpickled by the actor's constructor (see EnvActor.__init__).
        self.actor = ray.remote(EnvActor).options(**self._options).remote(cloudpickle.dumps(payload))
        self._starting = self.actor.describe.remote()
        self.settings.transports.append(self)
        if self.settings.graph is not None:
            self.settings.graph.members.append(self)

    def restart(self, payload: WorkerPayload) -> None:
        # Ray restarts the actor itself (max_restarts); describe() waits for it to be back.
        self._step, self._command = None, None
        self._starting = self._call("describe")

    def started(self, deadline: Deadline) -> ShareDescription | ErrorReply:
        """Wait for the actor's `EnvActor.describe`, through a restart Ray is still making, within the
        deadline.

        An actor that no alive node can take fails at once (Ray would keep it pending for ever), and one
        that Ray restarts may answer `ActorUnavailableError` until it is back: that is no death.
        """
        # Actors may first have to be scheduled and import torchwm: their start gets at least the default
        # (the pool's timeout message says how long it waited).
        wait = None if deadline.at is None else max(deadline.remaining(), DEFAULT_TIMEOUT)  # type: ignore[type-var]
        began = time.monotonic()
        until = None if wait is None else began + wait
        while True:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            try:
                described = self._get([self._starting], 1.0 if left is None else min(left, 1.0), waiting=True)
                break
            except TimeoutError:
                # Pending: Ray places an actor within moments when a node can take it.
                if time.monotonic() - began > SCHEDULING_GRACE:
                    check_schedulable(self._options)
            except ray.exceptions.ActorUnavailableError:
                time.sleep(0.2)  # Ray is restarting it: ask again when it may be back
                self._starting = self._call("describe")
        if isinstance(described, EnvFailure):
            return described.reply
        self._pid, self.node_id = described["pid"], described["node_id"]
        return described["share"]

    def stop(self) -> None:
        graph = self.settings.graph
        if graph is not None and graph.graph is not None:
            step_running = graph.running
            if step_running:  # tearing down the graph would wait for that step to end: its actors go first
                for member in graph.members:
                    ray.kill(member.actor, no_restart=True)
            graph.teardown(kill_actors=step_running)

    def close(self, deadline: Deadline) -> None:
        if self in self.settings.transports:
            self.settings.transports.remove(self)
        try:
            if self.actor is not None and ray.is_initialized():
                if self._step is None and not self._in_graph:  # else it may be stuck in a step
                    try:
                        ray.wait([self.actor.close.remote()], timeout=deadline.remaining())
                    except Exception:
                        pass  # an actor that died already has nothing to close
                ray.kill(self.actor, no_restart=True)
        finally:
            self.actor = None
            if self._owns_ray:
                self._owns_ray = False
                LocalRay.release(stop=self.settings.stop_ray_on_close)

    @property
    def alive(self) -> bool:
        return True  # a dead actor's calls fail: the waits report it

    @property
    def pid(self) -> int | None:
        return self._pid

    def describe(self) -> str:
        return f"Ray actor {self.index} (envs {list(self.envs)})"

    # -- control commands --------------------------------------------------------------------------

    def attach(self, batch: Batch) -> None:
        self._batch = batch
        self._command = (None, [self._call("attach", batch.observation_space)])

    def send(self, command: ControlCommand) -> None:
        if self.settings.graph is not None and ray.is_initialized():
            self.settings.graph.settle()
        if isinstance(command, Reset):
            refs = self._remote("reset", command.local_ids, command.seeds, command.options)
        elif isinstance(command, Call):
            refs = [self._call("call", command.name, command.args, command.kwargs, command.local_ids)]
        elif isinstance(command, SetAttr):
            refs = [self._call("set_attr", command.name, command.values, command.local_ids)]
        elif isinstance(command, NeedsReset):
            refs = [self._call("needs_reset")]
        else:
            raise ValueError(f"{self.describe()}: no actor call for {command!r}")
        self._command = (command, refs)

    def reply(self, deadline: Deadline) -> Any:
        assert self._command is not None
        command, refs = self._command
        if self._lost is not None:
            self._command = None
            raise self._lost
        timeout = deadline.remaining()
        if command is None and timeout is not None:  # attach, the end of the actor's start: the same floor
            timeout = max(timeout, DEFAULT_TIMEOUT)
        outcome = self._fetch(refs, timeout)
        self._command = None
        if command is None:  # attach
            self._chunks = outcome
            return None
        if isinstance(command, Reset):
            return self._take(np.asarray(command.local_ids) + self.envs.start, outcome)
        if isinstance(outcome, EnvFailure):
            return outcome.reply
        return cloudpickle.loads(outcome) if isinstance(command, Call) else None

    # -- steps --------------------------------------------------------------------------------------

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        graph = self.settings.graph
        if local_ids is None and graph is not None:
            self._in_graph = True
            graph.stage(self, actions)
            return
        ids = list(range(len(self.envs))) if local_ids is None else local_ids
        self._step = (np.asarray(ids) + self.envs.start, self._remote("step", ids, actions))

    def poll(self) -> bool:
        if self._step is None or self._lost is not None:
            return True  # a graph step (its result() waits, within the deadline), an abandoned one, or no Ray
        refs = self._step[1]
        if not ray.is_initialized():
            return True  # finish_step says why
        try:
            return len(ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)[0]) == len(refs)
        except BaseException as exc:
            self._lost = lost_ray(exc)  # Ray went away (else raised again); finish_step raises it
            return True

    @classmethod
    def wait(cls, busy: list[Transport], timeout: float | None, need_all: bool) -> bool:
        refs = [
            ref
            for transport in busy
            if isinstance(transport, cls) and transport._step is not None
            for ref in transport._step[1]
        ]
        if not refs:
            return False
        gone: WorkerGone | None = None
        if not ray.is_initialized():  # ray.shutdown() from another thread between two waits
            gone = WorkerGone(RAY_GONE, restartable=False)
        else:
            # On the refs' futures, not in ray.wait: a ray.wait under way when another thread shuts Ray
            # down can spin inside Ray for ever, whatever its timeout (seen on a 3-node cluster). Ray
            # only calls the futures back; the wait is Python's, in short slices, and the pool waits
            # again (checking Ray first) until its own deadline.
            timeout = WAIT_SLICE_SECONDS if timeout is None else min(timeout, WAIT_SLICE_SECONDS)
            try:
                futures.wait(
                    [ref.future() for ref in refs],
                    timeout=timeout,
                    return_when=futures.ALL_COMPLETED if need_all else futures.FIRST_COMPLETED,
                )
            except BaseException as exc:
                gone = lost_ray(exc)  # Ray went away (else raised again)
        if gone is None:
            return False
        for transport in busy:  # each finish_step raises it
            if isinstance(transport, cls):
                transport._lost = gone
        return True

    def finish_step(self, deadline: Deadline) -> list[dict] | ErrorReply:
        if self._in_graph:
            self._in_graph = False
            assert self.settings.graph is not None
            try:
                outcome = self.settings.graph.result(self, deadline)
            except ray.exceptions.RayTaskError as exc:
                outcome = EnvFailure(
                    ErrorReply(None, str(exc), "an error in the compiled graph's step", None)
                )
            ids = self._all_ids
        elif self._step is not None:
            (ids, refs), self._step = self._step, None
            if self._lost is not None:
                raise self._lost
            outcome = self._fetch(refs, deadline.remaining())
        else:
            outcome = None
        return [] if outcome is None else self._take(ids, outcome)

    def abandon_step(self) -> None:
        self._step = None
        if self._in_graph and self.settings.graph is not None:
            self.settings.graph.abandon()

    # -- helpers ----------------------------------------------------------------------------------

    def _remote(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` of the actor; the refs of its return values (several when obs are chunked)."""
        if not self._chunks:
            return [self._call(method, *args)]
        return list(self._call(method, *args, num_returns=1 + self._chunks))

    def _call(self, method: str, *args: Any, num_returns: int = 1) -> Any:
        """Call ``method`` of the actor: its ref (a list of them with ``num_returns``). Without Ray
        (``ray.shutdown()`` was called) the reply or step's result that waits for it raises `WorkerGone`
        instead."""
        if not ray.is_initialized():
            self._lost = WorkerGone(RAY_GONE, restartable=False)
            return None if num_returns == 1 else [None] * num_returns
        call = getattr(self.actor, method)
        try:
            return (call if num_returns == 1 else call.options(num_returns=num_returns)).remote(*args)
        except Exception:
            if ray.is_initialized():
                raise
            self._lost = WorkerGone(RAY_GONE, restartable=False)
            return None if num_returns == 1 else [None] * num_returns

    def _fetch(self, refs: list[Any], timeout: float | None) -> Any:
        """The result of one actor call (rows joined from their chunks), or its `EnvFailure`."""
        parts = self._get(refs, timeout)
        if isinstance(parts, EnvFailure) or len(refs) == 1:
            return parts
        _, rewards, terminations, truncations, infos = parts[0]
        assert self._batch is not None
        shape = self._batch.observation_space.shape
        assert shape is not None  # an array space: the only kind sent in chunks
        return (
            np.concatenate(parts[1:]).reshape(len(rewards), *shape),
            rewards,
            terminations,
            truncations,
            infos,
        )

    def _get(self, refs: list[Any], timeout: float | None, waiting: bool = False) -> Any:
        """`ray.get` within ``timeout``: the value (of the one ref) or values, or the call's `EnvFailure`;
        Ray's errors become the pool's (`TimeoutError`, `WorkerGone`). ``waiting``: `started` handles
        ``ActorUnavailableError`` (a restart in progress) itself."""
        if self._lost is not None:
            raise self._lost
        if not ray.is_initialized():  # ray.get() would start a new local Ray
            raise WorkerGone(RAY_GONE, restartable=False)
        try:
            values = ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, EnvFailure):
                return cause
            if isinstance(cause, ActorRestarted):
                raise WorkerGone("Ray restarted it after a crash") from None
            return EnvFailure(ErrorReply(None, str(exc), repr(cause), None))
        except ray.exceptions.ActorUnavailableError as exc:
            if waiting:
                raise
            if self.restarts:  # the pool restarts it, which waits until Ray has it back
                raise WorkerGone("Ray lost touch with it (ActorUnavailableError)") from None
            return self._unavailable(exc, timeout)
        except ray.exceptions.RayActorError as exc:
            raise self.lost(exc) from None
        except BaseException as exc:
            raise lost_ray(exc) from None
        return values[0] if len(refs) == 1 else values

    @property
    def restarts(self) -> int:
        """How many times Ray may restart the actor (``restart_on_crash``)."""
        return int(self._options.get("max_restarts") or 0)

    def _unavailable(self, exc: ray.exceptions.ActorUnavailableError, timeout: float | None) -> EnvFailure:
        """A call met ``ActorUnavailableError`` (Ray lost touch with the actor; the call may or may not have
        run): wait, within ``timeout``, until Ray says the actor died (`WorkerGone`) or it answers again (the
        call's `EnvFailure`, so that the pool resets the envs it may have moved)."""
        until = None if timeout is None else time.monotonic() + timeout
        while until is None or time.monotonic() < until:
            try:
                left = None if until is None else max(until - time.monotonic(), 0.0)
                ref = self._call("describe")
                if self._lost is not None:
                    raise self._lost
                ray.get(ref, timeout=None if left is None else min(left, 5.0))
            except ray.exceptions.ActorUnavailableError:
                time.sleep(0.5)
                continue
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayActorError as died:
                raise self.lost(died) from None
            except WorkerGone:
                raise
            except BaseException as other:
                raise lost_ray(other) from None
            return EnvFailure(
                ErrorReply(
                    None,
                    str(exc),
                    "ActorUnavailableError: Ray lost touch with this actor for "
                    "a while, so this call may or may not have run",
                    None,
                )
            )
        raise TimeoutError

    def lost(self, exc: BaseException, also: Sequence[RayActorTransport] = ()) -> WorkerGone:
        """The `WorkerGone` for this actor's death (``exc``: Ray's error), naming every actor of the vector
        env lost with it: those on a node Ray declared dead, and ``also``."""
        if not ray.is_initialized():  # ray.shutdown(): and any call to Ray now would start a new local one
            return WorkerGone(RAY_GONE, restartable=False)
        try:
            dead_nodes = {node["NodeID"] for node in ray.nodes() if not node["Alive"]}
        except Exception:
            dead_nodes = set()
        reason = type(exc).__name__
        if self.node_id in dead_nodes:
            reason = f"its node {self.node_id} was lost"
        elif getattr(exc, "actor_init_failed", False):
            reason += ": " + last_line(str(exc))  # the constructor's error, e.g. the import that failed
        others = [
            t for t in self.settings.transports if t is not self and (t.node_id in dead_nodes or t in also)
        ]
        if others:
            reason += "; lost with it: " + ", ".join(t.describe() for t in others)
        envs = "Their" if others else "Its"
        if self.restarts:
            hint = (
                f"Ray did not restart it (max_restarts={self.restarts} used up, or it died while starting): "
                f"{envs.lower()} envs are lost; close() this vector env and make a new one."
            )
        else:
            hint = (
                f"{envs} envs are lost: close() this vector env and make a new one (pass "
                f"restart_on_crash=True in backend_kwargs to let Ray restart a crashed actor)."
            )
        return WorkerGone(reason, hint=hint)

    def _take(self, ids: np.ndarray, outcome: tuple | EnvFailure) -> list[dict] | ErrorReply:
        """Store the rows of envs ``ids`` in the batch; their infos, or the failure's `ErrorReply`."""
        rows = outcome.rows if isinstance(outcome, EnvFailure) else outcome
        if rows is not None:
            assert self._batch is not None
            obs, rewards, terminations, truncations, infos = rows
            first, last = int(ids[0]), int(ids[-1])
            where: np.ndarray | slice = slice(first, last + 1) if last - first + 1 == ids.size else ids
            self._batch.store(where, obs, rewards, terminations, truncations)
        return outcome.reply if isinstance(outcome, EnvFailure) else infos
