"""The backend contract: what a pool needs of a backend, whatever carries the bytes.

A `torchwm.vector.pool.WorkerPool` reaches its workers through two objects a backend provides:

- one `WorkerGroup` per vector env, made before any worker starts: it checks the backend's options,
  decides the split of the envs over workers, makes the `Batch` the workers write into and the handle
  of each worker, sleeps until one of them may have finished (`WorkerGroup.wait`), and holds what is
  pool-wide until `WorkerGroup.close`;
- one `WorkerHandle` per worker, the parent's end of it, shaped as Tianshou's ``EnvWorker``: six methods a
  transport implements (``start``, ``attach``, ``send``, ``reply``, ``poll``, ``close``); a step is a
  ``Step`` message and its answer a reply unless the transport has a faster way (``send_step``,
  ``finish_step``), and the rest has defaults.

A transport module holds both ends of its wire (``local``, ``pipe``, ``shared_memory`` here, the Ray
actors in torchwm-ray). This module is all a transport imports of the pool's side: the two classes,
the `Batch`, the `WorkerPayload` a worker builds its envs from, the checked `PoolSettings`, the
`Deadline` every wait takes its time from. The two exceptions a transport raises (`WorkerGone`,
`StepLost`) are in `torchwm.errors`; the pool turns them into the user's errors. Transports never
import the pool.
Third-party backends get these names from `torchwm.plugin_api`.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeAlias

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.building import build_envs
from torchwm.errors import WorkerGone
from torchwm.spec import VecSpec
from torchwm.vector.batching import create_batch, put_rows, slice_rows
from torchwm.vector.messages import ControlCommand, ErrorReply, ShareDescription, Step


@dataclass(frozen=True)
class WorkerChoice:
    """How many workers a pool started, and the figures measured that chose it; or, when the measurement
    failed, one worker per core and why (``fallback``). A group that measures keeps it in
    `WorkerGroup.worker_choice`."""

    workers: int
    measured: str
    fallback: str = ""  # why nothing could be measured ("" when measured)

    def __str__(self) -> str:
        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        if self.fallback:
            return f"{workers} (one per core: not measured, {self.fallback})"
        return f"{workers} (measured: {self.measured})"


CLOSE_GRACE_SECONDS = 1.0  # how long close() waits for workers to exit before ending them
# The longest wait the system calls take (select.poll counts milliseconds in a C int): a deadline further
# away than that is no deadline, so that a timeout of weeks (1e9) means "no limit" rather than an
# OverflowError from the first wait.
LONGEST_DEADLINE_SECONDS = 2**31 // 1000 - 1


class Deadline:
    """When a wait must end: ``seconds`` after it began (None, ``math.inf`` or more than
    `LONGEST_DEADLINE_SECONDS`: never). Messages name ``seconds``.

    Every wait of a pool and its transports takes its time from here, so this is the one place that
    turns a timeout into what a wait may be given.
    """

    __slots__ = ("seconds", "at")

    def __init__(self, seconds: float | None, at: float | None) -> None:
        self.seconds = seconds
        self.at = at

    @classmethod
    def after(cls, seconds: float | None) -> Deadline:
        # Made without __init__: one Python call for each wait of a step, which makes one per recv.
        deadline = object.__new__(cls)
        deadline.seconds = seconds
        no_limit = seconds is None or seconds > LONGEST_DEADLINE_SECONDS
        deadline.at = None if no_limit else time.monotonic() + seconds  # type: ignore[operator]
        return deadline

    def remaining(self, forever: float | None = None) -> float | None:
        """Seconds left (at least 0), or ``forever`` when there is no deadline."""
        return forever if self.at is None else max(self.at - time.monotonic(), 0.0)

    @property
    def expired(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def waited(self) -> str:
        """How long the wait took, for a message: ``seconds``, or the real time when a transport waited longer
        (an actor's start gets a floor of its own)."""
        elapsed = (
            None if self.at is None or self.seconds is None else time.monotonic() - (self.at - self.seconds)
        )
        if elapsed is None or elapsed < self.seconds + 1.0:  # type: ignore[operator]
            return f"{self.seconds:g} s"
        return f"{elapsed:.0f} s (timeout={self.seconds:g})"


def default_num_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def split_envs(
    num_envs: int,
    num_workers: int | None,
    envs_per_worker: int | None,
    backend: str = "backend",
    unit: str = "worker",
) -> list[range]:
    """The envs of each worker: contiguous ranges, as even as possible.

    ``unit`` is what the backend calls a worker in its option names (``"actor"``: ``num_actors``).

    ``envs_per_worker`` alone gives ``ceil(num_envs / envs_per_worker)`` workers (the last one may have
    fewer); ``num_workers`` alone spreads the envs evenly (at most one worker per env; default: the cores
    this process may use).

    Example:
        >>> split_envs(10, 4, None)
        [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
        >>> split_envs(10, None, 4)
        [range(0, 4), range(4, 8), range(8, 10)]
    """
    if envs_per_worker is not None:
        workers = -(-num_envs // envs_per_worker)
        if num_workers is not None and num_workers != workers:
            raise ValueError(
                f"{backend}: num_{unit}s={num_workers} and envs_per_{unit}={envs_per_worker} do not fit "
                f"num_envs={num_envs} (that needs {workers} {unit}s); give one of them, or matching values"
            )
        return [
            range(start, min(start + envs_per_worker, num_envs))
            for start in range(0, num_envs, envs_per_worker)
        ]
    workers = min(num_workers if num_workers is not None else default_num_workers(), num_envs)
    bounds = np.linspace(0, num_envs, workers + 1).round().astype(int)
    # Larger groups first, like np.array_split, so the split reads naturally.
    sizes = np.sort(np.diff(bounds))[::-1]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]


@dataclass
class PoolSettings:
    """The pool options, checked and defaulted (`torchwm.vector.pool.check_pool_options`)."""

    worker_slices: list[range]
    split_given: bool  # num_workers or envs_per_worker given (else the pool chose the split)
    batch_size: int | None
    timeout: float | None
    copy: bool
    restart_on_crash: bool
    env_fn: Any
    inline: bool
    observation_mode: Any
    transport_options: dict[str, Any] = field(default_factory=dict)


def gym_specs_of(spec: VecSpec) -> list[gym.envs.registration.EnvSpec]:
    """The Gymnasium registration of ``spec``'s id, for a process whose interpreter never saw it (an id
    registered at run time); empty for an id Gymnasium does not know."""
    return [gym.registry[spec.id]] if spec.id in gym.registry else []


def register_gym_specs(specs: Sequence[gym.envs.registration.EnvSpec]) -> None:
    """Register the ids of ``specs`` that this process does not know (in a worker, or the helper that
    measures an env's step)."""
    for spec in specs:
        if spec.id not in gym.registry and isinstance(spec.entry_point, str):
            # The package that registers the id (ale_py registers every ALE id on import) goes first,
            # so that its own registration does not find ours and warn about an override.
            try:
                __import__(spec.entry_point.split(":")[0])
            except ImportError:
                pass
        if spec.id not in gym.registry:
            gym.registry[spec.id] = spec


@dataclass
class WorkerPayload:
    """What a worker needs to build its envs; a process transport sends it cloudpickled."""

    index: int  # the worker's index in the pool
    env_fns: list[Callable[[], gym.Env]]  # one factory per env of this worker
    first_env: int  # global index of the worker's first env
    autoreset_mode: AutoresetMode
    # The Gymnasium spec of the env id, for a worker whose interpreter never saw its registration.
    gym_specs: list[gym.envs.registration.EnvSpec] = field(default_factory=list)

    def build_envs(self) -> list[gym.Env]:
        """The worker's envs, built (in the worker); registers the missing Gymnasium ids first."""
        register_gym_specs(self.gym_specs)
        # Checked distinct within this worker only: factories in other processes cannot be compared.
        return build_envs(self.env_fns)


class Batch:
    """The batch a pool returns rows of: observations, rewards and flags, one row per env, in this
    process's memory. A transport may hold it elsewhere
    (`torchwm.vector.transports.shared_memory.SharedBatch`)."""

    def __init__(
        self, observation_space: gym.Space, num_envs: int, action_space: gym.Space | None = None
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.observations: Any = create_batch(observation_space, num_envs)
        self.rewards = np.zeros(num_envs, dtype=np.float64)
        self.terminations = np.zeros(num_envs, dtype=np.bool_)
        self.truncations = np.zeros(num_envs, dtype=np.bool_)

    def store(
        self, ids: np.ndarray | slice, observations: Any, rewards: Any, terminations: Any, truncations: Any
    ) -> None:
        """Write the rows of envs ``ids`` (``observations`` None: already written in place)."""
        if observations is not None:
            put_rows(self.observation_space, self.observations, ids, observations)
        self.rewards[ids] = rewards
        self.terminations[ids] = terminations
        self.truncations[ids] = truncations

    def rows(self, start: int, stop: int) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """Views of one worker's rows: (observations, rewards, terminations, truncations)."""
        return (
            slice_rows(self.observation_space, self.observations, start, stop),
            self.rewards[start:stop],
            self.terminations[start:stop],
            self.truncations[start:stop],
        )

    def release(self) -> None:
        """Free what the batch holds outside this process (nothing here)."""


def poll_wait(busy: list[WorkerHandle], timeout: float | None) -> bool:
    """Sleep a little unless one of ``busy`` has finished: the wait of a backend with no better way to
    sleep. True if it slept."""
    if any(handle.poll() for handle in busy):
        return False
    time.sleep(0.0005 if timeout is None else min(timeout, 0.0005))
    return True


class WorkerGroup:
    """The pool's side of a backend: one per vector env, made before any worker starts.

    It checks the backend's own options, decides the split of the envs over workers, makes the batch
    they write into and one `WorkerHandle` per worker, knows how to sleep until one of them may have
    finished, and holds what is pool-wide (a tuner, a compiled graph, a placement group) until
    `close`. A backend whose handles need nothing of the kind uses this class as it is, with its own
    ``handle``.

    Args:
        backend: the backend's name, for messages.
        spec: what the vector env builds.
        env_fns: one factory per env.
        options: the backend options named in `OPTIONS`, unchecked.
        pool: the pool's own options, checked (a `PoolSettings`).

    Raises:
        TypeError, ValueError: a bad option (as Gymnasium raises for a bad argument), before anything starts.
    """

    # The pool's checked options, as the constructor and `split` take them (a transport names the type
    # through its base class).
    Settings: TypeAlias = PoolSettings
    # The backend options of the group's own, with their defaults (beside the pool's, `POOL_OPTIONS`).
    OPTIONS: ClassVar[dict[str, Any]] = {}
    # The class of the parent's end of one worker.
    handle: ClassVar[type[WorkerHandle]]

    def __init__(
        self,
        backend: str,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        options: dict[str, Any],
        pool: PoolSettings,
    ) -> None:
        self.backend = backend
        # What chose the worker count, when `split` measured it (`shmem`); None: the user or one per core.
        self.worker_choice: WorkerChoice | None = None

    def split(self, spec: VecSpec, env_fns: list[Callable[[], gym.Env]], pool: PoolSettings) -> list[range]:
        """The envs of each worker, decided before any starts. Default: ``pool.worker_slices`` (the user's
        split, or one worker per core). A group may measure a better one when the user left it unset
        (``pool.split_given`` and ``pool.inline`` False), waiting at most ``pool.timeout`` for what it
        builds, and say what it measured in `worker_choice`."""
        return pool.worker_slices

    def split_evenly(self, num_envs: int, workers: int) -> list[range]:
        """``num_envs`` envs over ``workers`` workers (at most one per env), as even as possible, larger
        shares first: the `split` of a group that chose its own count of workers."""
        return split_envs(num_envs, workers, None, self.backend)

    def worker(self, index: int, envs: range) -> WorkerHandle:
        """The parent's end of worker ``index``, whose envs are ``envs`` (global ids); nothing starts yet."""
        return self.handle(index, envs, self)

    def create_batch(
        self, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> Batch:
        """The batch every worker writes into (or whose rows the pool stores), made once the envs are
        built and before any worker is attached."""
        return Batch(observation_space, num_envs, action_space)

    def wait(self, busy: list[WorkerHandle], timeout: float | None, need_all: bool) -> bool:
        """Block until one of ``busy`` may have finished its step, at most ``timeout`` seconds (None: no
        limit). Returns whether it slept (False: it found a finished worker at once, or spun); it may return
        early, and the pool then polls and waits again. ``need_all``: the caller waits for every one of
        them, so waking it for fewer helps nothing. Must not raise `TimeoutError`: the pool watches its own
        deadline."""
        return poll_wait(busy, timeout)

    def close(self) -> None:  # noqa: B027 - optional: a group with nothing pool-wide leaves it
        """Free what is pool-wide, once every worker is closed (also after a failed start)."""

    def __repr__(self) -> str:
        """The group's options, for the vector env's repr (empty: none worth showing)."""
        return ""


class WorkerHandle(ABC):
    """The parent's end of one worker: how the pool reaches it, whatever carries the bytes.

    Six methods are abstract, as Tianshou's ``EnvWorker`` has six: `start`, `attach`, `send`, `reply`,
    `poll` and `close`. The rest have defaults a transport may replace: the answer to `start` is its
    first reply (`started`); a step is a `Step` message (`send_step`) whose infos are its reply
    (`finish_step`); an abandoned step's results come and the pool drops them (`abandon_step`); the worker
    is taken as alive, its death reported by the waits (`alive`, `gone`). Every wait takes a `Deadline`
    and raises the built-in `TimeoutError` when it passes (`StepLost` when that step can never be waited
    for again), and `WorkerGone` when the worker cannot answer any more.

    Args:
        index: the worker's index in the pool.
        envs: the global ids of its envs.
        group: the pool's `WorkerGroup`, shared by every handle of the vector env.
    """

    # The types its methods take (a transport names them through its base class): what `start` builds
    # the envs from, the rows `attach` gives.
    Payload: TypeAlias = WorkerPayload
    Batch: TypeAlias = Batch

    # The pool's timeout (`PoolStepper` keeps it current): how long a handle may wait for the rest of a
    # reply when the pool gave no deadline (`finish_step(None)`).
    reply_timeout: float | None = None

    def __init__(self, index: int, envs: range, group: Any = None) -> None:
        self.index = index
        self.envs = envs

    @abstractmethod
    def start(self, payload: WorkerPayload) -> None:
        """Start the worker building its envs (``payload.build_envs()`` there); return at once."""

    def started(self, deadline: Deadline) -> ShareDescription | ErrorReply:
        """Wait until the envs are built: `describe_share` of them, or the `ErrorReply` of what raised.
        Default: the worker's first reply (`reply`)."""
        return self.reply(deadline)  # type: ignore[no-any-return]

    @abstractmethod
    def attach(self, batch: Batch) -> None:
        """Give the worker its rows of ``batch`` (``batch.rows(start, stop)``); answered through `reply`."""

    @abstractmethod
    def send(self, command: ControlCommand | Step) -> None:
        """Send one control command (`Reset`, `Call`, `SetAttr`, `NeedsReset`, `CloneStates`,
        `RestoreStates`), or a `Step` (the default `send_step`); return at once, so that the pool sends
        every worker its command before it waits for the first answer."""

    @abstractmethod
    def reply(self, deadline: Deadline) -> Any:
        """The answer to the last message (the envs built after `start`, `attach`, a command, a `Step`), or
        its `ErrorReply`; a `Reset`'s or a `Step`'s rows are in the batch when it returns."""

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        """Start a step of the worker's envs ``local_ids`` (None: all of them; else ascending, one row of
        ``actions`` each); return at once. One step at a time per worker. Default: `send` a `Step`
        (``actions`` may be a view of the caller's array, which it may change once this returns: a
        transport that reads them later copies them)."""
        self.send(Step(local_ids, actions))

    @abstractmethod
    def poll(self) -> bool:
        """Whether the step sent has finished (without waiting)."""

    def finish_step(self, deadline: Deadline | None) -> list[dict] | ErrorReply:
        """The finished step's infos, one per env in the order of ``local_ids``, its rows in the batch; or
        the `ErrorReply` of the env that raised. After `abandon_step`: anything (it is dropped).

        ``deadline``: when a wait for the rest of the reply must end; None when the pool found the step over
        before it began any wait (it then made no deadline): a handle that must still wait takes
        `reply_deadline`'s. Default: the step's `reply`."""
        return self.reply(self.reply_deadline(deadline))  # type: ignore[no-any-return]

    def reply_deadline(self, deadline: Deadline | None) -> Deadline:
        """``deadline``, or for `finish_step(None)` one of the pool's ``reply_timeout`` from now."""
        return Deadline.after(self.reply_timeout) if deadline is None else deadline

    def abandon_step(self) -> None:  # noqa: B027 - optional: the pool drops an abandoned step's results
        """The step in flight is not wanted any more (Ctrl-C): its results may be dropped when it finishes.
        Default: nothing (they come, and the pool drops them); a transport that can skip reading them says
        so here."""

    @property
    def alive(self) -> bool:
        """Whether the worker can still answer (default True: its death is reported by the waits, as
        `WorkerGone`)."""
        return True

    @abstractmethod
    def close(self, deadline: Deadline) -> None:
        """End the worker within ``deadline`` (whatever it is doing) and free what the handle holds."""

    @property
    def pid(self) -> int | None:
        """The worker's process id, if it is a process on this machine."""
        return None

    def gone(self) -> WorkerGone:
        """Why `alive` is False: the error the pool reports (or restarts the worker for)."""
        return WorkerGone("it ended")

    def describe(self) -> str:
        """The worker, for messages."""
        return f"worker {self.index} (envs {self.envs.start}-{self.envs.stop - 1})"

    def restart(self, payload: WorkerPayload) -> None:
        """A new worker for these envs (after `alive` went False); the pool then attaches and resets it."""
        self.close(Deadline.after(CLOSE_GRACE_SECONDS))
        self.start(payload)

    def stop(self) -> None:  # noqa: B027 - optional: a handle with nothing to ask leaves it
        """Ask the worker to end and return at once; `close` waits for it (the pool asks every worker
        first, so that they end side by side)."""


def end_workers(handles: list[WorkerHandle]) -> None:
    """Ask every worker to end, then end each within one deadline."""
    for handle in handles:
        handle.stop()
    deadline = Deadline.after(CLOSE_GRACE_SECONDS)
    try:
        for handle in handles:
            handle.close(deadline)
    except BaseException:
        # Interrupted (Ctrl-C) while the workers end on their own (an env's slow close): each is ended now,
        # so that close() never leaves a process it started, interrupted or not.
        now = Deadline.after(0.0)
        for handle in handles:
            try:
                handle.close(now)
            except Exception:  # noqa: BLE001 - the others are still ended; the interruption is raised
                pass
        raise


def shutdown(group: WorkerGroup, handles: list[WorkerHandle], batch: Batch | None, owner: int) -> None:
    """End every worker within a deadline (ask all, then end each), then free the batch and the group.

    Only in process ``owner``, the one that started the workers: a forked copy of the vector env (a
    data loader's worker, an evaluator) that is closed or collected, or that exits, must not end the
    parent's workers nor write to their channels; its own copy is simply dropped.

    Module-level (not a method) so that `weakref.finalize` can call it without keeping the env alive.
    """
    if os.getpid() != owner:
        return
    try:
        end_workers(handles)
    finally:
        try:
            if batch is not None:
                batch.release()
        finally:
            group.close()
