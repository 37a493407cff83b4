"""The parent side of the parallel backends: options, worker processes, faults, closing.

`ProcessVectorEnv` is the common base of ``subproc`` and ``shmem``. It checks
the backend options before anything starts, splits the envs over workers
(`split_envs`, visible as ``vec.worker_slices``), starts the workers
(`WorkerHandle`), talks to them for reset/call/set_attr, detects a dead
worker through its process sentinel (within a second, never a hang), restarts
it when ``restart_on_crash=True``, and closes everything within a deadline,
also at interpreter exit or garbage collection (`weakref.finalize`). The two
backends differ only in how a step travels: `_send_step` and `_wait_ready`.

With ``inline=True`` (the default when the number of workers is the default,
one per usable core) the parent steps worker 0's share of the envs itself,
in-process, and starts only ``num_workers - 1`` processes. Measured on 2
cores: with a process per core plus a parent that waits on them and wakes
them, three processes compete for two cores and each delays the others; with
the parent doing a worker's share, as many processes are busy as there are
cores, and the parent's share costs no message at all.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import wait as wait_connections
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.errors import EnvTimeoutError, WorkerError, worker_error
from torchwm.spec import VecSpec, check_timeout
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import slice_rows
from torchwm.vector.env_group import EnvGroup, env_fns_of
from torchwm.vector.worker import WorkerPayload, control_reply, error_reply, gym_specs_to_send, worker_main

START_METHODS = ("fork", "forkserver", "spawn")
# forkserver: safe with threads in the parent (fork is not), much faster to start than spawn, and
# children fork from a small server process, so they do not copy the parent's memory.
DEFAULT_START_METHOD = "forkserver"
DEFAULT_TIMEOUT = 300.0
CLOSE_GRACE_SECONDS = 1.0  # how long close() waits for workers to exit before terminating them
# Every option of the process backends and its default (None: decided from the machine or the spec).
OPTION_DEFAULTS = {"num_workers": None, "envs_per_worker": None, "batch_size": None, "context": DEFAULT_START_METHOD,
                   "timeout": DEFAULT_TIMEOUT, "copy": True, "restart_on_crash": False, "env_fn": None,
                   "inline": None}
BACKEND_OPTIONS = tuple(OPTION_DEFAULTS)
# The conformance suite runs every check under each start method, with envs split over two workers,
# and with the parent stepping worker 0's share next to one worker process (the default on 2 cores).
CONFORMANCE_VARIANTS = ([{"context": method, "num_workers": 2} for method in START_METHODS]
                        + [{"context": method, "num_workers": 2, "inline": True} for method in ("fork", "forkserver")])
_PRELOAD = ["torchwm.vector.worker", "gymnasium", "numpy", "cloudpickle"]


def default_num_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _positive_int(backend: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{backend}: {name} must be an int >= 1, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{backend}: {name} must be an int >= 1, got {value!r}")
    return int(value)


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
        num_workers = _positive_int(backend, "num_workers", num_workers)
    if envs_per_worker is not None:
        envs_per_worker = _positive_int(backend, "envs_per_worker", envs_per_worker)
    batch_size = options.get("batch_size")
    if batch_size is not None:
        batch_size = _positive_int(backend, "batch_size", batch_size)
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
    if inline is not None and not isinstance(inline, bool):
        raise TypeError(f"{backend}: inline must be True, False or None (default), got {inline!r}")
    worker_slices = split_envs(num_envs, num_workers, envs_per_worker, backend)
    if inline is None:
        # The default split has one worker per core: with the parent stepping a share, exactly as
        # many processes are busy as there are cores (see the module docstring).
        defaulted = num_workers is None and envs_per_worker is None
        inline = defaulted and len(worker_slices) >= 2 and len(worker_slices) == default_num_workers()
    return {
        "worker_slices": worker_slices,
        "inline": inline,
        "batch_size": batch_size,
        "context": context,
        "timeout": timeout,
        "copy": options.get("copy", True),
        "restart_on_crash": options.get("restart_on_crash", False),
        "env_fn": env_fn,
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


class WorkerHandle:
    """One worker process and the parent's end of its pipe.

    An ``inline`` handle has no process: its envs are stepped by the parent itself (see ``shmem``'s
    ``inline`` option); it keeps the index and env range so that errors name it like any worker.
    """

    def __init__(self, index: int, envs: range, inline: bool = False) -> None:
        self.index = index
        self.envs = envs
        self.inline = inline
        self.process: Any = None
        self.conn: Any = None

    def start(self, ctx: Any, payload: bytes) -> None:
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        # The parent's end goes along only under fork, where the child holds a copy it must close.
        inherited = parent_conn if ctx.get_start_method() == "fork" else None
        self.process = ctx.Process(
            target=worker_main, args=(self.index, child_conn, inherited, payload),
            name=f"torchwm-worker-{self.index}", daemon=True,
        )
        self.process.start()
        child_conn.close()
        self.conn = parent_conn

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
            if handle.alive:
                try:
                    handle.conn.send(("close",))
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
        batch_size: `recv` returns the first ``batch_size`` envs ready (default: all in flight).
        context: start method, ``"forkserver"`` (default), ``"fork"`` or ``"spawn"``.
        timeout: seconds a wait on workers may take before `EnvTimeoutError` (default 300; None: no limit).
            A dead worker is detected within a second whatever the timeout.
        copy: return copies of the observation batch (default) or a view the next call overwrites.
        restart_on_crash: restart a worker that died, with its envs; their episodes in flight end
            truncated with ``infos["worker_restarted"]``.
        env_fn: a no-argument callable that returns one env, or a list of one such callable per env,
            instead of building from ``spec`` (`torchwm.make_vec_from_fns` passes it).
        inline: the parent steps worker 0's envs itself (``worker_slices[0]``, ``worker_pids[0]`` is
            None) and starts ``num_workers - 1`` processes. Default: True when neither ``num_workers``
            nor ``envs_per_worker`` is given and that default split has two workers or more (one per
            usable core); an explicit ``num_workers=N`` starts N processes unless ``inline=True``.
            A step then runs the parent's envs after signalling the children, in `send` (its envs
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
        inline = settings["inline"]
        self._handles = [WorkerHandle(w, envs, inline=inline and w == 0) for w, envs in enumerate(self.worker_slices)]
        self._children = [handle for handle in self._handles if not handle.inline]
        self._local_group: EnvGroup | None = None  # the envs of the inline handle, stepped here
        self._finalizer = weakref.finalize(self, shutdown, self._handles, None)
        deadline = _deadline(settings["timeout"])
        for handle in self._children:
            self._start_worker(handle)
        # Built while the children build theirs.
        local_envs = self._build_local_envs(self._handles[0]) if inline else []
        described = [self._expect(handle, "ready", deadline, "starting its envs") for handle in self._children]
        if inline:
            env = local_envs[0]
            described.insert(0, {"observation_space": env.observation_space, "action_space": env.action_space,
                                 "metadata": dict(env.metadata), "render_mode": env.render_mode})
        first = described[0]
        for w, other in enumerate(described[1:], start=1):
            if (other["observation_space"], other["action_space"]) != (first["observation_space"], first["action_space"]):
                self._close_local(local_envs)
                self._finalizer()
                raise RuntimeError(f"worker {w}'s envs have spaces unlike worker 0's; every env of a vector env must match")
        try:
            super().__init__(
                spec, first["observation_space"], first["action_space"], metadata=first["metadata"],
                render_mode=first["render_mode"], batch_size=settings["batch_size"], timeout=settings["timeout"],
                copy=settings["copy"],
            )
            self._make_buffers()
        except BaseException:
            self._close_local(local_envs)
            self._finalizer()
            raise
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
        for handle in self._children:
            handle.conn.send(("setup", self._layout()))
        for handle in self._children:
            self._expect(handle, "ok", deadline, "attaching its buffers")

    # -- what subprocess and shmem provide -------------------------------------------------------

    def _make_buffers(self) -> None:
        raise NotImplementedError

    def _release_buffers(self) -> Callable[[], None] | None:
        return None

    def _layout(self) -> Any:
        return None

    def _reset_reply(self, handle: WorkerHandle, local_ids: list[int], reply: Any) -> list[dict]:
        """Store a worker's reset reply in the batch; return the infos."""
        raise NotImplementedError

    def _worker_restarted(self, handle: WorkerHandle) -> None:
        """Forget what was in flight on a worker that was restarted."""

    def _drain(self, deadline: float | None) -> None:
        """Wait for every step in progress and discard its results (after an env raised)."""

    def _fail_step(self, error: WorkerError, deadline: float | None) -> None:
        """An env raised during a step: finish the rest of the step, then raise with nothing in flight.

        Leaves the vector env usable: the envs that were stepping keep their new state, and the one that
        raised should be reset (``reset(env_ids=[error.env_index])``) before it is stepped again.
        """
        try:
            self._drain(deadline)
        finally:
            self._ready.clear()
            self._in_flight[:] = False
        raise error

    def _ring(self, handle: WorkerHandle) -> None:
        """Wake ``handle`` after a pipe command, if it sleeps somewhere other than on its pipe."""

    # -- workers ---------------------------------------------------------------------------------

    def _build_local_envs(self, handle: WorkerHandle) -> list[gym.Env]:
        """The inline handle's envs, built here; a failure is reported like a worker's."""
        envs: list[gym.Env] = []
        try:
            for i in handle.envs:
                envs.append(self._env_fns[i]())
        except Exception as exc:
            self._close_local(envs)
            self._finalizer()
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

    def _take_ready(self, count: int) -> tuple[np.ndarray, list[dict]]:
        """The first ``count`` envs of ``_ready`` (in finishing order) and their infos, removed from it."""
        if count == len(self._ready):  # all of them: no per-env pops
            ids, infos = np.fromiter(self._ready, np.int64, count), list(self._ready.values())
            self._ready.clear()
            return ids, infos
        chosen = list(self._ready)[:count]
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

    def _dead(self, handle: WorkerHandle, doing: str) -> WorkerError:
        handle.process.join(0.1)
        hint = (
            "Its envs are lost; close() this vector env and make a new one, or pass "
            "backend_kwargs={'restart_on_crash': True} to restart crashed workers."
        )
        if doing == "starting its envs" and self.start_method != "fork":
            hint = (
                f"Under the {self.start_method!r} start method a worker imports the main module again: "
                f"a script must create vector envs under `if __name__ == '__main__':` (its stderr shows "
                f"the worker's own traceback)."
            )
        return WorkerError(
            f"{self.backend_name}: {handle.describe()} died ({signal_name(handle.process.exitcode)}) while "
            f"{doing}. {hint}",
            worker_index=handle.index,
        )

    def _raise_failure(self, failure: WorkerError) -> None:
        if failure.env_index is None:
            self._failure = failure  # a dead worker: nothing more can work
            self._ready.clear()
            self._in_flight[:] = False
        raise failure

    def _receive(self, handle: WorkerHandle, deadline: float | None, doing: str) -> Any:
        """The next message from ``handle``; WorkerError if it died, EnvTimeoutError past ``deadline``."""
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise EnvTimeoutError(
                    f"{self.backend_name}: {handle.describe()} did not answer within the timeout while {doing}; "
                    f"pass a larger timeout= (backend_kwargs or recv(timeout=)), or look for an env that hangs"
                )
            ready = wait_connections([handle.conn, handle.process.sentinel], remaining)
            if handle.conn in ready:
                try:
                    return handle.conn.recv()
                except (EOFError, OSError):
                    raise self._dead(handle, doing) from None
            if ready:
                raise self._dead(handle, doing)

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

    def _expect(self, handle: WorkerHandle, kind: str, deadline: float | None, doing: str) -> Any:
        try:
            message = self._check_reply(handle, self._receive(handle, deadline, doing), doing)
        except BaseException:
            if self._finalizer is not None:
                self._finalizer()
            raise
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
        self._expect_restart(handle, "ready", deadline, doing)
        handle.conn.send(("setup", self._layout()))
        self._expect_restart(handle, "ok", deadline, doing)
        local_ids = list(range(len(handle.envs)))
        handle.conn.send(("reset", local_ids, [None] * len(local_ids), None))
        self._ring(handle)
        infos = self._reset_reply(handle, local_ids, self._expect_restart(handle, "ok", deadline, doing))
        if self._autoreset is AutoresetMode.NEXT_STEP:
            handle.conn.send(("needs_reset",))
            self._ring(handle)
            self._expect_restart(handle, "ok", deadline, doing)
        self._worker_restarted(handle)
        ids = np.asarray(handle.envs)
        self._rewards[ids] = 0.0
        self._terminations[ids] = False
        self._truncations[ids] = True
        return [{**info, "worker_restarted": True} for info in infos]

    def _expect_restart(self, handle: WorkerHandle, kind: str, deadline: float | None, doing: str) -> Any:
        message = self._check_reply(handle, self._receive(handle, deadline, doing), doing)
        if message[0] != kind:
            raise RuntimeError(f"{self.backend_name}: {handle.describe()} sent {message[0]!r} while {doing}")
        return message[1]

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
        """Send each worker its command, then gather every reply (commands run in parallel)."""
        self._check_usable()
        deadline = _deadline(self.timeout)
        for w, command in commands.items():
            handle = self._handles[w]
            if handle.inline:
                continue  # run below, while the children run theirs
            try:
                handle.conn.send(command)
            except (OSError, ValueError):
                pass  # a dead worker: _receive reports it
            self._ring(handle)
        replies: dict[int, Any] = {}
        first_error: BaseException | None = None
        for w in sorted(commands, key=lambda w: not self._handles[w].inline):
            handle = self._handles[w]
            try:
                if handle.inline:
                    replies[w] = self._run_local(commands[w], doing)[1]
                else:
                    replies[w] = self._check_reply(handle, self._receive(handle, deadline, doing), doing)[1]
            except WorkerError as error:
                if error.env_index is None and self.restart_on_crash and not handle.inline:
                    self._restart(handle, deadline)
                    handle.conn.send(commands[w])
                    self._ring(handle)
                    replies[w] = self._check_reply(handle, self._receive(handle, deadline, doing), doing)[1]
                elif first_error is None:
                    first_error = error
                    if error.env_index is None and not handle.inline:
                        self._failure = error
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
        return infos

    def _call(self, name: str, args: tuple, kwargs: dict) -> list[Any]:
        replies = self._broadcast({w: ("call", name, args, kwargs) for w in range(self.num_workers)}, f"calling {name!r}")
        return [value for w in range(self.num_workers) for value in replies[w]]

    def _set_attr(self, name: str, values: list[Any]) -> None:
        commands = {w: ("set_attr", name, values[r.start:r.stop]) for w, r in enumerate(self.worker_slices)}
        self._broadcast(commands, f"setting {name!r}")

    def _close(self) -> None:
        if self._local_group is not None:
            group, self._local_group = self._local_group, None
            self._close_local(group.envs)
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
