"""The parent's end of a worker process and its pipe, what both process transports
(`torchwm.vector.transports.pipe`, `torchwm.vector.transports.shared_memory`) share.

A `ProcessGroup` (the pool's `torchwm.vector.transports.contract.WorkerGroup`) checks the ``context``
option (the start method, `torchwm.vector.transports.start_methods`) and that the env factories pickle,
before anything starts; a `ProcessHandle` (the parent's end of one worker, a
`torchwm.vector.transports.contract.WorkerHandle`) starts the process (its target is
`torchwm.vector.transports.worker_process.worker_main`), numbers every message it sends, reads replies,
detects a dead worker through its process sentinel, and ends the process within a deadline. The two
transports extend both with their way of stepping.

Every pipe message is numbered. The parent sends ``(seq, command)``; the
worker answers ``(seq, reply, raw_count)`` with the number of the command it
answers (0 for the messages it sends unasked at start: `Started`, then
`Ready`), then ``raw_count`` messages of raw bytes (a step's rows). A command
may be followed by raw bytes too (a step's actions: `torchwm.vector.transports.pipe.RawStep`).
A reply the parent no longer waits for (its command timed out, or
Ctrl-C interrupted the wait) is recognised by its number and dropped, so a
late reply is never taken for the answer to a later command. A reply that
cannot be pickled (an env attribute holding a lock, an emulator handle)
becomes an error reply for that command only (`worker_process.send_reply`). Only a Ctrl-C in
the middle of one message leaves a pipe that cannot be read again; the vector
env then says it must be closed.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from multiprocessing import forkserver
from multiprocessing.connection import wait as wait_connections
from typing import Any, ClassVar

import cloudpickle
import gymnasium as gym

from torchwm.errors import WorkerGone
from torchwm.spec import VecSpec
from torchwm.vector.messages import Close, ErrorReply, ShareDescription
from torchwm.vector.transports.contract import (
    Deadline,
    PoolSettings,
    WorkerGroup,
    WorkerHandle,
    WorkerPayload,
)
from torchwm.vector.transports.start_methods import (
    DEFAULT_START_METHOD,
    FAMILY_PRELOAD,
    FORKSERVER_PRELOAD,
    START_METHODS,
    ForkServerWorkerProcess,
)
from torchwm.vector.transports.worker_process import Readable, Ready, worker_main

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


# A worker whose envs took longer than this to build (payload and imports included) is named once per
# process, with the packages it imported: under forkserver or spawn each worker imports them anew.
SLOW_START_SECONDS = 2.0
_slow_start_noted = False

# The slow-start note is advice on start-up speed, not a warning: a record on the ``torchwm`` logger, which
# a suite that turns warnings into errors (TorchRL's) does not fail on; the command line prints it.
logger = logging.getLogger("torchwm")


def slow_start_text(
    backend: str, build_seconds: float, imported: list[str], start_method: str, command_line: bool = False
) -> str:
    """The slow-start note, with the advice in Python's words (``backend_kwargs``) or ``torchwm run``'s."""
    said = (
        f"a worker took {build_seconds:.1f} s to build its envs, most of it importing "
        f"{', '.join(imported[:5])}: under the {start_method!r} start method each worker imports them anew. "
    )
    if command_line:
        return said + f"Pass --set backends.{backend}.context=fork to start workers as copies of this process"
    return said + (
        "Pass backend_kwargs={'context': 'fork'} to start workers as copies of this process, or add "
        "the module to torchwm.vector.transports.start_methods.FORKSERVER_PRELOAD before the first "
        "vector env starts (forkserver imports it once for every worker)"
    )


def note_slow_start(ready: Ready, start_method: str, backend: str = "backend") -> None:
    """Log (``torchwm`` logger, WARNING) once per process that a worker built its envs slowly because it
    imported packages that this process has already imported (a `fork` worker would have them), and what
    avoids it. The record's ``command_line`` attribute is the note in the command line's words."""
    global _slow_start_noted
    if _slow_start_noted or ready.build_seconds < SLOW_START_SECONDS or start_method == "fork":
        return
    shared = [name for name in ready.imported if name in sys.modules]
    if not shared:
        return
    _slow_start_noted = True
    logger.warning(
        "torchwm: %s",
        slow_start_text(backend, ready.build_seconds, shared, start_method),
        extra={"command_line": slow_start_text(backend, ready.build_seconds, shared, start_method, True)},
    )


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
