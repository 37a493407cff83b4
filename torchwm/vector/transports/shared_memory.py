"""The shared-memory transport (the ``shmem`` backend): a whole batch in one shared block, steps signalled
through it.

Both ends of the wire are here: the parent's (`SharedMemoryGroup` for the pool, the block, its
`WaitTuner` and the parent's wait; `SharedMemoryHandle` for each worker) and the worker's loop (`serve`),
since a step runs through both. Actions, observations, rewards and flags live in one shared-memory block
(`torchwm.vector.transports.shared_block.SharedBatch`); a step costs no pipe message and no pickling: the
parent writes the actions and the step's number into the block and rings the worker, the worker steps its
`EnvGroup` in place and sets ``done_seq``. How one step travels, file by file: docs/concepts.md,
"One shmem step".

Actions of another dtype than the action space's travel through the pipe
instead (as a `Step` message, flagged in ``action_via_pipe``), so that every
env gets the actions exactly as given, as on every other backend. While
waiting, both sides poll their counter with ``os.sched_yield()`` for a while,
then sleep on a futex (a word of the block) until the other side rings, so
that no waiting process holds a core a worker needs (`futex_wait`). How long
each side polls is measured on the first steps (`torchwm.vector.transports.handoff`):
the workers write when they began and ended each step in the block. Step
infos travel in the block too: plain numbers with the same keys for every
env (Atari's lives and frame counters) as columns of numbers, one row per env,
their keys only when they change (the info columns, below); other infos pickled. The
pipe carries control commands, errors and large infos (the worker process and
its pipe are `torchwm.vector.transports.processes`).
"""

from __future__ import annotations

import enum
import os
import pickle
import time
from collections.abc import Callable
from multiprocessing.reduction import recv_handle
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.spec import VecSpec
from torchwm.vector.batching import (
    ARRAY_SPACES,
    InfoSchema,
    info_rows,
    put_rows,
    slice_rows,
    take_rows,
    uniform_columns,
)
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.messages import ErrorReply, Step, error_reply
from torchwm.vector.transports.contract import (
    CLOSE_GRACE_SECONDS,
    Batch,
    Deadline,
    PoolSettings,
    WorkerGroup,
    WorkerHandle,
    WorkerPayload,
    default_num_workers,
    gym_specs_of,
    split_envs,
)
from torchwm.vector.transports.futex import futex_wait, futex_wake
from torchwm.vector.transports.handoff import MAX_SPIN_SECONDS, WaitTuner
from torchwm.vector.transports.processes import ProcessGroup, ProcessHandle
from torchwm.vector.transports.shared_block import MAX_INFO_COLUMNS, SharedBatch
from torchwm.vector.transports.worker_count import env_key, measured_worker_choice
from torchwm.vector.transports.worker_process import Readable, Setup, answer_control, send_reply, worker_main

LIVENESS_SECONDS = 0.005  # longest sleep of the parent between checks that the busy workers are alive
# longest sleep of a worker: bounds a missed ring and the check that the parent lives
IDLE_WAIT_SECONDS = 0.005


class StepStatus(enum.IntEnum):
    """What a worker wrote in ``status[w]`` with ``done_seq[w]``."""

    OK = 0
    INFOS_IN_PIPE = 1  # non-empty infos wait in the pipe
    ERROR = 2  # an `ErrorReply` waits in the pipe
    INFOS_IN_BLOCK = 3  # non-empty infos, pickled in info_bytes[w][:info_length[w]]
    # Plain numbers, in the rows of info_columns of the envs stepped (in step order, from the worker's first
    # row); their keys and types are the schema last written in info_schema[w] (info_schema_seq[w] counts).
    INFOS_IN_COLUMNS = 4


# -- the rings -------------------------------------------------------------------------------------
# Module functions, not `SharedBatch` methods: a worker's loop and the parent's wait call them on every
# step, with the block and the worker's index, and need nothing else of the batch.


def ring_worker(shared: SharedBatch, worker: int) -> None:
    """Wake worker ``worker`` if it sleeps (after a step signal or a pipe command).

    The bell always changes, so a worker about to sleep on its old value returns at once; the wake
    syscall is made only for a worker that said it sleeps.
    """
    shared.doorbell[worker] += 1
    if shared.worker_sleeping[worker]:
        futex_wake(shared.doorbell_addresses[worker])


def ring_parent(shared: SharedBatch) -> None:
    """Wake the parent if it sleeps (a worker finished). Workers may race on the increment:
    a lost increment still changes the value, which is all a sleeper checks."""
    shared.parent_bell[0] += 1
    if shared.parent_sleeping[0] and (
        # Waiting for every worker: only the last one to finish wakes the parent. Two finishing at
        # once could each miss the other; the parent's sleep is bounded, so that costs at most that.
        not shared.ring_threshold[0]
        or np.count_nonzero(shared.done_seq == shared.command_seq) >= shared.ring_threshold[0]
    ):
        futex_wake(shared.parent_bell_address)


# -- the worker's end ------------------------------------------------------------------------------


def serve(conn: Any, envs: list, payload: WorkerPayload, seq: int, setup: Setup) -> None:
    """The worker loop: steps signalled through the block, control commands over the pipe, until `Close`."""
    first = envs[0]
    worker_index = payload.index
    # The block comes as a file descriptor over the pipe: it has no name anyone could leak.
    shared = SharedBatch.attach(setup.layout, recv_handle(conn), first.observation_space, first.action_space)
    count = len(envs)
    rows = slice(payload.first_env, payload.first_env + count)
    group = EnvGroup(
        envs, payload.autoreset_mode, *shared.rows(rows.start, rows.stop), first_env=payload.first_env
    )
    try:
        send_reply(conn, seq, None)  # the answer to Setup
        _serve_steps(group, conn, shared, worker_index, rows, payload.first_env)
    finally:
        try:
            group.close()
        except Exception:
            pass
        del group  # its rows are views of the block
        shared.release()


def serve_shared_memory(conn: Any, payload_bytes: bytes) -> None:
    """The whole worker's end of a `SharedMemoryHandle` in a process its parent did not start (a Ray actor
    on the parent's node): build the envs of the cloudpickled `WorkerPayload`, then serve until `Close`.

    ``conn`` is a `multiprocessing.connection.Connection` over a Unix socket to the parent, which sends the
    block's descriptor over it as over a worker's pipe.
    """
    worker_main(conn, None, payload_bytes, serve)


def _serve_steps(
    group: EnvGroup, conn: Any, shared: SharedBatch, worker_index: int, rows: slice, first_env: int
) -> None:
    all_local = list(range(len(group.envs)))
    action_space = group.action_space
    actions_view = slice_rows(action_space, shared.actions, rows.start, rows.stop)
    mask_view = shared.step_mask[rows]
    command_seq = shared.command_seq
    done_seq = shared.done_seq
    status = shared.status
    action_via_pipe = shared.action_via_pipe
    info_bytes, info_length = shared.info_bytes[worker_index], shared.info_length
    info_capacity = info_bytes.size
    write_columns = _column_writer(shared, worker_index, rows)
    doorbell = shared.doorbell
    sleeping = shared.worker_sleeping
    doorbell_address = shared.doorbell_addresses[worker_index]
    step_times, worker_spin = shared.step_times[worker_index], shared.worker_spin
    last_seq = int(command_seq[worker_index])
    piped_step: tuple[int, Step] | None = None  # (number, message) of a step whose actions came over the pipe
    parent = os.getppid()
    readable = Readable(conn)
    idle_since = time.perf_counter()
    while True:
        bell = int(doorbell[worker_index])  # read before the checks: a ring after them ends the sleep
        seq = int(command_seq[worker_index])
        if seq != last_seq:
            last_seq = seq
            step_times[0] = time.perf_counter()
            message: Any = None
            try:
                if action_via_pipe[worker_index]:
                    # Sent before the step's number was set, so it is in the pipe already.
                    while piped_step is None or piped_step[0] != seq:
                        piped_step = conn.recv()
                    local_ids = all_local if piped_step[1].local_ids is None else piped_step[1].local_ids
                    actions = piped_step[1].actions
                    piped_step = None
                elif mask_view.all():
                    local_ids, actions = all_local, actions_view
                else:
                    local_ids = np.flatnonzero(mask_view).tolist()
                    actions = take_rows(action_space, actions_view, np.asarray(local_ids))
                infos = group.step(local_ids, actions)
                status[worker_index] = StepStatus.OK
                if any(infos):
                    if write_columns(infos):
                        status[worker_index] = StepStatus.INFOS_IN_COLUMNS
                    else:
                        pickled = pickle.dumps(infos, protocol=pickle.HIGHEST_PROTOCOL)
                        if len(pickled) <= info_capacity:
                            info_bytes[: len(pickled)] = np.frombuffer(pickled, dtype=np.uint8)
                            info_length[worker_index] = len(pickled)
                            status[worker_index] = StepStatus.INFOS_IN_BLOCK
                        else:
                            message = infos
                            status[worker_index] = StepStatus.INFOS_IN_PIPE
            except Exception as exc:
                # Whatever the env raised, its own BrokenPipeError or EOFError too: a failure of the pipe
                # to the parent is `torchwm.vector.transports.processes.ParentGone`, not caught here.
                message = error_reply(exc)
                status[worker_index] = StepStatus.ERROR
            step_times[1] = time.perf_counter()
            # done_seq after the rows and status (the parent reads them once it sees it), and
            # before a pipe message: a message larger than the pipe buffer would otherwise block
            # this worker until the parent reads it, while the parent waits for done_seq.
            done_seq[worker_index] = seq
            ring_parent(shared)
            if message is not None:
                send_reply(conn, seq, message)
            idle_since = time.perf_counter()
            continue
        if readable():
            answered, command = conn.recv()
            if isinstance(command, Step):
                # A step's actions, read before its number was seen; the step comes next.
                piped_step = (answered, command)
                continue
            if not answer_control(conn, answered, command, group, first_env):
                return
            idle_since = time.perf_counter()
            continue
        if time.perf_counter() - idle_since < worker_spin[0]:
            os.sched_yield()
        else:
            if os.getppid() != parent:
                return  # orphaned: the parent died without closing the pipe
            sleeping[worker_index] = 1
            # Checked again after saying so: a command sent before the flag was seen is not slept over.
            if int(command_seq[worker_index]) == last_seq and not readable():
                futex_wait(doorbell_address, bell, IDLE_WAIT_SECONDS)
            sleeping[worker_index] = 0


# -- the info columns ------------------------------------------------------------------------------
# Both ends, here because each step with infos runs them. The worker writes; the parent reads them in
# `SharedMemoryHandle._info_rows`.


def _column_writer(shared: SharedBatch, worker_index: int, rows: slice) -> Callable[[list[dict]], bool]:
    """A function that writes a step's infos into the worker's rows of ``info_columns`` (and their schema
    into ``info_schema`` when it changed) and says whether it could: plain numbers of one key set only."""
    as_ints = shared.info_columns[rows]
    as_floats = as_ints.view(np.float64)
    schema_bytes, schema_length, schema_seq = (
        shared.info_schema[worker_index],
        shared.info_schema_length,
        shared.info_schema_seq,
    )
    last_schema: InfoSchema | None = None

    def write(infos: list[dict]) -> bool:
        nonlocal last_schema
        columns = uniform_columns(infos)
        if columns is None or len(columns) > MAX_INFO_COLUMNS:
            return False
        count = len(infos)
        try:
            for column, (_, kind, values) in enumerate(columns):
                (as_floats if kind is float else as_ints)[:count, column] = values
        except OverflowError:  # an int beyond int64: pickled, so that the parent fails as Gymnasium does
            return False
        schema = tuple((key, kind) for key, kind, _ in columns)
        if schema != last_schema:
            pickled = pickle.dumps(schema, protocol=pickle.HIGHEST_PROTOCOL)
            if len(pickled) > schema_bytes.size:
                return False
            schema_bytes[: len(pickled)] = np.frombuffer(pickled, dtype=np.uint8)
            schema_length[worker_index] = len(pickled)
            # Counted on from the block's value, so that a restarted worker's first schema is read too.
            schema_seq[worker_index] += 1
            last_schema = schema
        return True

    return write


# -- the parent's end ------------------------------------------------------------------------------


class SharedMemoryHandle(ProcessHandle):
    """The parent's end of a ``shmem`` worker: steps through the shared block, control over the pipe. Its
    group is a `SharedBlockGroup` (it made the block and the pool's `WaitTuner`)."""

    serve = staticmethod(serve)
    group: SharedBlockGroup  # type: ignore[assignment]

    def __init__(self, index: int, envs: range, group: SharedBlockGroup) -> None:
        super().__init__(index, envs, group)  # type: ignore[arg-type]
        self._shared: SharedBatch | None = None
        self._actions: Any = None  # this worker's rows of the block's actions and step mask
        self._mask: Any = None
        self._step_seq = 0  # the number of the last step signalled
        self._step_count = 0  # how many envs it steps
        self._sent_at = 0.0  # when it was sent (time.perf_counter), for the pool's `WaitTuner`
        self._tuner = WaitTuner(1, 1)  # the group's, once attached
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
        assert self.group.tuner is not None, "the group's create_batch makes the tuner"
        self._tuner = self.group.tuner
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

    def finish_step(self, deadline: Deadline) -> list[dict] | ErrorReply:
        shared = self._shared
        assert shared is not None
        if self._abandoned:
            return []  # a message it left in the pipe is dropped by its number when the next reply is read
        tuner = self._tuner
        if tuner.measuring:
            began, ended = shared.step_times[self.index].tolist()
            tuner.record(self.index, self._sent_at, began, ended, time.perf_counter())
            shared.worker_spin[0] = tuner.worker_spin
        else:
            tuner.count_step()
        # An int first: numpy's comparison with an IntEnum member looks up a dozen array hooks on the enum.
        status = int(shared.status[self.index])
        if status == StepStatus.INFOS_IN_COLUMNS:
            return self._info_rows(shared)
        if status == StepStatus.INFOS_IN_BLOCK:
            return pickle.loads(shared.info_bytes[self.index, : shared.info_length[self.index]].data)
        if status == StepStatus.OK:
            return [{}] * self._step_count
        return self._receive(deadline, self._step_seq)  # the infos, or the ErrorReply

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


class SharedBlockGroup(WorkerGroup):
    """What every pool whose workers step through a shared block shares: the block (`create_batch`),
    the pool's `WaitTuner`, and the wait on the parent's futex (`wait`). ``spin_seconds``: the option
    (None: measured, `torchwm.vector.transports.handoff`)."""

    handle = SharedMemoryHandle
    spin_seconds: float | None = None
    tuner: WaitTuner | None = None  # made with the block
    block: SharedBatch | None = None

    def create_batch(
        self, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> Batch:
        block = self.block = SharedBatch.create(observation_space, action_space, num_envs, num_workers)
        self.tuner = WaitTuner(num_workers, default_num_workers(), self.spin_seconds)
        block.worker_spin[0] = self.tuner.worker_spin
        return block

    def wait(self, busy: list[WorkerHandle], timeout: float | None, need_all: bool) -> bool:
        workers: list[SharedMemoryHandle] = busy  # type: ignore[assignment]
        shared = self.block
        assert shared is not None and self.tuner is not None
        done_seq = shared.done_seq
        expected = [(worker.index, worker._step_seq) for worker in workers]
        started = time.perf_counter()
        spin = self.tuner.parent_spin
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


class SharedMemoryGroup(ProcessGroup, SharedBlockGroup):
    """The workers of a ``shmem`` pool: worker processes over a shared block. With the split left unset,
    `split` chooses the count of workers from a measured env step and hand-off
    (`torchwm.vector.transports.worker_count`)."""

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
        return split_envs(spec.num_envs, self.worker_choice.workers, None, self.backend)

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
