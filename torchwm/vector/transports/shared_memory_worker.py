"""The worker's end of the shared-memory transport (the ``shmem`` backend): the loop a worker steps its
envs in, the info columns it writes, and its ring of the parent.

The parent's end (the block's handles, the tuner, the parent's wait) is
`torchwm.vector.transports.shared_memory`; the block both ends read and write is
`torchwm.vector.transports.shared_block.SharedBatch`. A worker waits for the step's number in
``command_seq``, steps its `EnvGroup` in place in its rows of the block, writes the infos (as columns of
numbers when they are plain numbers with the same keys for every env, else pickled into the block, or
through the pipe when they do not fit), a `StepStatus`, then ``done_seq``, and rings the parent. Between
steps it polls the block and its pipe (control commands), then sleeps on a futex. A worker process the
parent did not start (a Ray actor on the parent's node) runs the same loop through `serve_shared_memory`.
"""

from __future__ import annotations

import enum
import os
import pickle
import time
from collections.abc import Callable
from multiprocessing.reduction import recv_handle
from typing import Any

import numpy as np

from torchwm.vector.batching import InfoSchema, slice_rows, take_rows, uniform_columns
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.messages import Step, error_reply
from torchwm.vector.transports.contract import WorkerPayload
from torchwm.vector.transports.futex import futex_wait, futex_wake
from torchwm.vector.transports.shared_block import MAX_INFO_COLUMNS, SharedBatch
from torchwm.vector.transports.worker_process import Readable, Setup, answer_control, send_reply, worker_main

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
                # to the parent is `torchwm.vector.transports.worker_process.ParentGone`, not caught here.
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
# The worker writes them; the parent reads them in
# `torchwm.vector.transports.shared_memory.SharedMemoryHandle._info_rows`.


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
