"""Ray actors on the driver's own node, stepped through a shared block as ``shmem``'s workers are.

On a one-node Ray (the driver's machine), a step through Ray's compiled graph pays Ray's channel
hand-offs, several times what ``shmem``'s futex hand-off costs (``benchmarks/ray_ceiling.py`` measures
both), a large share of a short step such as Pong's. `SameNodeActorHandle` is therefore ``shmem``'s
handle (`torchwm.plugin_api.SharedBlock.Handle`) over a Ray actor instead of a child process:

- the driver listens on a Unix socket in a private directory; the actor (`SharedMemoryActor`),
  placed by Ray with the env's actor options, connects to it and runs ``shmem``'s worker loop
  (`torchwm.plugin_api.SharedBlock.serve`) in its main thread until the env closes, then exits;
- the shared block's descriptor goes over that socket, as over a worker's pipe;
- the driver watches the actor's process through a pidfd (`ActorProcess`), as it watches a worker
  process through its sentinel, and ends it through Ray (``ray.kill``).

Ray still places the actors, ships the job's code to them (``runtime_env``) and ends them; steps,
resets and errors are the pool's, as on ``shmem``. ``restart_on_crash`` starts a new actor in place
of a dead one, at most ``max_restarts`` times.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import struct
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

import ray
from ray import cloudpickle

from torchwm.errors import WorkerGone
from torchwm.plugin_api import Deadline, SharedBlock, messages
from torchwm_ray.connection import LocalRay, exit_with_raylet, last_line
from torchwm_ray.failures import RAY_GONE
from torchwm_ray.placement import DEFAULT_TIMEOUT, SCHEDULING_GRACE, check_schedulable
from torchwm_ray.pool_state import PoolState
from torchwm_ray.settings import RaySettings


class SharedMemoryActor:
    """The actor: one share of the envs, served through the shared block (used through `ray.remote`)."""

    def __init__(self) -> None:
        exit_with_raylet()

    def serve(self, path: str, payload: bytes) -> None:
        """Connect to the driver at ``path``, build the envs and serve them until the env closes; then end
        this actor (its process exits, which the driver's pidfd sees)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        SharedBlock.serve(Connection(sock.detach()), payload)
        ray.actor.exit_actor()


class ActorProcess:
    """What a `torchwm.plugin_api.SharedBlock.Handle` uses of its worker's process, for a Ray actor's
    process on this node: ``pid``, ``sentinel`` (a pidfd, readable once the process ended), ``exitcode``,
    ``join``, ``terminate`` (through Ray), ``kill`` and ``close``."""

    def __init__(self, actor: Any, pid: int) -> None:
        self.actor = actor
        self.pid = pid
        self.sentinel = os.pidfd_open(pid)

    @property
    def exitcode(self) -> int | None:
        """None while the process runs, else 0: the code a process that is not this one's child ended
        with cannot be read (`SameNodeActorHandle.gone` says what Ray knows instead)."""
        return None if self.sentinel < 0 or not self.join(0) else 0

    def join(self, timeout: float | None) -> bool:
        return bool(select.select([self.sentinel], [], [], timeout)[0])

    def terminate(self) -> None:
        if ray.is_initialized():
            try:
                ray.kill(self.actor, no_restart=True)
                return
            except Exception:
                pass  # Ray lost it: the signal below ends it
        self.kill()

    def kill(self) -> None:
        try:
            signal.pidfd_send_signal(self.sentinel, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        if self.sentinel >= 0:
            os.close(self.sentinel)
            self.sentinel = -1


class SameNodeActorHandle(SharedBlock.Handle):
    """The driver's end of one `SharedMemoryActor`: ``shmem``'s handle, its process a Ray actor. ``group``:
    the env's `torchwm_ray.group.RayGroup`; ``block``: its shared block."""

    def __init__(self, index: int, envs: range, group: Any, block: SharedBlock) -> None:
        super().__init__(index, envs, group, block)
        self.settings: RaySettings = group.settings
        self.state: PoolState = group.state
        self.actor: Any = None
        self.node_id: str | None = None
        self.restarts_done = 0
        self._owns_ray = False
        self._options: dict[str, Any] = {}
        self._serving: Any = None  # the ref of the actor's serve(): it resolves when the actor ends
        self._listener: socket.socket | None = None
        self._directory: str | None = None
        self._start_deadline: Deadline | None = None  # `started`'s, which the answer to attach shares

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, payload: SharedBlock.Handle.Payload) -> None:
        settings = self.settings
        self._start_deadline = None
        if not self._owns_ray:
            self._owns_ray = LocalRay.acquire(settings.address, settings.init_kwargs)
        # A directory of this user's only (0700): nobody else can connect in the actor's place.
        self._directory = tempfile.mkdtemp(prefix=f"torchwm-actor-{os.getpid()}-")
        path = os.path.join(self._directory, "socket")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(1)
        # torchwm starts a new actor in place of a dead one (`restart`): Ray restarts none.
        self._options = {
            **settings.placement.options(self.index, self.state.placement_group),
            "max_restarts": 0,
        }
        self.actor = ray.remote(SharedMemoryActor).options(**self._options).remote()
        self._serving = self.actor.serve.remote(path, cloudpickle.dumps(payload))

    def started(self, deadline: Deadline) -> messages.ShareDescription | messages.ErrorReply:
        """Wait until the actor connects, then for its envs, as for a worker process: Ray may first have to
        schedule the actor and import torchwm, so this and the answer to `attach` get at least the ray
        backend's default timeout, as on Ray's own channels."""
        began = time.monotonic()
        until = None if deadline.at is None else max(deadline.at, began + DEFAULT_TIMEOUT)
        floor = self._start_deadline = Deadline(deadline.seconds, until)
        listener = self._listener
        assert listener is not None
        while not select.select([listener], [], [], min(floor.remaining(1.0), 1.0))[0]:  # type: ignore[type-var]
            if floor.expired:
                raise TimeoutError
            if ray.wait([self._serving], timeout=0)[0]:
                raise self._ended_before_connecting()
            if time.monotonic() - began > SCHEDULING_GRACE:
                check_schedulable(self._options)
        sock, _ = listener.accept()
        self._stop_listening()
        pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        self.process = ActorProcess(self.actor, pid)
        self.connected(Connection(sock.detach()))
        self.node_id = ray.get_runtime_context().get_node_id()
        return super().started(floor)

    def reply(self, deadline: Deadline) -> object:
        start_deadline, self._start_deadline = self._start_deadline, None
        return super().reply(deadline if start_deadline is None else start_deadline)

    def _ended_before_connecting(self) -> WorkerGone:
        try:
            ray.get(self._serving, timeout=0)
            cause = "it ended before it connected"
        except Exception as exc:  # what Ray says of the actor: its constructor's error, a lost node
            cause = f"{type(exc).__name__}: " + last_line(str(exc))
        return WorkerGone(cause, restartable=False)

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def gone(self) -> WorkerGone:
        if not ray.is_initialized():
            return WorkerGone(RAY_GONE, restartable=False)
        reason = f"its process (pid {self.pid}) ended"
        most = self.settings.max_restarts
        if self.restarts_done >= max(most, 1):
            return WorkerGone(
                f"{reason} after {self.restarts_done} restarts (max_restarts={most})", restartable=False
            )
        return WorkerGone(reason)

    def describe(self) -> str:
        return f"Ray actor {self.index} (envs {list(self.envs)})"

    def restart(self, payload: SharedBlock.Handle.Payload) -> None:
        self.restarts_done += 1
        super().restart(payload)

    def close(self, deadline: Deadline) -> None:
        try:
            super().close(deadline)
            if self.actor is not None and ray.is_initialized():
                ray.kill(self.actor, no_restart=True)  # one that never connected
        finally:
            self._stop_listening()
            self.actor = None
            if self._owns_ray:
                self._owns_ray = False
                LocalRay.release(stop=self.settings.stop_ray_on_close)
