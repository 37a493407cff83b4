"""What both process transports (`torchwm.vector.transports.pipe`, `torchwm.vector.transports.shared_memory`)
share: a worker process and its pipe.

Parent side, a `ProcessGroup` (the pool's `torchwm.vector.transports.contract.WorkerGroup`) checks
the ``context`` option and that the env factories pickle, before anything starts; a `ProcessHandle`
(the parent's end of one worker, a `torchwm.vector.transports.contract.WorkerHandle`) starts the
process (`worker_main`), numbers every message it sends, reads replies, detects a dead worker through
its process sentinel, and ends the process within a deadline. The two transports extend both with
their way of stepping.

Worker side, `worker_main`: it builds the envs from a cloudpickled
`torchwm.vector.transports.contract.WorkerPayload` (so lambdas, closures and envs registered
at run time work under fork, forkserver and spawn), reports them, then hands
over to its transport's serve loop, which answers commands until `Close`.
The serve loop reads and writes its pipe through `ParentPipe`, whose failures
raise `ParentGone`: only that ends a worker early. Whatever an env raises, a
``BrokenPipeError`` or ``EOFError`` of its own pipes included, is answered as
that env's error.

Every pipe message is numbered. The parent sends ``(seq, command)``; the
worker answers ``(seq, reply, raw_count)`` with the number of the command it
answers (0 for the messages it sends unasked at start: `Started`, then
`Ready`), then ``raw_count`` messages of raw bytes (a step's rows). A command
may be followed by raw bytes too (a step's actions: `torchwm.vector.transports.pipe.RawStep`).
A reply the parent no longer waits for (its command timed out, or
Ctrl-C interrupted the wait) is recognised by its number and dropped, so a
late reply is never taken for the answer to a later command. A reply that
cannot be pickled (an env attribute holding a lock, an emulator handle)
becomes an error reply for that command only (`send_reply`). Only a Ctrl-C in
the middle of one message leaves a pipe that cannot be read again; the vector
env then says it must be closed.

Workers under ``forkserver`` (the default) start without running the main
module again (`ForkServerWorkerProcess`), so a script needs no
``if __name__ == "__main__":`` guard, as under ``fork``; ``spawn`` runs it
again, as it does for any multiprocessing child. Workers ignore SIGINT:
Ctrl-C reaches the parent alone, which closes them.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import wait as wait_connections
from multiprocessing.reduction import ForkingPickler
from typing import Any, ClassVar, NamedTuple

import cloudpickle
import gymnasium as gym

from torchwm.errors import SlowStartWarning
from torchwm.spec import VecSpec
from torchwm.vector.messages import (
    Close,
    ControlCommand,
    ErrorReply,
    ShareDescription,
    describe_share,
    error_reply,
)
from torchwm.vector.transports.contract import (
    Deadline,
    PoolSettings,
    WorkerGone,
    WorkerGroup,
    WorkerHandle,
    WorkerPayload,
)

START_METHODS = ("fork", "forkserver", "spawn")
# forkserver: safe with threads in the parent (fork is not), much faster to start than spawn, and
# children fork from a small server process, so they do not copy the parent's memory.
DEFAULT_START_METHOD = "forkserver"
# Modules the forkserver imports once and every worker shares; this module too, since a worker unpickles
# its process object (`ForkServerWorkerProcess`) from it. A program whose env factories import a heavy
# module may add it before its first env starts (the test suite adds pytest).
FORKSERVER_PRELOAD = [
    "torchwm.vector.transports.processes",
    "torchwm.vector.transports.pipe",
    "torchwm.vector.transports.shared_memory",
    "gymnasium",
    "numpy",
    "cloudpickle",
    "torchwm.vector.transports.forkserver_preload",  # the plugin registries, loaded once
]
# What the workers of an env family import beyond that (`ProcessGroup` adds them for a spec of the family):
# for Atari the emulator, OpenCV (both Atari stacks resize with it) and the fused Atari env, which together
# took most of a worker's start when each worker imported them.
FAMILY_PRELOAD = {"atari": ["ale_py", "cv2", "torchwm.wrappers.atari_fused"]}
# A worker waiting for its next command polls with sched_yield this long before it blocks: longer than
# the parent's own work between two steps, since waking a sleeping process costs more than that work.
WORKER_SPIN_SECONDS = 0.001


# The worker processes this process started (a worker's `ProcessHandle.start` adds it).
_STARTED: weakref.WeakSet = weakref.WeakSet()


def _disown_workers_in_child() -> None:
    """After ``os.fork()``, in the child: the parent's workers are no children of this process.

    multiprocessing copies its list of children into a forked child, and at that child's exit
    terminates every daemon process in it and joins them (``AssertionError: can only join a child
    process``): a forked child that exits normally would end the parent's workers. Taken out of the
    child's list, they are left to their owner.
    """
    children = getattr(multiprocessing.process, "_children", None)
    if isinstance(children, set):
        for process in list(_STARTED):
            children.discard(process)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_disown_workers_in_child)


# -- the messages of the start-up handshake (the commands are in torchwm.vector.messages) -----------


class Started(NamedTuple):
    """Sent unasked once the process runs torchwm's code (a death before it is a start-up failure)."""

    pid: int


class Ready(NamedTuple):
    """Sent unasked once the envs are built: how long that took, and the top-level packages it imported
    (for the note on slow starts, `note_slow_start`)."""

    share: ShareDescription
    build_seconds: float = 0.0
    imported: tuple[str, ...] = ()


# A worker whose envs took longer than this to build (payload and imports included) is named once per
# process, with the packages it imported: under forkserver or spawn each worker imports them anew.
SLOW_START_SECONDS = 2.0
_slow_start_noted = False


def note_slow_start(ready: Ready, start_method: str, backend: str = "backend") -> None:
    """Warn (`SlowStartWarning`) once per process when a worker built its envs slowly because it imported
    packages that this process has already imported (a `fork` worker would have them), and say what
    avoids it."""
    global _slow_start_noted
    if _slow_start_noted or ready.build_seconds < SLOW_START_SECONDS or start_method == "fork":
        return
    shared = [name for name in ready.imported if name in sys.modules]
    if not shared:
        return
    _slow_start_noted = True
    warnings.warn(SlowStartWarning(backend, ready.build_seconds, shared, start_method), stacklevel=2)


class Setup(NamedTuple):
    """The worker's rows: ``layout`` of the shared block (its descriptor follows on the pipe), or None for
    rows of the worker's own."""

    layout: Any


# -- the parent's end ------------------------------------------------------------------------------


def pickle_factory(env_fn: Any, backend: str) -> bytes:
    """``env_fn`` cloudpickled, or a TypeError that names it and says how to fix it."""
    try:
        return cloudpickle.dumps(env_fn)
    except Exception as exc:
        name = getattr(env_fn, "__qualname__", None) or repr(env_fn)
        raise TypeError(
            f"{backend}: the env factory {name} cannot be pickled to send it to worker processes "
            f"({type(exc).__name__}: {exc}). Make it a module-level function, or a lambda/closure that "
            f"captures only picklable values (ids, numbers, kwargs), and build unpicklable objects "
            f"(open files, locks, sockets, other envs) inside it."
        ) from exc


def exit_reason(exitcode: int | None) -> str:
    """How a process ended, in words (``"killed by SIGKILL"``, ``"exit code 1"``)."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


class ProcessGroup(WorkerGroup):
    """The workers of a pool as processes: the ``context`` option (the start method) checked, and the
    env factories shown to pickle, before any process starts. `torchwm.vector.transports.pipe.PipeGroup`
    and `torchwm.vector.transports.shared_memory.SharedMemoryGroup` add how a step travels."""

    OPTIONS: ClassVar[dict[str, Any]] = {"context": DEFAULT_START_METHOD}

    def __init__(
        self,
        backend: str,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        options: dict[str, Any],
        pool: PoolSettings,
    ) -> None:
        super().__init__(backend, spec, env_fns, options, pool)
        if getattr(multiprocessing.current_process(), "_inheriting", False):
            # This process is a 'spawn' worker running the parent's main script again (it has no
            # `if __name__ == "__main__":` guard) and would start workers of its own. It ends quietly: the
            # parent sees its worker die before reaching torchwm and says why, once (`gone`).
            raise SystemExit(1)
        context = options.get("context")
        if context is None:
            context = DEFAULT_START_METHOD
        if context not in START_METHODS:
            raise ValueError(
                f"{backend}: context must be one of {list(START_METHODS)} (a start method), got {context!r}"
            )
        if context not in multiprocessing.get_all_start_methods():
            raise ValueError(f"{backend}: start method {context!r} is not available on this platform")
        for fn in dict.fromkeys(env_fns):  # each distinct factory once
            pickle_factory(fn, backend)  # fails here, naming the factory, before any worker starts
        self.context: Any = multiprocessing.get_context(context)
        if context == "forkserver":
            # Takes effect when the server starts, at the first forkserver backend of this process. Started
            # here, not at the first worker: the server imports its preload while this process goes on.
            self.context.set_forkserver_preload(FORKSERVER_PRELOAD + FAMILY_PRELOAD.get(spec.family, []))
            forkserver.ensure_running()

    @property
    def start_method(self) -> str:
        return self.context.get_start_method()

    def __repr__(self) -> str:
        return f"context={self.start_method!r}"


class ProcessHandle(WorkerHandle):
    """The parent's end of one worker process and of its pipe (control commands, and what else its
    transport sends there). `torchwm.vector.transports.pipe.PipeHandle` and
    `torchwm.vector.transports.shared_memory.SharedMemoryHandle` add how a step travels.

    Attributes:
        seq: the number of the last command sent (a shmem step takes a number too).
        answered: the number of the last reply read.
        torn: True while the parent is in the middle of a message to or from the worker; still True
            afterwards only if an interrupt cut the message, and the pipe can then not be read again.
        reached_torchwm: the worker got as far as torchwm's code (a death before that is a start-up failure).
    """

    serve: ClassVar[Callable[..., None]]  # the worker's end: ``serve(conn, envs, payload, setup)``

    def __init__(self, index: int, envs: range, group: ProcessGroup) -> None:
        super().__init__(index, envs, group)
        self.group = group
        self.process: Any = None
        self.conn: Any = None
        self.readable: Callable[[], bool] = lambda: False  # `Readable` of conn, once there is one
        self.seq = 0
        self.answered = 0
        self.torn = False
        self.reached_torchwm = False

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, payload: WorkerPayload) -> None:
        ctx = self.group.context
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        method = ctx.get_start_method()
        # The parent's end goes along only under fork, where the child holds a copy it must close.
        inherited = parent_conn if method == "fork" else None
        process_class = ForkServerWorkerProcess if method == "forkserver" else ctx.Process
        process = process_class(
            target=worker_main,
            args=(child_conn, inherited, cloudpickle.dumps(payload), self.serve),
            name=f"torchwm-worker-{self.index}",
            daemon=True,
        )
        try:
            with ctrl_c_after():
                process.start()
                self.process = process
                _STARTED.add(process)
        except BaseException:
            # The start failed; a Ctrl-C during it lands only after it (`ctrl_c_after`), when `close`
            # knows the process and ends it.
            parent_conn.close()
            child_conn.close()
            raise
        self.connected(parent_conn)
        child_conn.close()

    def connected(self, conn: Any) -> None:
        """Talk to the worker through ``conn`` from now on (a new worker: nothing of an old one pends)."""
        self.conn = conn
        self.readable = Readable(conn)
        self.torn = False
        self.reached_torchwm = False
        self.answered = self.seq

    def started(self, deadline: Deadline) -> ShareDescription | ErrorReply:
        started = self._receive(deadline, 0)
        if isinstance(started, ErrorReply):
            return started
        self.reached_torchwm = True
        ready = self._receive(deadline, 0)
        if isinstance(ready, ErrorReply):
            return ready
        # A process this transport did not start (a Ray actor on this node) has no start method to advise.
        start_method = getattr(self.group, "start_method", None)
        if start_method is not None:
            note_slow_start(ready, start_method, getattr(self.group, "backend", "backend"))
        return ready.share

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.exitcode is None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def gone(self) -> WorkerGone:
        self.process.join(0.1)
        hint = ""
        if not self.reached_torchwm:
            hint = "Its stderr shows the worker's own traceback."
            main = sys.modules.get("__main__")
            if self.group.start_method == "spawn" and getattr(main, "__file__", None) is not None:
                hint = (
                    "Under the 'spawn' start method a worker runs your main script again first: create "
                    "vector envs under `if __name__ == '__main__':`, or use the default start method, "
                    "forkserver, which does not."
                )
        return WorkerGone(exit_reason(self.process.exitcode), hint=hint)

    def describe(self) -> str:
        return f"worker {self.index} (envs {self.envs.start}-{self.envs.stop - 1}, pid {self.pid})"

    def stop(self) -> None:
        # No pipe: its start was interrupted (`close` ends the process, if there is one).
        if self.alive and not self.torn and self.conn is not None:
            try:
                self.seq += 1
                self.conn.send((self.seq, Close()))
            except (OSError, ValueError):
                pass
            self.wake()

    def close(self, deadline: Deadline) -> None:
        """Wait for the process until ``deadline``, then terminate it, then kill it."""
        process = self.process
        if process is not None:
            process.join(deadline.remaining())
            for end in ("terminate", "kill"):
                if process.exitcode is None:
                    getattr(process, end)()
                    process.join(deadline.remaining() or 1.0)
        if self.conn is not None:
            self.conn.close()
        if process is not None and process.exitcode is not None:
            process.close()
            self.process = None

    # -- messages --------------------------------------------------------------------------------

    def wake(self) -> None:
        """Wake the worker after a pipe message, if it sleeps somewhere other than on its pipe."""

    def send(self, command: Any, raw: Any = None) -> None:
        """Send ``command`` under a new number (``self.seq``), then the buffer ``raw`` if given."""
        if self.torn:
            raise self._cut()
        self.seq += 1
        self.torn = True
        try:
            self.conn.send((self.seq, command))
            if raw is not None:
                self.conn.send_bytes(raw)
        except (OSError, ValueError):
            pass  # a dead worker: the wait for its reply reports it
        self.torn = False
        self.wake()

    def reply(self, deadline: Deadline) -> Any:
        return self._receive(deadline, self.seq)

    def _cut(self) -> WorkerGone:
        return WorkerGone(
            "an interrupt (Ctrl-C) came in the middle of a message to or from this worker, and its "
            "pipe cannot be read again",
            restartable=False,
        )

    def _read(self, seq: int, into: list[memoryview] | None = None) -> tuple[bool, Any]:
        """Read one message (there must be one): (True, reply) if it answers command ``seq``, (False, None)
        if it answers an earlier command nobody waits for any more (dropped).

        The raw messages that follow a reply (a step's rows) are read into the buffers ``into``, in order,
        if it answers ``seq``; else dropped.
        """
        if self.torn:
            raise self._cut()
        self.torn = True
        try:
            answered, reply, raw_count = self.conn.recv()
            current = answered == seq
            buffers = into if current and into is not None else []
            for k in range(raw_count):  # every one read, so that the next message starts in step
                if k < len(buffers):
                    self.conn.recv_bytes_into(buffers[k])
                else:
                    self.conn.recv_bytes()
        except (EOFError, OSError):
            self.torn = False
            raise self.gone() from None
        self.torn = False
        if answered > seq:
            raise RuntimeError(f"{self.describe()} answered command {answered} before command {seq}")
        self.answered = max(self.answered, answered)
        return current, reply

    def _receive(self, deadline: Deadline, seq: int, into: list[memoryview] | None = None) -> Any:
        """The reply to command ``seq`` (0: a message the worker sends unasked); `WorkerGone` if the worker
        died, ``TimeoutError`` past ``deadline``."""
        while True:
            # A reply already there is read at once, also past the deadline (a result that came is never
            # lost to the clock); the wait below costs more than the check.
            if self.readable():
                ready = [self.conn]
            elif deadline.expired:
                raise TimeoutError
            else:
                ready = wait_connections([self.conn, self.process.sentinel], deadline.remaining())
            if self.conn in ready:
                current, reply = self._read(seq, into)
                if current:
                    return reply
            elif ready:
                raise self.gone()


# -- launching -------------------------------------------------------------------------------------


@contextlib.contextmanager
def ctrl_c_after() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) that comes inside this block until it ends, then deliver it.

    A process start interrupted half-way leaves a child its parent never learns of: under forkserver,
    a SIGINT between the server's fork and the return of its pid (inside the standard library's
    ``connect_to_new_process``) leaks the data pipe, and the child waits on it for ever. A start takes
    milliseconds (the first under forkserver also waits for the server's imports, about a second), so
    the Ctrl-C waits that long and then reaches the caller as it would have, with the process known
    and closed by the vector env's cleanup. Signal handlers belong to the main thread;
    elsewhere no SIGINT can interrupt, and nothing is held; nor where the handler is not Python's (an
    embedding program's), which could not be put back.
    """
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    held: list[Any] = []
    signal.signal(signal.SIGINT, lambda signum, frame: held.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            if callable(previous):
                previous(signal.SIGINT, held[0])
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


# Keys of multiprocessing's preparation data that make a child run the parent's main module again.
_MAIN_MODULE_KEYS = ("init_main_from_path", "init_main_from_name")


class _ForkServerPopen(popen_forkserver.Popen):
    """The forkserver start of a process, without running the parent's main module in the child.

    multiprocessing prepares each forkserver or spawn child with `spawn.get_preparation_data`, which
    names the parent's main script (``init_main_from_path``) or module (``init_main_from_name``); the
    child runs it again as ``__mp_main__`` so that objects pickled by reference from ``__main__``
    resolve there. A script without an ``if __name__ == "__main__":`` guard then builds its vector env
    again inside every worker and fails. A torchwm worker needs nothing from ``__main__``: its target
    is `worker_main` and its payload is cloudpickled (functions and classes of ``__main__`` travel by
    value). So these two keys are left out, for torchwm's workers only and without changing any global
    state; the rest is the standard library's ``Popen._launch`` unchanged (Python 3.10-3.13).
    """

    def _launch(self, process_obj: Any) -> None:
        prep_data = {
            key: value
            for key, value in spawn.get_preparation_data(process_obj._name).items()
            if key not in _MAIN_MODULE_KEYS
        }
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        # As in the standard library: a duplicate of the data pipe's write end is the sentinel of the
        # parent for the child.
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class ForkServerWorkerProcess(mp_context.ForkServerProcess):
    """A forkserver process that does not run the main module again (see `_ForkServerPopen`)."""

    @staticmethod
    def _Popen(process_obj: Any) -> _ForkServerPopen:
        return _ForkServerPopen(process_obj)


# -- the worker's end ------------------------------------------------------------------------------


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
