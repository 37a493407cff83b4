"""The shared-memory transport (the ``shmem`` backend), the parent's end: a whole batch in one shared block,
steps signalled through it.

Here: `SharedBlock`, the block with its `WaitTuner` and the parent's wait, which a pool whose workers step
through a shared block holds (``shmem``'s `SharedMemoryGroup`, and the Ray plugin's group for actors on the
parent's node, through `torchwm.plugin_api.SharedBlock`); `SharedMemoryHandle`, the parent's end of one
worker. The worker's end (its loop, the info columns it writes) is
`torchwm.vector.transports.shared_memory_worker`. Actions, observations, rewards and flags live in one
shared-memory block (`torchwm.vector.transports.shared_block.SharedBatch`); a step costs no pipe message and
no pickling: the parent writes the actions and the step's number into the block and rings the worker, the
worker steps its `EnvGroup` in place and sets ``done_seq``. How one step travels, file by file:
docs/concepts.md, "One shmem step".

Actions of another dtype than the action space's travel through the pipe
instead (as a `Step` message, flagged in ``action_via_pipe``), so that every
env gets the actions exactly as given, as on every other backend. While
waiting, both sides poll their counter with ``os.sched_yield()`` for a while,
then sleep on a futex (a word of the block) until the other side rings, so
that no waiting process holds a core a worker needs (`futex_wait`). How long
each side polls is measured on the first steps (`torchwm.vector.transports.handoff`):
the workers write when they began and ended each step in the block. Step
infos travel in the block too: plain numbers with the same keys for every
env as columns of numbers, read here by `SharedMemoryHandle._info_rows`; other
infos pickled. The pipe carries control commands, errors and large infos (the
parent's end of a worker process and its pipe is `torchwm.vector.transports.processes`,
the worker's side `torchwm.vector.transports.worker_process`).
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeAlias, cast

import gymnasium as gym
from gymnasium import spaces

from torchwm.spec import VecSpec
from torchwm.vector.batching import ARRAY_SPACES, InfoSchema, info_rows, put_rows, slice_rows
from torchwm.vector.messages import ErrorReply, Step
from torchwm.vector.transports.contract import (
    CLOSE_GRACE_SECONDS,
    Batch,
    Deadline,
    PoolSettings,
    WorkerHandle,
    WorkerPayload,
    default_num_workers,
    gym_specs_of,
)
from torchwm.vector.transports.futex import futex_wait, futex_wake
from torchwm.vector.transports.handoff import MAX_SPIN_SECONDS, WaitTuner
from torchwm.vector.transports.processes import ProcessGroup, ProcessHandle
from torchwm.vector.transports.shared_block import SharedBatch
from torchwm.vector.transports.shared_memory_worker import StepStatus, serve, serve_shared_memory
from torchwm.vector.transports.worker_count import env_key, measured_worker_choice
from torchwm.vector.transports.worker_process import Setup

__all__ = ["SharedBlock", "SharedMemoryGroup", "SharedMemoryHandle", "StepStatus", "ring_worker"]

LIVENESS_SECONDS = 0.005  # longest sleep of the parent between checks that the busy workers are alive


def ring_worker(shared: SharedBatch, worker: int) -> None:
    """Wake worker ``worker`` if it sleeps (after a step signal or a pipe command).

    The bell always changes, so a worker about to sleep on its old value returns at once; the wake
    syscall is made only for a worker that said it sleeps.
    """
    shared.doorbell[worker] += 1
    if shared.worker_sleeping[worker]:
        futex_wake(shared.doorbell_addresses[worker])


# -- the parent's end ------------------------------------------------------------------------------


class SharedMemoryHandle(ProcessHandle):
    """The parent's end of one worker that steps through a `SharedBlock`: steps through the block, control
    over the pipe. ``block``: the pool's block (it made the batch and the pool's `WaitTuner`).

    A worker the pool starts itself (a Ray actor) is this handle with its own `start` and `started`: `start`
    launches it; `started` waits until it connects, then calls `connected` with its
    `multiprocessing.connection.Connection`, sets ``process`` (``pid``, ``sentinel``, ``exitcode``,
    ``join``, ``terminate``, ``kill``, ``close``, as a `multiprocessing.Process` has) and returns
    ``super().started(deadline)``. The worker's end runs `SharedBlock.serve` over that connection.
    """

    serve = staticmethod(serve)

    def __init__(self, index: int, envs: range, group: Any, block: SharedBlock) -> None:
        super().__init__(index, envs, group)
        self.block = block
        self._shared: SharedBatch | None = None
        self._actions: Any = None  # this worker's rows of the block's actions and step mask
        self._mask: Any = None
        self._step_seq = 0  # the number of the last step signalled
        self._step_count = 0  # how many envs it steps
        self._sent_at = 0.0  # when it was sent (time.perf_counter), for the pool's `WaitTuner`
        self._tuner = WaitTuner(1, 1)  # the block's, once attached
        self._abandoned = False
        # The schema of this worker's info columns last read, and the info_schema_seq it was read at.
        self._schema: InfoSchema = ()
        self._schema_seq = -1

    def attach(self, batch: Batch) -> None:
        assert isinstance(batch, SharedBatch)
        shared = self._shared = batch
        rows = self.envs
        self._action_space = batch.action_space
        # The dtype of a plain array action space: its actions are checked and written without a walk of the
        # space.
        self._action_dtype = (
            batch.action_space.dtype if isinstance(batch.action_space, ARRAY_SPACES) else None
        )
        self._actions = slice_rows(batch.action_space, shared.actions, rows.start, rows.stop)
        self._mask = shared.step_mask[rows.start : rows.stop]
        assert self.block.tuner is not None, "the block's create_batch makes the tuner"
        self._tuner = self.block.tuner
        super().send(Setup(shared.layout))
        shared.send(self.conn, self.process.pid)

    def wake(self) -> None:
        if self._shared is not None:
            ring_worker(self._shared, self.index)

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        shared = self._shared
        assert shared is not None
        w = self.index
        dtype = self._action_dtype
        if (
            (getattr(actions, "dtype", None) == dtype)
            if dtype is not None
            else _dtypes_match(self._action_space, actions)
        ):
            if local_ids is None:
                if dtype is not None:
                    self._actions[:] = actions
                else:
                    put_rows(self._action_space, self._actions, slice(None), actions)
                self._mask[:] = True
            else:
                put_rows(self._action_space, self._actions, local_ids, actions)
                self._mask[:] = False
                self._mask[local_ids] = True
            self.seq += 1
            shared.action_via_pipe[w] = 0
        else:
            # Actions of another dtype than the space's cannot go through the typed shared arrays unchanged:
            # they go through the pipe, so that every env gets them exactly as given.
            super().send(Step(local_ids, actions))  # takes the step's number
            shared.action_via_pipe[w] = 1
        self._step_seq = self.seq
        self._step_count = len(self.envs) if local_ids is None else len(local_ids)
        self._abandoned = False
        # Written last: the worker starts once it sees the new value.
        self._sent_at = time.perf_counter()
        shared.command_seq[w] = self.seq
        ring_worker(shared, w)

    def poll(self) -> bool:
        return bool(self._shared.done_seq[self.index] == self._step_seq)  # type: ignore[union-attr]

    def finish_step(self, deadline: Deadline | None) -> list[dict] | ErrorReply:
        shared = self._shared
        assert shared is not None
        if self._abandoned:
            return []  # a message it left in the pipe is dropped by its number when the next reply is read
        tuner = self._tuner
        if tuner.measuring:
            began, ended = shared.step_times[self.index].tolist()
            tuner.record(self.index, self._sent_at, began, ended, time.perf_counter())
            shared.worker_spin[0] = tuner.plan.worker_spin
        elif self._sent_at >= tuner.recheck_at:
            tuner.measure_again()
        # An int first: numpy's comparison with an IntEnum member looks up a dozen array hooks on the enum.
        status = int(shared.status[self.index])
        if status == StepStatus.INFOS_IN_COLUMNS:
            return self._info_rows(shared)
        if status == StepStatus.INFOS_IN_BLOCK:
            return pickle.loads(shared.info_bytes[self.index, : shared.info_length[self.index]].data)
        if status == StepStatus.OK:
            return [{}] * self._step_count
        return self._receive(self.reply_deadline(deadline), self._step_seq)  # the infos, or the ErrorReply

    def _info_rows(self, shared: SharedBatch) -> list[dict]:
        """The step's infos from the worker's rows of ``info_columns``: `InfoRow` objects over a copy (the
        next step overwrites the block while the pool may still hold these)."""
        w = self.index
        seq = int(shared.info_schema_seq[w])
        if seq != self._schema_seq:
            self._schema = pickle.loads(shared.info_schema[w, : shared.info_schema_length[w]].data)
            self._schema_seq = seq
        start = self.envs.start
        block = shared.info_columns[start : start + self._step_count, : len(self._schema)].copy()
        # InfoRows are read-only mappings: the pool keeps them and `InfoBatcher` batches them.
        return cast(list[dict], info_rows(self._schema, block))

    def abandon_step(self) -> None:
        self._abandoned = True

    def close(self, deadline: Deadline) -> None:
        super().close(deadline)
        # Views of the block: dropped, so that the pool can unmap it.
        self._actions = self._mask = self._shared = None

    def restart(self, payload: WorkerPayload) -> None:
        super().close(Deadline.after(CLOSE_GRACE_SECONDS))
        self.start(payload)
        shared = self._shared
        assert shared is not None
        # The new worker starts from the current command_seq; nothing of the old one is pending.
        shared.done_seq[self.index] = shared.command_seq[self.index]
        self._step_seq = int(shared.command_seq[self.index])


class SharedBlock:
    """A shared block a pool's workers step through, as ``shmem``'s do: its batch, its `WaitTuner` and the
    parent's wait. A `torchwm.plugin_api.WorkerGroup` whose steps go through shared memory (the Ray plugin's,
    for actors on the parent's node) makes one before any worker starts and uses it for its own members:

    - ``create_batch(observation_space, action_space, num_envs, num_workers)``: the block, as the group's
      `create_batch` (``UnsupportedStackError`` for spaces a block cannot hold: Text, Graph, Sequence);
    - ``wait(busy, timeout, need_all)``: the group's `wait` (spins, then sleeps on the parent's futex);
    - `Handle`: the parent's end of one worker, ``Handle(index, envs, group, block)``, the class the group's
      handles are or derive from (its docstring says what a subclass that starts its own workers adds);
    - `serve` ``(conn, payload_bytes)``: the worker's end, run in the worker over a
      `multiprocessing.connection.Connection` to the parent: it builds the envs of the cloudpickled
      `WorkerPayload` and steps them until the pool closes.

    Args:
        spin_seconds: how long both sides poll before they sleep; None: measured on the first steps
            (`torchwm.vector.transports.handoff`).
    """

    Handle: TypeAlias = SharedMemoryHandle
    serve = staticmethod(serve_shared_memory)

    def __init__(self, spin_seconds: float | None = None) -> None:
        self.spin_seconds = spin_seconds
        self.tuner: WaitTuner | None = None  # made with the block
        self.batch: SharedBatch | None = None

    def create_batch(
        self, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> Batch:
        """Make the block (once the envs are built, before any worker is attached) and the pool's tuner."""
        block = self.batch = SharedBatch.create(observation_space, action_space, num_envs, num_workers)
        self.tuner = WaitTuner(num_workers, default_num_workers(), self.spin_seconds)
        block.worker_spin[0] = self.tuner.plan.worker_spin
        return block

    def wait(self, busy: list[WorkerHandle], timeout: float | None, need_all: bool) -> bool:
        """Poll the block for as long as the tuner says, then sleep on the parent's futex until a worker rings
        (at most `LIVENESS_SECONDS`, so that a dead worker is noticed). The `WorkerGroup.wait` contract."""
        workers: list[SharedMemoryHandle] = busy  # type: ignore[assignment]
        shared = self.batch
        assert shared is not None and self.tuner is not None
        done_seq = shared.done_seq
        expected = [(worker.index, worker._step_seq) for worker in workers]
        started = time.perf_counter()
        spin = self.tuner.plan.parent_spin
        spin = spin if timeout is None else min(spin, timeout)
        while time.perf_counter() - started < spin:
            if any(done_seq[w] == seq for w, seq in expected):
                return False
            os.sched_yield()
        bell = int(shared.parent_bell[0])  # read before the last check: a ring after it ends the sleep
        # Only the last worker to finish need wake a wait for all of them.
        shared.ring_threshold[0] = shared.layout.num_workers if need_all else 0
        shared.parent_sleeping[0] = 1
        if not any(done_seq[w] == seq for w, seq in expected):
            # Bounded so that a dead worker is noticed at once (it never rings) and a missed ring costs
            # little.
            futex_wait(
                shared.parent_bell_address,
                bell,
                LIVENESS_SECONDS if timeout is None else min(LIVENESS_SECONDS, timeout),
            )
        shared.parent_sleeping[0] = 0
        return True


class SharedMemoryGroup(ProcessGroup):
    """The workers of a ``shmem`` pool: worker processes over a `SharedBlock`. With the split left unset,
    `split` chooses the count of workers from a measured env step and hand-off
    (`torchwm.vector.transports.worker_count`)."""

    handle = SharedMemoryHandle

    OPTIONS: ClassVar[dict[str, Any]] = {**ProcessGroup.OPTIONS, "spin_seconds": None}

    def __init__(
        self,
        backend: str,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        options: dict[str, Any],
        pool: PoolSettings,
    ) -> None:
        spin = options.get("spin_seconds")
        if spin is not None and (isinstance(spin, bool) or not isinstance(spin, (int, float))):
            raise TypeError(
                f"{backend}: spin_seconds must be a number of seconds or None (measure it), got {spin!r}"
            )
        if spin is not None and not 0 <= spin <= MAX_SPIN_SECONDS:
            raise ValueError(
                f"{backend}: spin_seconds must be between 0 and {MAX_SPIN_SECONDS} (seconds both sides "
                f"poll before they sleep), got {spin!r}"
            )
        super().__init__(backend, spec, env_fns, options, pool)
        self.spin_seconds = None if spin is None else float(spin)
        self.block = SharedBlock(self.spin_seconds)
        # The block's wait itself, not a method that calls it: the pool calls it on every step that waits.
        self.wait = self.block.wait  # type: ignore[method-assign]

    @property
    def tuner(self) -> WaitTuner | None:
        """The pool's `WaitTuner` (None before the block is made)."""
        return self.block.tuner

    def worker(self, index: int, envs: range) -> WorkerHandle:
        return SharedMemoryHandle(index, envs, self, self.block)

    def create_batch(
        self, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> Batch:
        return self.block.create_batch(observation_space, action_space, num_envs, num_workers)

    def split(self, spec: VecSpec, env_fns: list[Callable[[], gym.Env]], pool: PoolSettings) -> list[range]:
        # Not with the user's factories: building one more could have effects (a video file).
        if pool.split_given or pool.inline or spec.env_fns is not None:
            return pool.worker_slices
        self.worker_choice = measured_worker_choice(
            spec.num_envs,
            default_num_workers(),
            env_key(spec),
            env_fns[0],
            self.context,
            gym_specs=gym_specs_of(spec),
            timeout=pool.timeout,
        )
        if self.worker_choice is None:
            return pool.worker_slices
        return self.split_evenly(spec.num_envs, self.worker_choice.workers)

    def __repr__(self) -> str:
        return f"context={self.start_method!r}, spin_seconds={self.spin_seconds!r}"


def _dtypes_match(space: gym.Space, actions: Any) -> bool:
    """Whether every array of ``actions`` has its space's dtype (then the shared arrays hold them as
    given)."""
    if isinstance(space, spaces.Dict):
        return all(_dtypes_match(sub, actions[key]) for key, sub in space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return all(_dtypes_match(sub, a) for sub, a in zip(space.spaces, actions, strict=True))
    return getattr(actions, "dtype", None) == space.dtype
