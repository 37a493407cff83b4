"""The driver's end of one `torchwm_ray.actor.EnvActor`: the `torchwm.plugin_api.WorkerHandle` the
``ray`` backend's pool drives when steps travel through Ray (`torchwm_ray.settings.StepPath`).

What Ray adds to the pool's protocol:

- A step of all envs goes through one compiled graph over every actor
  (`torchwm_ray.compiled_graph.CompiledStep`, in the env's `torchwm_ray.pool_state.PoolState`); resets,
  ``call``, ``set_attr``, partial steps and restarts are ordinary actor calls, which an actor runs beside
  the graph's loop.
- ``restart_on_crash`` lets Ray restart a dead actor (``max_restarts``); the pool then resets
  its envs, as it does for a worker process it restarts. While Ray restarts it, the actor may
  answer ``ActorUnavailableError``: the handle waits through that, within the deadline.
- Cluster faults become the pool's errors (`torchwm_ray.failures`): a lost node names every actor it
  took (`RayActorHandle.lost`), ``ray.shutdown()`` mid-call is a `WorkerGone` that cannot be
  restarted, and an actor no alive node can take fails at once.
- `wait_for_actors` is the env's wait for actor calls (`torchwm_ray.group.RayGroup.wait`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent import futures
from typing import Any

import numpy as np
import ray
import ray.exceptions
from ray import cloudpickle

from torchwm.errors import WorkerGone
from torchwm.plugin_api import Deadline, WorkerHandle, messages
from torchwm_ray.actor import EnvActor
from torchwm_ray.connection import LocalRay
from torchwm_ray.failures import RAY_GONE, ActorEnd, ActorRestarted, EnvFailure, actor_gone, lost_ray
from torchwm_ray.placement import DEFAULT_TIMEOUT, SCHEDULING_GRACE, check_schedulable
from torchwm_ray.pool_state import PoolState
from torchwm_ray.settings import RaySettings

# The longest a single wait for a step may block (see wait_for_actors).
WAIT_SLICE_SECONDS = 0.5


class RayActorHandle(WorkerHandle):
    """The driver's end of one `EnvActor`. ``group``: the env's `torchwm_ray.group.RayGroup` (its
    ``settings`` and its ``state``)."""

    def __init__(self, index: int, envs: range, group: Any) -> None:
        super().__init__(index, envs, group)
        self.settings: RaySettings = group.settings
        self.state: PoolState = group.state
        self.timeout = self.settings.timeout
        self.actor: Any = None
        self.node_id: str | None = None
        self._pid: int | None = None
        self._owns_ray = False
        self._all_ids = np.arange(envs.start, envs.stop)
        self._batch: WorkerHandle.Batch | None = None
        self._chunks = 0
        self._starting: Any = None  # the ref of describe(), until started() reads it
        # a control command and its refs
        self._command: tuple[messages.ControlCommand | None, list[Any]] | None = None
        self._step: tuple[np.ndarray, list[Any]] | None = None  # an actor-call step: its env ids and refs
        self._in_graph = False  # this actor's rows are in the graph's step in flight
        self._options: dict[str, Any] = {}  # the ray.remote options of its actor
        self._lost: WorkerGone | None = None  # Ray went away (ray.shutdown()) when a call was to be sent

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, payload: WorkerHandle.Payload) -> None:
        if not self._owns_ray:
            self._owns_ray = LocalRay.acquire(self.settings.address, self.settings.init_kwargs)
        self._options = self.settings.actor_options(self.index, self.state.placement_group)
        # Pickled here, unpickled by the actor's constructor (see EnvActor.__init__).
        self.actor = ray.remote(EnvActor).options(**self._options).remote(cloudpickle.dumps(payload))
        self._starting = self.actor.describe.remote()
        self.state.handles.append(self)
        if self.state.graph is not None:
            self.state.graph.members.append(self)

    def restart(self, payload: WorkerHandle.Payload) -> None:
        # Ray restarts the actor itself (max_restarts); describe() waits for it to be back.
        self._step, self._command = None, None
        self._starting = self._call("describe")

    def started(self, deadline: Deadline) -> messages.ShareDescription | messages.ErrorReply:
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
        graph = self.state.graph
        if graph is not None and graph.graph is not None:
            step_running = graph.running
            if step_running:  # tearing down the graph would wait for that step to end: its actors go first
                for member in graph.members:
                    ray.kill(member.actor, no_restart=True)
            graph.teardown(kill_actors=step_running)

    def close(self, deadline: Deadline) -> None:
        if self in self.state.handles:
            self.state.handles.remove(self)
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
    def pid(self) -> int | None:
        return self._pid

    def describe(self) -> str:
        return f"Ray actor {self.index} (envs {list(self.envs)})"

    # -- control commands --------------------------------------------------------------------------

    def attach(self, batch: WorkerHandle.Batch) -> None:
        self._batch = batch
        self._command = (None, [self._call("attach", batch.observation_space)])

    def send(self, command: messages.ControlCommand | messages.Step) -> None:
        if self.state.graph is not None and ray.is_initialized():
            self.state.graph.settle()
        if isinstance(command, messages.Reset):
            refs = self._remote("reset", command.local_ids, command.seeds, command.options, command.streams)
        elif isinstance(command, messages.Call):
            refs = [self._call("call", command.name, command.args, command.kwargs, command.local_ids)]
        elif isinstance(command, messages.SetAttr):
            refs = [self._call("set_attr", command.name, command.values, command.local_ids)]
        elif isinstance(command, messages.NeedsReset):
            refs = [self._call("needs_reset")]
        elif isinstance(command, messages.CloneStates):
            refs = [self._call("clone_states", command.local_ids)]
        elif isinstance(command, messages.RestoreStates):
            refs = self._remote("restore_states", command.local_ids, command.states)
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
        if isinstance(command, (messages.Reset, messages.RestoreStates)):  # their rows came with them
            return self._take(np.asarray(command.local_ids) + self.envs.start, outcome)
        if isinstance(outcome, EnvFailure):
            return outcome.reply
        pickled = isinstance(command, (messages.Call, messages.CloneStates))
        return cloudpickle.loads(outcome) if pickled else None

    # -- steps --------------------------------------------------------------------------------------

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        graph = self.state.graph
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

    def finish_step(self, deadline: Deadline | None) -> list[dict] | messages.ErrorReply:
        deadline = self.reply_deadline(deadline)
        if self._in_graph:
            self._in_graph = False
            assert self.state.graph is not None
            try:
                outcome = self.state.graph.result(self, deadline)
            except ray.exceptions.RayTaskError as exc:
                outcome = EnvFailure(
                    messages.ErrorReply(None, str(exc), "an error in the compiled graph's step", None)
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
        if self._in_graph and self.state.graph is not None:
            self.state.graph.abandon()

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
            return EnvFailure(messages.ErrorReply(None, str(exc), repr(cause), None))
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
                messages.ErrorReply(
                    None,
                    str(exc),
                    "ActorUnavailableError: Ray lost touch with this actor for "
                    "a while, so this call may or may not have run",
                    None,
                )
            )
        raise TimeoutError

    def lost(self, exc: BaseException, also: Sequence[ActorEnd] = ()) -> WorkerGone:
        """The `WorkerGone` for this actor's death (``exc``: Ray's error), naming every actor of the vector
        env lost with it: those on a node Ray declared dead, and ``also``."""
        if not ray.is_initialized():  # ray.shutdown(): and any call to Ray now would start a new local one
            return WorkerGone(RAY_GONE, restartable=False)
        try:
            dead_nodes = {node["NodeID"] for node in ray.nodes() if not node["Alive"]}
        except Exception:
            dead_nodes = set()
        others = [t for t in self.state.handles if t is not self and (t.node_id in dead_nodes or t in also)]
        return actor_gone(exc, self, others, dead_nodes, self.restarts)

    def _take(self, ids: np.ndarray, outcome: tuple | EnvFailure) -> list[dict] | messages.ErrorReply:
        """Store the rows of envs ``ids`` in the batch; their infos, or the failure's `ErrorReply`."""
        rows = outcome.rows if isinstance(outcome, EnvFailure) else outcome
        if rows is not None:
            assert self._batch is not None
            obs, rewards, terminations, truncations, infos = rows
            first, last = int(ids[0]), int(ids[-1])
            where: np.ndarray | slice = slice(first, last + 1) if last - first + 1 == ids.size else ids
            self._batch.store(where, obs, rewards, terminations, truncations)
        return outcome.reply if isinstance(outcome, EnvFailure) else infos


def wait_for_actors(busy: list[WorkerHandle], timeout: float | None, need_all: bool) -> bool:
    """Sleep until an actor call of ``busy`` may have finished, at most ``timeout`` (in slices); whether it
    slept (False: Ray is gone, which each handle's `RayActorHandle.finish_step` raises)."""
    refs = [
        ref
        for handle in busy
        if isinstance(handle, RayActorHandle) and handle._step is not None
        for ref in handle._step[1]
    ]
    if not refs:
        return True
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
        return True
    for handle in busy:  # each finish_step raises it
        if isinstance(handle, RayActorHandle):
            handle._lost = gone
    return False
