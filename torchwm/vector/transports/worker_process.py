"""What runs inside a worker process: its entry point, `worker_main`, and what the transports' serve loops
use to answer their parent.

`worker_main` builds the envs from a cloudpickled `torchwm.vector.transports.contract.WorkerPayload` (so
lambdas, closures and envs registered at run time work under fork, forkserver and spawn), reports them
(`Started`, then `Ready`), then hands over to its transport's serve loop, which answers commands until
`Close`. The serve loop reads and writes its pipe through `ParentPipe`, whose failures raise `ParentGone`:
only that ends a worker early. Whatever an env raises, a ``BrokenPipeError`` or ``EOFError`` of its own
pipes included, is answered as that env's error. Every reply carries the number of the command it answers
(`send_reply`; the numbering is told in `torchwm.vector.transports.processes`); a reply that cannot be
pickled becomes an error reply for that command only. Workers ignore SIGINT: Ctrl-C reaches the parent
alone, which closes them.

A worker imports this module to run its target (it is pickled by reference under forkserver and spawn), so
it imports only what a worker needs.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from typing import Any, NamedTuple

import cloudpickle
import gymnasium as gym

from torchwm.vector.messages import (
    Close,
    ControlCommand,
    ShareDescription,
    describe_share,
    error_reply,
)
from torchwm.vector.transports.contract import WorkerPayload

# A worker waiting for its next command polls with sched_yield this long before it blocks: longer than
# the parent's own work between two steps, since waking a sleeping process costs more than that work.
WORKER_SPIN_SECONDS = 0.001


# -- the messages of the start-up handshake (the commands are in torchwm.vector.messages) -----------


class Started(NamedTuple):
    """Sent unasked once the process runs torchwm's code (a death before it is a start-up failure)."""

    pid: int


class Ready(NamedTuple):
    """Sent unasked once the envs are built: how long that took, and the top-level packages it imported
    (for the note on slow starts, `torchwm.vector.transports.processes.note_slow_start`)."""

    share: ShareDescription
    build_seconds: float = 0.0
    imported: tuple[str, ...] = ()


class Setup(NamedTuple):
    """The worker's rows: ``layout`` of the shared block (its descriptor follows on the pipe), or None for
    rows of the worker's own."""

    layout: Any


def send_reply(conn: Any, seq: int, reply: Any, raw: tuple[Any, ...] = (), first_env: int = 0) -> None:
    """Send ``reply`` as the answer to command ``seq``, then each buffer of ``raw`` as it is.

    Pickled here, before anything is written: a reply that cannot be pickled (``get_attr`` of an
    attribute holding a lock or an emulator) is answered with an error for this command instead, and
    the pipe stays in step.
    """
    try:
        data = ForkingPickler.dumps((seq, reply, len(raw)))
    except Exception as exc:
        error, env = _unpicklable(reply, exc, first_env)
        data = ForkingPickler.dumps((seq, error_reply(error)._replace(env=env), 0))
        raw = ()
    conn.send_bytes(data)
    for buffer in raw:
        conn.send_bytes(buffer)


def _unpicklable(reply: Any, exc: Exception, first_env: int) -> tuple[TypeError, int | None]:
    """The error to send instead of ``reply``, and the local index of the env whose value failed (if one
    did)."""
    whose, env = "", None
    if isinstance(reply, list):  # one value per env
        for i, value in enumerate(reply):
            try:
                ForkingPickler.dumps(value)
            except Exception:
                whose, env = f" (the value of env {first_env + i}, a {type(value).__name__})", i
                break
    error = TypeError(
        f"the result cannot be pickled to send it to the parent process{whose}: {type(exc).__name__}: {exc}. "
        f"Call a method that returns plain data (numbers, arrays, strings), or use backend='sync' to "
        f"reach the env object itself"
    )
    error.__cause__ = exc
    return error, env


class ParentGone(BaseException):
    """The worker's own pipe to its parent failed (the parent closed it, or died): the worker ends.

    Raised only by `ParentPipe`, so that it says where the failure came from: an env's own
    ``BrokenPipeError`` or ``EOFError`` (a simulator process that died, an ffmpeg pipe) is an env's error
    like any other, answered with an `ErrorReply`. A BaseException, as ``SystemExit`` is, so that no
    ``except Exception`` that answers an env's error can take it for one.
    """


class ParentPipe:
    """The worker's end of its pipe to the parent, as `worker_main` hands it to a serve loop: a
    `multiprocessing.connection.Connection` whose failures to read or write raise `ParentGone`.

    Messages are (un)pickled outside the guarded part: an exception raised while unpickling a command's
    payload (a user's object in ``call`` arguments) is not the pipe's.
    """

    __slots__ = ("connection",)

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def fileno(self) -> int:
        return self.connection.fileno()

    def poll(self, timeout: float | None = 0.0) -> bool:
        try:
            return self.connection.poll(timeout)
        except (EOFError, OSError) as exc:
            raise ParentGone from exc

    def recv_bytes(self) -> bytes:
        try:
            return self.connection.recv_bytes()
        except (EOFError, OSError) as exc:
            raise ParentGone from exc

    def recv_bytes_into(self, buffer: Any) -> int:
        try:
            return self.connection.recv_bytes_into(buffer)
        except (EOFError, OSError) as exc:
            raise ParentGone from exc

    def recv(self) -> Any:
        return ForkingPickler.loads(self.recv_bytes())

    def send_bytes(self, data: Any) -> None:
        try:
            self.connection.send_bytes(data)
        except (EOFError, OSError) as exc:
            raise ParentGone from exc

    def send(self, obj: Any) -> None:
        self.send_bytes(ForkingPickler.dumps(obj))

    def close(self) -> None:
        self.connection.close()


class Readable:
    """``readable()``: whether pipe end ``conn`` has a message (or its other end closed), without waiting.

    The same answer as ``conn.poll()``, cheaper: `Connection.poll` builds a selector on every call, and a
    process that polls for its next message calls it thousands of times a second.
    """

    def __init__(self, conn: Any) -> None:
        self._poller = select.poll()
        self._poller.register(conn.fileno(), select.POLLIN)

    def __call__(self) -> bool:
        return bool(self._poller.poll(0))


def wait_for_message(conn: Any, readable: Readable, idle_since: float) -> None:
    """Return once ``conn`` has a message: poll with sched_yield until ``WORKER_SPIN_SECONDS`` after
    ``idle_since``, then block. The next command usually comes within that time, and a process that
    blocks must be woken."""
    while time.perf_counter() - idle_since < WORKER_SPIN_SECONDS:
        if readable():
            return
        os.sched_yield()
    conn.poll(None)


def quiet_ale_banner(payload: WorkerPayload) -> None:
    """No ALE banner from a worker: the emulator prints one each time a process makes its first
    `ALEInterface` (at Info log level), and the parent has shown it already, or will."""
    if "ale_py" not in sys.modules and not any(
        str(s.entry_point).startswith("ale_py") for s in payload.gym_specs
    ):
        return
    try:
        import ale_py
    except ImportError:
        return
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def worker_main(conn: Any, parent_conn: Any, payload_bytes: bytes, serve: Callable[..., None]) -> None:
    """Entry point of a worker process: build the envs, report them, then ``serve`` until `Close`.

    ``serve(conn, envs, payload, seq, setup)`` is the transport's worker loop; it gets the number and the
    `Setup` of the first command, answers it, and owns the envs from then on (closes them at the end).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_conn is not None:
        parent_conn.close()  # else the pipe never reports the parent's death (fork keeps both ends)
    conn = ParentPipe(conn)
    try:
        send_reply(conn, 0, Started(os.getpid()))
        began, modules_before = time.perf_counter(), set(sys.modules)
        try:
            payload: WorkerPayload = cloudpickle.loads(payload_bytes)
            quiet_ale_banner(payload)
            envs = payload.build_envs()
            # Inside the try: an env without spaces fails here, and that is its error, not a lost worker.
            share = describe_share(envs)
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            send_reply(conn, 0, error_reply(exc))
            return
        imported = sorted(name for name in set(sys.modules) - modules_before if "." not in name)
        send_reply(conn, 0, Ready(share, time.perf_counter() - began, tuple(imported)))
        seq, setup = conn.recv()
        if isinstance(setup, Close):
            # The vector env failed to start (another worker's env raised, the spaces differ): its envs
            # are closed here, since they never reach a serve loop.
            close_envs(envs)
            send_reply(conn, seq, None)
            return
        serve(conn, envs, payload, seq, setup)
    except ParentGone:
        pass  # nobody to answer


def close_envs(envs: list[gym.Env]) -> None:
    """Close every env, whatever one of them raises (the worker is ending)."""
    for env in envs:
        try:
            env.close()
        except Exception:
            pass


def answer_control(conn: Any, seq: int, command: ControlCommand, group: Any, first_env: int) -> bool:
    """Answer a control command on the pipe; False once it was `Close` (the serve loop then ends)."""
    send_reply(conn, seq, group.answer(command), first_env=first_env)
    return not isinstance(command, Close)
