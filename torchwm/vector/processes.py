"""The parent side of the parallel backends: options, worker processes, faults, closing.

`ProcessVectorEnv` is the common base of ``subproc`` and ``shmem``. It checks
the backend options before anything starts, splits the envs over workers
(`split_envs`, visible as ``vec.worker_slices``), starts the workers
(`WorkerHandle`), talks to them for reset/call/set_attr, detects a dead
worker through its process sentinel (within a second, never a hang), restarts
it when ``restart_on_crash=True``, and closes everything within a deadline,
also at interpreter exit or garbage collection (`weakref.finalize`). The two
backends differ only in how a step travels: `_start_step` and `_await_ready`.

Every command to a worker is numbered and every reply says which command it
answers (see `torchwm.vector.worker`), so that a reply nobody waits for any
more (after a timeout or Ctrl-C) is dropped when it comes, never taken for a
later one. A step that Ctrl-C (or any unexpected exception) interrupts is
abandoned: its envs must be reset before they step again, and everything
else keeps working. Only a Ctrl-C in the middle of one message leaves a pipe
that cannot be read again; the vector env then says it must be closed.

Workers under ``forkserver`` (the default) start without running the main
module again (`ForkServerWorkerProcess`), so a script needs no
``if __name__ == "__main__":`` guard, as under ``fork``; ``spawn`` runs it
again, as it does for any multiprocessing child.

With ``inline=True`` the parent steps worker 0's share of the envs itself,
in-process, and starts only ``num_workers - 1`` processes: on a machine where
a process per core plus a waiting parent compete for the cores, it costs no
message for that share, but those envs have none of the protections of a
worker process (no timeout, a crash or ``os._exit`` in them ends the
program). It is off by default.
"""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import sys
import time
import weakref
from collections.abc import Callable
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import wait as wait_connections
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.errors import EnvTimeoutError, WorkerError, worker_error
from torchwm.spec import VecSpec, check_count, check_timeout
from torchwm.vector.base import VectorEnv, check_observation_mode, resolve_spaces
from torchwm.vector.batching import slice_rows
from torchwm.vector.env_group import EnvGroup, env_fns_of
from torchwm.vector.worker import (
    WorkerPayload,
    control_reply,
    describe_share,
    error_reply,
    gym_specs_to_send,
    worker_main,
)

START_METHODS = ("fork", "forkserver", "spawn")
# forkserver: safe with threads in the parent (fork is not), much faster to start than spawn, and
# children fork from a small server process, so they do not copy the parent's memory.
DEFAULT_START_METHOD = "forkserver"
DEFAULT_TIMEOUT = 300.0
CLOSE_GRACE_SECONDS = 1.0  # how long close() waits for workers to exit before terminating them
# Every option of the process backends and its default (None: decided from the machine or the spec).
OPTION_DEFAULTS = {"num_workers": None, "envs_per_worker": None, "batch_size": None, "context": DEFAULT_START_METHOD,
                   "timeout": DEFAULT_TIMEOUT, "copy": True, "restart_on_crash": False, "env_fn": None,
                   "inline": False, "observation_mode": "same"}
BACKEND_OPTIONS = tuple(OPTION_DEFAULTS)
# The conformance suite runs every check under each start method, with envs split over two workers,
# and with the parent stepping worker 0's share next to one worker process (inline=True).
CONFORMANCE_VARIANTS = ([{"context": method, "num_workers": 2} for method in START_METHODS]
                        + [{"context": method, "num_workers": 2, "inline": True} for method in ("fork", "forkserver")])
# torchwm.vector.processes too: a worker unpickles its process object (`ForkServerWorkerProcess`) from it.
_PRELOAD = ["torchwm.vector.processes", "torchwm.vector.worker", "gymnasium", "numpy", "cloudpickle"]


def default_num_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split_envs(num_envs: int, num_workers: int | None, envs_per_worker: int | None,
               backend: str = "backend") -> list[range]:
    """The envs of each worker: contiguous ranges, as even as possible.

    ``envs_per_worker`` alone gives ``ceil(num_envs / envs_per_worker)`` workers (the last one may have
    fewer); ``num_workers`` alone spreads the envs evenly (at most one worker per env).

    Example:
        >>> split_envs(10, 4, None)
        [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
        >>> split_envs(10, None, 4)
        [range(0, 4), range(4, 8), range(8, 10)]
    """
    if envs_per_worker is not None:
        workers = math.ceil(num_envs / envs_per_worker)
        if num_workers is not None and num_workers != workers:
            raise ValueError(
                f"{backend}: num_workers={num_workers} and envs_per_worker={envs_per_worker} do not fit "
                f"num_envs={num_envs} (that needs {workers} workers); give one of them, or matching values"
            )
        return [range(start, min(start + envs_per_worker, num_envs)) for start in range(0, num_envs, envs_per_worker)]
    workers = min(num_workers if num_workers is not None else default_num_workers(), num_envs)
    bounds = np.linspace(0, num_envs, workers + 1).round().astype(int)
    sizes = np.diff(bounds)
    # Larger groups first, like np.array_split, so the split reads naturally.
    sizes = np.sort(sizes)[::-1]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]


def check_options(backend: str, num_envs: int, options: dict[str, Any]) -> dict[str, Any]:
    """Every backend option checked and defaulted; raises before any process starts."""
    unknown = sorted(set(options) - set(BACKEND_OPTIONS))
    if unknown:
        raise TypeError(f"{backend}: unknown backend option(s) {unknown}; expected some of {sorted(BACKEND_OPTIONS)}")
    num_workers = options.get("num_workers")
    envs_per_worker = options.get("envs_per_worker")
    if num_workers is not None:
        num_workers = check_count(f"{backend}: num_workers", num_workers)
    if envs_per_worker is not None:
        envs_per_worker = check_count(f"{backend}: envs_per_worker", envs_per_worker)
    batch_size = options.get("batch_size")
    if batch_size is not None:
        batch_size = check_count(f"{backend}: batch_size", batch_size)
        if batch_size > num_envs:
            raise ValueError(f"{backend}: batch_size must be from 1 to num_envs={num_envs}, got {batch_size}")
    context = options.get("context")
    if context is None:
        context = DEFAULT_START_METHOD
    if context not in START_METHODS:
        raise ValueError(f"{backend}: context must be one of {list(START_METHODS)} (a start method), got {context!r}")
    if context not in multiprocessing.get_all_start_methods():
        raise ValueError(f"{backend}: start method {context!r} is not available on this platform")
    timeout = check_timeout(options.get("timeout", DEFAULT_TIMEOUT), f"{backend}: timeout")
    for flag in ("copy", "restart_on_crash"):
        if flag in options and not isinstance(options[flag], bool):
            raise TypeError(f"{backend}: {flag} must be True or False, got {options[flag]!r}")
    env_fn = options.get("env_fn")
    if env_fn is not None:
        env_fn = env_fns_of(env_fn, num_envs, backend)
    inline = options.get("inline")
    if inline is None:
        inline = False
    if not isinstance(inline, bool):
        raise TypeError(f"{backend}: inline must be True or False (default), got {inline!r}")
    worker_slices = split_envs(num_envs, num_workers, envs_per_worker, backend)
    return {
        "worker_slices": worker_slices,
        "inline": inline,
        "batch_size": batch_size,
        "context": context,
        "timeout": timeout,
        "copy": options.get("copy", True),
        "restart_on_crash": options.get("restart_on_crash", False),
        "env_fn": env_fn,
        "observation_mode": check_observation_mode(options.get("observation_mode", "same")),
    }


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


def signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


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
        prep_data = {key: value for key, value in spawn.get_preparation_data(process_obj._name).items()
                     if key not in _MAIN_MODULE_KEYS}
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        # As in the standard library: a duplicate of the data pipe's write end is the sentinel of the
        # parent for the child.
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class ForkServerWorkerProcess(mp_context.ForkServerProcess):
    """A forkserver process that does not run the main module again (see `_ForkServerPopen`)."""

    @staticmethod
    def _Popen(process_obj: Any) -> _ForkServerPopen:
        return _ForkServerPopen(process_obj)


def _main_module_runs_again(start_method: str) -> bool:
    """Whether a worker started by ``start_method`` runs the parent's main script again (spawn only)."""
    main = sys.modules.get("__main__")
    return start_method == "spawn" and main is not None and getattr(main, "__file__", None) is not None


class WorkerHandle:
    """One worker process and the parent's end of its pipe.

    An ``inline`` handle has no process: its envs are stepped by the parent itself (see ``shmem``'s
    ``inline`` option); it keeps the index and env range so that errors name it like any worker.

    Attributes:
        seq: the number of the last command sent (a shmem step takes a number too).
        torn: True while the parent is in the middle of a message to or from the worker; still True
            afterwards only if an interrupt cut the message, and the pipe can then not be read again.
        started: the worker reached torchwm's code (a death before that is a start-up failure).
    """

    def __init__(self, index: int, envs: range, inline: bool = False) -> None:
        self.index = index
        self.envs = envs
        self.inline = inline
        self.process: Any = None
        self.conn: Any = None
        self.seq = 0
        self.torn = False
        self.started = False

    def start(self, ctx: Any, payload: bytes) -> None:
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        method = ctx.get_start_method()
        # The parent's end goes along only under fork, where the child holds a copy it must close.
        inherited = parent_conn if method == "fork" else None
        process_class = ForkServerWorkerProcess if method == "forkserver" else ctx.Process
        self.process = process_class(
            target=worker_main, args=(self.index, child_conn, inherited, payload),
            name=f"torchwm-worker-{self.index}", daemon=True,
        )
        self.process.start()
        child_conn.close()
        self.conn = parent_conn
        self.torn = False
        self.started = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.exitcode is None

    def describe(self) -> str:
        where = f"in the parent process, pid {os.getpid()}" if self.inline else f"pid {self.process.pid}"
        return f"worker {self.index} (envs {self.envs.start}-{self.envs.stop - 1}, {where})"


def shutdown(handles: list[WorkerHandle], release: Callable[[], None] | None) -> None:
    """End every worker within a deadline (ask, then terminate, then kill), then free shared memory.

    Module-level (not a method) so that `weakref.finalize` can call it without keeping the env alive.
    """
    try:
        for handle in handles:
            if handle.alive and not handle.torn:
                try:
                    handle.seq += 1
                    handle.conn.send((handle.seq, ("close",)))
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + CLOSE_GRACE_SECONDS
        for handle in handles:
            if handle.process is not None:
                handle.process.join(max(0.0, deadline - time.monotonic()))
        for step in ("terminate", "kill"):
            for handle in handles:
                if handle.alive:
                    getattr(handle.process, step)()
            for handle in handles:
                if handle.process is not None:
                    handle.process.join(CLOSE_GRACE_SECONDS)
        for handle in handles:
            if handle.conn is not None:
                handle.conn.close()
            if handle.process is not None and not handle.alive:
                handle.process.close()
                handle.process = None
    finally:
        if release is not None:
            release()


class ProcessVectorEnv(VectorEnv):
    """Envs in worker processes, several per worker. Subclassed by ``subproc`` and ``shmem``.

    Args:
        spec: what to build (each worker builds its envs with `torchwm.factory.build_env`).
        num_workers: worker processes (default: the cores this process may use, at most num_envs).
        envs_per_worker: envs each worker steps (the last worker takes the rest); give this or num_workers.
        batch_size: `recv` returns ``batch_size`` envs among those ready, the ones ready first (default:
            all in flight).
        context: start method, ``"forkserver"`` (default), ``"fork"`` or ``"spawn"``.
        timeout: seconds a wait on workers may take before `EnvTimeoutError` (default 300; None or
            ``math.inf``: no limit). A dead worker is detected within a second whatever the timeout.
        copy: return copies of the observation batch (default) or a view the next call overwrites.
        restart_on_crash: restart a worker that died, with its envs; their episodes in flight end
            truncated with ``infos["worker_restarted"]``.
        env_fn: a no-argument callable that returns one env, or a list of one such callable per env,
            instead of building from ``spec`` (`torchwm.make_vec_from_fns` passes it).
        inline: the parent steps worker 0's envs itself (``worker_slices[0]``, ``worker_pids[0]`` is
            None) and starts ``num_workers - 1`` processes (default False). Those envs then have none
            of a worker's protections: no timeout, and a crash or ``os._exit`` in them ends the
            program. A step runs the parent's envs after signalling the children, in `send` (its envs
            are ready at once, as with ``sync``); ``restart_on_crash`` concerns the children only.
    """

    backend_name = "process"

    def __init__(self, spec: VecSpec, **options: Any) -> None:
        self._handles: list[WorkerHandle] = []
        self._finalizer: weakref.finalize | None = None
        settings = check_options(self.backend_name, spec.num_envs, options)
        env_fns = settings["env_fn"]
        if env_fns is None:
            from torchwm.factory import env_fn as spec_env_fn

            env_fns = [spec_env_fn(spec)] * spec.num_envs
        self._env_fns: list[Callable[[], gym.Env]] = env_fns
        for fn in dict.fromkeys(env_fns):  # each distinct factory once
            pickle_factory(fn, self.backend_name)  # fails here, naming the factory, before any worker starts
        self._gym_specs = gym_specs_to_send(spec.id)
        self.worker_slices: list[range] = settings["worker_slices"]
        self.num_workers = len(self.worker_slices)
        self.restart_on_crash: bool = settings["restart_on_crash"]
        self.start_method: str = settings["context"]
        self._ctx = multiprocessing.get_context(self.start_method)
        if self.start_method == "forkserver":
            # Modules the server imports once and every worker shares (takes effect when the server
            # starts, at the first forkserver backend of this process).
            self._ctx.set_forkserver_preload(_PRELOAD + (["ale_py"] if spec.family == "atari" else []))
        self._worker_of = np.concatenate([np.full(len(r), w) for w, r in enumerate(self.worker_slices)])
        self._autoreset = spec.autoreset
        self._failure: WorkerError | None = None
        self._ready: dict[int, dict] = {}  # envs stepped but not yet returned by recv, in finishing order
        # For batch_size < num_envs: the recv() count when each env was last sent, and the envs in
        # flight that were passed over for too long (`_overdue_envs`): recv waits for those.
        self._recvs = 0
        self._sent_at = np.zeros(spec.num_envs, dtype=np.int64)
        self._overdue: list[int] = []
        # Envs whose step was interrupted (Ctrl-C): they must be reset before they step again.
        self._interrupted = np.zeros(spec.num_envs, dtype=bool)
        self._any_interrupted = False
        inline = settings["inline"]
        self._handles = [WorkerHandle(w, envs, inline=inline and w == 0) for w, envs in enumerate(self.worker_slices)]
        self._children = [handle for handle in self._handles if not handle.inline]
        self._local_group: EnvGroup | None = None  # the envs of the inline handle, stepped here
        self._finalizer = weakref.finalize(self, shutdown, self._handles, None)
        local_envs: list[gym.Env] = []
        try:
            deadline = _deadline(settings["timeout"])
            for handle in self._children:
                self._start_worker(handle)
            # Built while the children build theirs.
            local_envs = self._build_local_envs(self._handles[0]) if inline else []
            shares = [(handle.envs, self._expect_ready(handle, deadline)) for handle in self._children]
            if inline:
                shares.insert(0, (self._handles[0].envs, describe_share(local_envs)))
            single_observation_space, observation_space, single_action_space = resolve_spaces(
                type(self).__name__, settings["observation_mode"],
                [space for _, share in shares for space in share["observation_spaces"]],
                [space for _, share in shares for space in share["action_spaces"]])
            first = shares[0][1]
            super().__init__(
                spec, single_observation_space, single_action_space, metadata=first["metadata"],
                render_mode=first["render_mode"], batch_size=settings["batch_size"], timeout=settings["timeout"],
                copy=settings["copy"], observation_space=observation_space,
            )
            self._make_buffers()
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, shutdown, self._handles, self._release_buffers())
            if inline:
                rows = self.worker_slices[0]
                self._local_group = EnvGroup(
                    local_envs, self._autoreset,
                    slice_rows(self.single_observation_space, self._observations, rows.start, rows.stop),
                    self._rewards[rows.start:rows.stop], self._terminations[rows.start:rows.stop],
                    self._truncations[rows.start:rows.stop],
                )
            setups = [(handle, self._setup(handle)) for handle in self._children]
            for handle, seq in setups:
                self._expect(handle, seq, "ok", deadline, "attaching its buffers")
        except BaseException:
            self._close_local(local_envs)
            self._finalizer()
            raise

    # -- what subprocess and shmem provide -------------------------------------------------------

    def _make_buffers(self) -> None:
        raise NotImplementedError

    def _release_buffers(self) -> Callable[[], None] | None:
        return None

    def _layout(self) -> Any:
        return None

    def _hand_over_buffers(self, handle: WorkerHandle) -> None:
        """Give a worker that was sent its setup what it needs beyond the layout (shmem: the block)."""

    def _start_step(self, ids: np.ndarray, actions: Any) -> None:
        """Start stepping ``ids`` (see `VectorEnv._send_step`)."""
        raise NotImplementedError

    def _await_ready(self, candidates: np.ndarray, count: int, timeout: float | None) -> tuple[np.ndarray, list[dict]]:
        """Wait for ``count`` envs ready (see `VectorEnv._wait_ready`); the ones ready first come first."""
        raise NotImplementedError

    def _reset_reply(self, handle: WorkerHandle, local_ids: list[int], reply: Any) -> list[dict]:
        """Store a worker's reset reply in the batch; return the infos."""
        raise NotImplementedError

    def _worker_restarted(self, handle: WorkerHandle) -> None:
        """Forget what was in flight on a worker that was restarted."""

    def _forget_steps(self) -> None:
        """Forget the steps in progress without waiting for them: their replies are dropped when they come."""

    def _drain(self, deadline: float | None) -> None:
        """Wait for every step in progress and discard its results (after an env raised)."""

    def _ring(self, handle: WorkerHandle) -> None:
        """Wake ``handle`` after a pipe command, if it sleeps somewhere other than on its pipe."""

    # -- stepping: what the base class calls -----------------------------------------------------

    def _send_step(self, ids: np.ndarray, actions: Any) -> None:
        self._check_usable()
        if self._any_interrupted and self._interrupted[ids].any():
            raise gym.error.ResetNeeded(
                f"{self.backend_name}: envs {ids[self._interrupted[ids]].tolist()} were in a step that was "
                f"interrupted (Ctrl-C), so their state is not what the last results said; reset them "
                f"(reset(), or reset(env_ids=[...])) before stepping them again"
            )
        if self.batch_size < self.num_envs:  # only batches of fewer envs choose (see _overdue_envs)
            self._sent_at[ids] = self._recvs
        try:
            self._start_step(ids, actions)
        except (WorkerError, EnvTimeoutError):
            raise  # handled where raised: nothing half-done is left
        except BaseException:
            self._abandon_step(ids)
            raise

    def _wait_ready(self, candidates: np.ndarray, count: int, timeout: float | None) -> tuple[np.ndarray, list[dict]]:
        self._check_usable()
        self._recvs += 1
        self._overdue = self._overdue_envs(candidates, count)
        try:
            return self._await_ready(candidates, count, timeout)
        except (WorkerError, EnvTimeoutError):
            raise  # a timeout leaves the envs in flight: recv() again to keep waiting
        except BaseException:
            self._abandon_step(None)
            raise

    def _abandon_step(self, sending: np.ndarray | None) -> None:
        """A step was interrupted midway (Ctrl-C, or an unexpected error in the parent): forget it.

        Its envs (those in flight, and ``sending``) are marked to be reset; the replies still to come
        are dropped by their numbers; the workers are not waited for, so Ctrl-C returns at once.
        """
        envs = self._in_flight.copy()
        if sending is not None:
            envs[sending] = True
        self._interrupted |= envs
        self._any_interrupted = bool(self._interrupted.any())
        self._ready.clear()
        self._in_flight[:] = False
        self._forget_steps()

    def _fail_step(self, error: WorkerError, deadline: float | None) -> None:
        """An env raised during a step: finish the rest of the step, then raise with nothing in flight.

        Leaves the vector env usable: the envs that were stepping keep their new state, and the one that
        raised should be reset (``reset(env_ids=[error.env_index])``) before it is stepped again.
        """
        try:
            self._drain(deadline)
        except BaseException:
            self._abandon_step(None)
            raise
        self._ready.clear()
        self._in_flight[:] = False
        raise error

    # -- messages --------------------------------------------------------------------------------

    def _request(self, handle: WorkerHandle, command: tuple) -> int:
        """Send ``command`` to ``handle``'s worker under a new number, and return the number."""
        if handle.torn:
            raise self._lost(handle)
        handle.seq += 1
        handle.torn = True
        try:
            handle.conn.send((handle.seq, command))
        except (OSError, ValueError):
            pass  # a dead worker: the wait for its reply reports it
        handle.torn = False
        self._ring(handle)
        return handle.seq

    def _read_reply(self, handle: WorkerHandle, seq: int, doing: str,
                    into: Callable[[], memoryview] | None = None) -> tuple[bool, Any]:
        """Read one message of ``handle`` (it must have one): (True, reply) if it answers command ``seq``,
        (False, None) if it answers an earlier command nobody waits for any more (dropped).

        A reply followed by raw observation bytes has them read into ``into()``, or dropped.
        """
        if handle.torn:
            raise self._lost(handle)
        handle.torn = True
        try:
            answered, reply, raw_follows = handle.conn.recv()
            current = answered == seq
            if raw_follows:
                if current and into is not None:
                    handle.conn.recv_bytes_into(into())
                else:
                    handle.conn.recv_bytes()
        except (EOFError, OSError):
            raise self._dead(handle, doing) from None
        handle.torn = False
        if answered > seq:
            raise RuntimeError(f"{self.backend_name}: {handle.describe()} answered command {answered} while "
                               f"{doing}, before command {seq}")
        return current, reply

    def _receive(self, handle: WorkerHandle, deadline: float | None, doing: str, seq: int,
                 into: Callable[[], memoryview] | None = None) -> Any:
        """The reply to command ``seq`` of ``handle``; WorkerError if it died, EnvTimeoutError past ``deadline``."""
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise EnvTimeoutError(
                    f"{self.backend_name}: {handle.describe()} did not answer within the timeout while {doing}; "
                    f"pass a larger timeout= (backend_kwargs or recv(timeout=)), or look for an env that hangs"
                )
            ready = wait_connections([handle.conn, handle.process.sentinel], remaining)
            if handle.conn in ready:
                current, reply = self._read_reply(handle, seq, doing, into)
                if current:
                    return reply
            elif ready:
                raise self._dead(handle, doing)

    def _lost(self, handle: WorkerHandle) -> WorkerError:
        """The error for a pipe that an interrupt cut in the middle of a message; nothing more can work."""
        error = WorkerError(
            f"{self.backend_name}: an interrupt (Ctrl-C) came in the middle of a message to or from "
            f"{handle.describe()}, and its pipe cannot be read again; close() this vector env and make a new one",
            worker_index=handle.index,
        )
        self._fail_for_good(error)
        return error

    # -- workers ---------------------------------------------------------------------------------

    def _build_local_envs(self, handle: WorkerHandle) -> list[gym.Env]:
        """The inline handle's envs, built here; a failure is reported like a worker's."""
        envs: list[gym.Env] = []
        try:
            for i in handle.envs:
                envs.append(self._env_fns[i]())
        except Exception as exc:
            self._close_local(envs)
            self._check_reply(handle, error_reply(exc), "starting its envs")
        return envs

    @staticmethod
    def _close_local(envs: list[gym.Env]) -> None:
        for env in envs:
            try:
                env.close()
            except Exception:
                pass

    def _run_local(self, command: tuple, doing: str) -> Any:
        """A control command on the inline handle's envs: the reply a worker would send, or its WorkerError."""
        assert self._local_group is not None
        try:
            message = control_reply(self._local_group, command)
        except Exception as exc:
            message = error_reply(exc)
        return self._check_reply(self._handles[0], message, doing)

    def _overdue_envs(self, candidates: np.ndarray, count: int) -> list[int]:
        """The envs in flight that were sent two rounds of ``count`` envs ago or more (empty when
        every env in flight is waited for anyway).

        With ``batch_size``, recv returns envs that are ready; a worker that the OS runs less than the
        others (more processes than cores) would then have its envs passed over again and again while
        the others cycle. Waiting for envs this overdue bounds how long any env waits for its turn.
        """
        if count >= candidates.size:
            return []
        patience = 2 * -(-self.num_envs // count)
        return candidates[self._sent_at[candidates] <= self._recvs - patience].tolist()

    def _enough_ready(self, count: int) -> bool:
        """Whether recv can return: ``count`` envs ready, and every overdue env among them."""
        return len(self._ready) >= count and all(env in self._ready for env in self._overdue)

    def _collect_ready(self, count: int) -> tuple[np.ndarray, list[dict]]:
        """``count`` envs of ``_ready`` and their infos, removed from it: those sent longest ago first
        (in finishing order among envs sent together), so that with ``batch_size`` every env has its
        turn and none starves."""
        if count == len(self._ready):  # all of them: no per-env pops
            ids, infos = np.fromiter(self._ready, np.int64, count), list(self._ready.values())
            self._ready.clear()
            return ids, infos
        chosen = sorted(self._ready, key=self._sent_at.__getitem__)[:count]  # stable: finishing order kept
        return np.asarray(chosen, dtype=np.int64), [self._ready.pop(i) for i in chosen]

    def _step_local(self, local_ids: list[int], actions: Any) -> None:
        """Step the parent's share now; an env error is raised like a worker's, after the children finish."""
        assert self._local_group is not None
        handle = self._handles[0]
        try:
            infos = self._local_group.step(local_ids, actions)
        except Exception as exc:
            try:
                self._check_reply(handle, error_reply(exc), "stepping")  # raises the WorkerError a worker's gives
            except WorkerError as error:
                self._fail_step(error, _deadline(self.timeout))  # waits for the children, then raises it
            raise  # not reached
        start = handle.envs.start
        self._ready.update(zip((start + i for i in local_ids), infos))

    def _start_worker(self, handle: WorkerHandle) -> None:
        payload = WorkerPayload(
            env_fns=self._env_fns[handle.envs.start:handle.envs.stop], first_env=handle.envs.start,
            autoreset_mode=self._autoreset, gym_specs=self._gym_specs,
        )
        handle.start(self._ctx, cloudpickle.dumps(payload))

    def _expect_ready(self, handle: WorkerHandle, deadline: float | None) -> dict[str, Any]:
        """Wait for a new worker's ``started`` then ``ready``; returns its `describe_share`."""
        self._expect(handle, 0, "started", deadline, "starting")
        handle.started = True
        return self._expect(handle, 0, "ready", deadline, "starting its envs")

    def _setup(self, handle: WorkerHandle) -> int:
        """Send a ready worker the batch layout (and the buffers); returns the command's number."""
        seq = self._request(handle, ("setup", self._layout()))
        self._hand_over_buffers(handle)
        return seq

    def _dead(self, handle: WorkerHandle, doing: str) -> WorkerError:
        handle.process.join(0.1)
        if not handle.started:
            hint = "Its stderr shows the worker's own traceback."
            if _main_module_runs_again(self.start_method):
                hint = ("Under the 'spawn' start method a worker runs your main script again first: create "
                        "vector envs under `if __name__ == '__main__':`, or use the default start method, "
                        "forkserver, which does not.")
        elif doing == "starting its envs":
            hint = "An env's constructor ended the process (a crash, os._exit, exit()); its stderr may show why."
        else:
            hint = ("Its envs are lost; close() this vector env and make a new one, or pass "
                    "backend_kwargs={'restart_on_crash': True} to restart crashed workers.")
        return WorkerError(
            f"{self.backend_name}: {handle.describe()} died ({signal_name(handle.process.exitcode)}) while "
            f"{doing}. {hint}",
            worker_index=handle.index,
        )

    def _fail_for_good(self, failure: WorkerError) -> None:
        """Nothing more can work (a dead worker, a cut pipe): every later call raises ``failure``'s message."""
        # A copy without the traceback: its frames hold views of the batch, which close() must free.
        self._failure = WorkerError(failure.args[0], worker_index=failure.worker_index)
        self._ready.clear()
        self._in_flight[:] = False

    def _raise_failure(self, failure: WorkerError) -> None:
        if failure.env_index is None:
            self._fail_for_good(failure)
        raise failure

    def _check_reply(self, handle: WorkerHandle, message: Any, doing: str) -> Any:
        if message[0] == "error":
            _, local_index, remote_traceback, summary, pickled_type = message
            try:
                original_type = None if pickled_type is None else cloudpickle.loads(pickled_type)
            except Exception:  # a type the parent cannot import: plain WorkerError, the message names it
                original_type = None
            env_index = None if local_index is None else handle.envs.start + local_index
            where = f"env {env_index} on {handle.describe()}" if env_index is not None else handle.describe()
            raise worker_error(f"{self.backend_name}: {where} raised {summary} while {doing}",
                               original_type=original_type, env_index=env_index, worker_index=handle.index,
                               remote_traceback=remote_traceback)
        return message

    def _expect(self, handle: WorkerHandle, seq: int, kind: str, deadline: float | None, doing: str) -> Any:
        """The reply to command ``seq`` (0: a message the worker sends unasked), which must be ``kind``."""
        message = self._check_reply(handle, self._receive(handle, deadline, doing, seq), doing)
        if message[0] != kind:
            raise RuntimeError(f"{self.backend_name}: {handle.describe()} sent {message[0]!r} while {doing}, expected {kind!r}")
        return message[1]

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise WorkerError(f"{self.backend_name}: this vector env lost a worker earlier ({self._failure.args[0]})",
                              worker_index=self._failure.worker_index)

    def _restart(self, handle: WorkerHandle, deadline: float | None) -> list[dict]:
        """A new process for a dead worker's envs, reset; returns their reset infos."""
        handle.conn.close()
        handle.process.join(1.0)
        handle.process.close()
        self._start_worker(handle)
        doing = "restarting after a crash"
        self._expect_ready(handle, deadline)
        self._expect(handle, self._setup(handle), "ok", deadline, doing)
        local_ids = list(range(len(handle.envs)))
        seq = self._request(handle, ("reset", local_ids, [None] * len(local_ids), None))
        infos = self._reset_reply(handle, local_ids, self._expect(handle, seq, "ok", deadline, doing))
        if self._autoreset is AutoresetMode.NEXT_STEP:
            self._expect(handle, self._request(handle, ("needs_reset",)), "ok", deadline, doing)
        self._worker_restarted(handle)
        ids = np.asarray(handle.envs)
        self._rewards[ids] = 0.0
        self._terminations[ids] = False
        self._truncations[ids] = True
        return [{**info, "worker_restarted": True} for info in infos]

    def _on_crash(self, handle: WorkerHandle, error: WorkerError, deadline: float | None) -> None:
        """Restart ``handle`` (restart_on_crash) and mark its in-flight envs ready, or fail for good."""
        if not self.restart_on_crash:
            self._raise_failure(error)
        infos = self._restart(handle, deadline)
        for env, info in zip(handle.envs, infos, strict=True):
            if self._in_flight[env]:
                self._ready[env] = info

    # -- control commands (reset, call, set_attr) ------------------------------------------------

    def _broadcast(self, commands: dict[int, tuple], doing: str) -> dict[int, Any]:
        """Send each worker its command, then gather every reply (commands run in parallel).

        An error reply (an env raised, or its result cannot be pickled) fails this call only; a worker
        that died fails the vector env, unless ``restart_on_crash`` restarts it and the command is sent
        again.
        """
        self._check_usable()
        deadline = _deadline(self.timeout)
        sent = {w: self._request(self._handles[w], command) for w, command in commands.items()
                if not self._handles[w].inline}  # the inline share runs below, while the children run theirs
        replies: dict[int, Any] = {}
        first_error: BaseException | None = None
        for w in sorted(commands, key=lambda w: not self._handles[w].inline):
            handle = self._handles[w]
            try:
                if handle.inline:
                    replies[w] = self._run_local(commands[w], doing)[1]
                    continue
                try:
                    message = self._receive(handle, deadline, doing, sent[w])
                except WorkerError as death:
                    if not self.restart_on_crash or self._failure is not None:
                        if self._failure is None:
                            self._fail_for_good(death)
                        raise
                    self._restart(handle, deadline)
                    message = self._receive(handle, deadline, doing, self._request(handle, commands[w]))
                replies[w] = self._check_reply(handle, message, doing)[1]
            except WorkerError as error:
                if first_error is None:
                    first_error = error
        if first_error is not None:
            raise first_error
        return replies

    def _reset_envs(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> list[dict]:
        commands: dict[int, tuple] = {}
        positions: dict[int, list[int]] = {}
        for position, env in enumerate(ids.tolist()):
            w = int(self._worker_of[env])
            positions.setdefault(w, []).append(position)
        for w, where in positions.items():
            start = self.worker_slices[w].start
            local_ids = [int(ids[p]) - start for p in where]
            commands[w] = ("reset", local_ids, [seeds[p] for p in where], options)
        replies = self._broadcast(commands, "resetting")
        infos: list[dict] = [{}] * len(ids)
        for w, reply in replies.items():
            for p, info in zip(positions[w], self._reset_reply(self._handles[w], commands[w][1], reply), strict=True):
                infos[p] = info
        for env in ids.tolist():
            self._ready.pop(env, None)
        if self._any_interrupted:
            self._interrupted[ids] = False
            self._any_interrupted = bool(self._interrupted.any())
        return infos

    def _call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        replies = self._broadcast({w: ("call", name, args, kwargs) for w in range(self.num_workers)}, f"calling {name!r}")
        return [value for w in range(self.num_workers) for value in replies[w]]

    def _set_attr(self, name: str, values: list[Any]) -> None:
        commands = {w: ("set_attr", name, values[r.start:r.stop]) for w, r in enumerate(self.worker_slices)}
        self._broadcast(commands, f"setting {name!r}")

    def _close(self) -> None:
        group, self._local_group = self._local_group, None
        if group is not None:
            self._close_local(group.envs)
            del group  # its rows are views of the batch, which shmem unmaps below
        if self._finalizer is not None:
            self._finalizer()

    @property
    def worker_pids(self) -> list[int | None]:
        """The process id of each worker (tests and fault injection use it); None for the parent's share."""
        return [h.process.pid if h.process is not None else None for h in self._handles]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.spec.id}, num_envs={self.num_envs}, num_workers={self.num_workers}, "
                f"context={self.start_method!r})")


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout
