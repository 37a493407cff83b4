"""The transport contract: what a pool needs of one worker, whatever carries the bytes.

A `torchwm.vector.pool.WorkerPool` reaches each worker through a `Transport`, the parent's end of
that worker; a transport module holds both ends of its wire (``local``, ``pipe``,
``shared_memory`` here, the Ray actors in torchwm-ray). This module is all a transport imports of
the pool's side: the interface, the `Batch` the workers write into, the `WorkerPayload` a worker
builds its envs from, the checked `PoolSettings`, the `Deadline` every wait takes its time from,
and the two exceptions a transport raises (`WorkerGone`, `StepLost`). Transports never import
the pool. Third-party transports get these names from `torchwm.plugin_api`.

The transport interface, per worker (``index``, ``envs``: its global env ids,
a ``range``):

- ``start(payload)``: start the worker building its envs (`WorkerPayload`); returns at once.
  ``started(deadline) -> ShareDescription | ErrorReply``: wait until they are built.
- ``attach(batch)``: give the worker its rows of the batch (`create_batch` made it); the
  answer comes through ``reply``.
- ``send(command)`` then ``reply(deadline)``: one control command (`Reset`, `Call`,
  `SetAttr`, `NeedsReset`; `torchwm.vector.messages`) and its answer, or an `ErrorReply`.
  A `Reset` answer's rows are in the batch when ``reply`` returns. ``send`` returns at once, so
  the pool sends every worker its command before it waits for the first answer.
- ``send_step(local_ids, actions)`` (None: all of its envs; else in ascending order, one action row
  each), then ``poll() -> bool`` (finished?) and ``finish_step(deadline) -> infos | ErrorReply``
  (one info per env, in the order of ``local_ids``); ``abandon_step()`` forgets a step in
  flight (its results are dropped when it finishes). One step at a time per worker.
- ``wait(busy, timeout, need_all) -> bool`` (a classmethod): block until one of ``busy`` may
  have finished, at most ``timeout``; True if it returned without sleeping.
- ``alive``, ``pid``, ``describe()``, ``restart(payload)``, ``stop()`` (ask to exit, at once)
  and ``close(deadline)`` (end within it, free everything).

Optional, per transport class: ``OPTIONS`` (backend options of its own);
``configure(backend, spec, env_fns, options, pool)``, which checks them against the pool's
checked `PoolSettings` before anything starts and returns the settings every transport of
the vector env shares; and ``chosen(settings)``, the transport class whose workers those
settings start (another one where configure found a better wire: the ray backend's actors
on the driver's node step through shared memory).

Waits raise the built-in ``TimeoutError`` at their deadline (`StepLost` when that step can
never be waited for again: the pool then closes itself), and `WorkerGone` when the worker
cannot answer any more (``worker=``: which one, when another's wait found out); the pool
turns them into torchwm's errors.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.building import check_distinct_envs
from torchwm.spec import VecSpec
from torchwm.vector.batching import create_batch, put_rows, slice_rows
from torchwm.vector.messages import ControlCommand, ErrorReply, ShareDescription


@dataclass(frozen=True)
class WorkerChoice:
    """How many workers a pool started, and the figures measured that chose it; or, when the measurement
    failed, one worker per core and why (``fallback``). What `Transport.choose_worker_count` returns."""

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
        if seconds is None or seconds > LONGEST_DEADLINE_SECONDS:
            return cls(seconds, None)
        return cls(seconds, time.monotonic() + seconds)

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


class WorkerGone(Exception):
    """Raised by a transport whose worker cannot answer any more.

    Args:
        reason: what happened, for the message (``"killed by SIGKILL"``).
        restartable: the worker died and a new one can take its envs; False when the channel itself
            cannot be used again (an interrupt cut a message): the vector env must then be closed.
        hint: what to do, when the transport knows better than the pool (a worker that died before it
            reached torchwm's code).
        worker: the index of the worker that is gone, when a wait on another one found out (Ray's compiled
            graph fails every actor's wait when one actor dies); None: the transport raising it.
    """

    def __init__(
        self, reason: str, *, restartable: bool = True, hint: str = "", worker: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.restartable = restartable
        self.hint = hint
        self.worker = worker


class StepLost(TimeoutError):
    """Raised by `Transport.finish_step` at its deadline when the step cannot be waited for again (a Ray
    compiled graph's result is read once): the pool closes itself rather than keep a step it cannot take in.

    Args:
        late: which workers did not answer, for the message (default: the transport's `Transport.describe`).
        hint: what else the user can do, for the message.
    """

    def __init__(self, late: str | None = None, hint: str = "") -> None:
        super().__init__(late)
        self.late = late
        self.hint = hint


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
        envs: list[gym.Env] = []
        try:
            for fn in self.env_fns:
                envs.append(fn())
            check_distinct_envs(envs)  # within this worker: factories in other processes cannot be compared
        except BaseException:
            for env in envs:
                try:
                    env.close()
                except Exception:
                    pass
            raise
        return envs


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


class Transport(ABC):
    """The parent's end of one worker (see the module docstring for the whole interface).

    Args:
        index: the worker's index in the pool.
        envs: the global ids of its envs.
        settings: what `configure` returned, shared by every worker of the pool.
    """

    # The backend options this transport adds to `POOL_OPTIONS`, with their defaults.
    OPTIONS: ClassVar[dict[str, Any]] = {}

    def __init__(self, index: int, envs: range, settings: Any = None) -> None:
        self.index = index
        self.envs = envs

    @classmethod
    def configure(
        cls,
        backend: str,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        options: dict[str, Any],
        pool: PoolSettings,
    ) -> Any:
        """Check this transport's options (and anything else that must fail before a worker starts);
        returns the settings every worker gets. ``pool`` holds the pool's own options, checked."""
        return None

    @classmethod
    def chosen(cls, settings: Any) -> type[Transport]:
        """The transport class whose workers ``settings`` (from `configure`) start: this one by default."""
        return cls

    @classmethod
    def choose_worker_count(
        cls,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        settings: Any,
        *,
        timeout: float | None = None,
    ) -> WorkerChoice | None:
        """When the user left the split to the pool: a `WorkerChoice`
        (how many workers to start, from measurements), or None for one per core (the default). A measurement
        that builds an env waits for it at most ``timeout`` (the pool's), and gets `gym_specs_of` ``spec``
        as the workers do."""
        return None

    @classmethod
    def create_batch(
        cls, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> Batch:
        """The batch every worker of the pool writes into (or whose rows the pool stores)."""
        return Batch(observation_space, num_envs, action_space)

    @classmethod
    def wait(cls, busy: list[Transport], timeout: float | None, need_all: bool) -> bool:
        """Block until one of ``busy`` may have finished its step, at most ``timeout`` seconds (None: until
        then); True if it returned without sleeping. May return early. ``need_all``: the caller waits for
        every one of them (waking it for fewer helps nothing)."""
        if any(transport.poll() for transport in busy):
            return True
        time.sleep(0.0005 if timeout is None else min(timeout, 0.0005))
        return False

    @abstractmethod
    def start(self, payload: WorkerPayload) -> None: ...

    @abstractmethod
    def started(self, deadline: Deadline) -> ShareDescription | ErrorReply: ...

    @abstractmethod
    def attach(self, batch: Batch) -> None: ...

    @abstractmethod
    def send(self, command: ControlCommand) -> None: ...

    @abstractmethod
    def reply(self, deadline: Deadline) -> Any: ...

    @abstractmethod
    def send_step(self, local_ids: list[int] | None, actions: Any) -> None: ...

    @abstractmethod
    def poll(self) -> bool: ...

    @abstractmethod
    def finish_step(self, deadline: Deadline) -> list[dict] | ErrorReply: ...

    @abstractmethod
    def abandon_step(self) -> None: ...

    @property
    @abstractmethod
    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        return None

    def gone(self) -> WorkerGone:
        """Why `alive` is False: the error the pool reports (or restarts the worker for)."""
        return WorkerGone("it ended")

    def describe(self) -> str:
        return f"worker {self.index} (envs {self.envs.start}-{self.envs.stop - 1})"

    def restart(self, payload: WorkerPayload) -> None:
        """A new worker for these envs (after `alive` went False); the pool then attaches and resets it."""
        self.close(Deadline.after(CLOSE_GRACE_SECONDS))
        self.start(payload)

    def stop(self) -> None:  # noqa: B027 - optional: a transport with nothing to ask leaves it
        """Ask the worker to end (returns at once); `close` waits for it."""

    @abstractmethod
    def close(self, deadline: Deadline) -> None: ...
