"""The pipe transport (the ``subproc`` backend): commands and results over each worker's pipe.

Both ends of the wire are here. The parent's end, `PipeHandle`, sends a step
as a `Step` message and reads the worker's rows back into the pool's batch;
the worker's end, `serve`, steps its `EnvGroup` (the same loop as ``sync``)
into rows of its own and sends them, pickled, with the infos. A step of a
whole share of array spaces pickles nothing but the infos: the actions follow
a `RawStep` as raw bytes read into the worker's action rows, and the
observations and then the flags (`flag_rows`) come back as raw bytes that the
parent reads straight into its batch. It works for any space,
including ones that do not fit in fixed-size shared memory; for array
observations ``shmem`` is faster, since it moves nothing through pipes on a
step. The worker process itself is `torchwm.vector.transports.worker_process`;
the parent's end of it and the numbering of messages,
`torchwm.vector.transports.processes`.
"""

from __future__ import annotations

import os
import time
from multiprocessing.connection import wait as wait_connections
from typing import Any, NamedTuple

import numpy as np

from torchwm.vector.batching import ARRAY_SPACES, create_batch, take_rows
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.messages import ROW_COMMANDS, ErrorReply, Step, error_reply
from torchwm.vector.transports.contract import Batch, Deadline, WorkerHandle, WorkerPayload
from torchwm.vector.transports.processes import ProcessGroup, ProcessHandle
from torchwm.vector.transports.worker_process import (
    Readable,
    Setup,
    answer_control,
    send_reply,
    wait_for_message,
)

# A wait for replies polls the pipes with sched_yield this long, then blocks: a reply that comes that soon
# then costs no wake-up.
REPLY_SPIN_SECONDS = 0.001


class RawStep(NamedTuple):
    """Step every env of the worker, with the actions that follow as one raw message: an array action
    space, given in its own dtype, is read straight into the worker's action rows, not unpickled."""


class Rows(NamedTuple):
    """A worker's answer to a step or a reset: its rows and the infos. A whole share of an array batch
    has None in the four rows: the observations, then the flags (`flag_rows`), follow as raw bytes."""

    observations: Any
    rewards: np.ndarray | None
    terminations: np.ndarray | None
    truncations: np.ndarray | None
    infos: list[dict]


def flag_rows(count: int) -> tuple[memoryview, np.ndarray, np.ndarray, np.ndarray]:
    """One buffer of ``count`` envs' rewards (float64), terminations and truncations, and a view of each:
    a step sends them as one raw message, where three pickled arrays cost ten times as much."""
    buffer = np.zeros(10 * count, dtype=np.uint8)
    return (
        buffer.data,
        buffer[: 8 * count].view(np.float64),
        buffer[8 * count : 9 * count].view(np.bool_),
        buffer[9 * count :].view(np.bool_),
    )


# -- the worker's end ------------------------------------------------------------------------------


def serve(conn: Any, envs: list, payload: WorkerPayload, seq: int, setup: Any) -> None:
    """The worker loop: every command and every result over the pipe, until `Close`."""
    first = envs[0]
    count = len(envs)
    flags, rewards, terminations, truncations = flag_rows(count)
    group = EnvGroup(
        envs,
        payload.autoreset_mode,
        create_batch(first.observation_space, count),
        rewards,
        terminations,
        truncations,
        first_env=payload.first_env,
    )
    all_local = list(range(count))
    readable = Readable(conn)
    # All rows of an array batch go as raw bytes, and the actions of an array action space come so.
    raw_observations = (
        group.observations.data.cast("B") if isinstance(group.observation_space, ARRAY_SPACES) else None
    )
    raw_actions = (
        create_batch(group.action_space, count) if isinstance(group.action_space, ARRAY_SPACES) else None
    )
    try:
        send_reply(conn, seq, None)  # the answer to Setup
        while True:
            wait_for_message(conn, readable, time.perf_counter())
            seq, command = conn.recv()
            try:
                if isinstance(command, RawStep):
                    assert raw_actions is not None  # the parent sends RawStep for array action spaces only
                    received = conn.recv_bytes_into(raw_actions.data.cast("B"))
                    if received != raw_actions.nbytes:
                        raise ValueError(
                            f"a step's actions came as {received} bytes, expected {raw_actions.nbytes}"
                        )
                    command = Step(None, raw_actions)
                if isinstance(command, Step):
                    local_ids = all_local if command.local_ids is None else command.local_ids
                    infos = group.step(local_ids, command.actions)
                    if command.local_ids is None and raw_observations is not None:
                        send_reply(
                            conn, seq, Rows(None, None, None, None, infos), raw=(raw_observations, flags)
                        )
                    else:
                        send_reply(conn, seq, _rows(group, local_ids, infos))
                elif isinstance(command, ROW_COMMANDS):  # a reset or a restore: the rows go back
                    infos = group.answer(command)
                    send_reply(
                        conn,
                        seq,
                        infos if isinstance(infos, ErrorReply) else _rows(group, command.local_ids, infos),
                    )
                elif not answer_control(conn, seq, command, group, payload.first_env):
                    return
            except Exception as exc:
                # Whatever the env raised, its own BrokenPipeError or EOFError too: a failure of the pipe to
                # the parent is `ParentGone`, which this does not catch.
                send_reply(conn, seq, error_reply(exc))
    finally:
        try:
            group.close()
        except Exception:
            pass


def _rows(group: EnvGroup, local_ids: list[int], infos: list[dict]) -> Rows:
    # Rows in the order of local_ids (the parent stores them so): all rows at once only when that is env
    # order. A reset of every env in another order ([1, 0]) takes them in its order.
    ids = None if list(local_ids) == list(range(len(group.envs))) else np.asarray(local_ids)
    pick = slice(None) if ids is None else ids
    return Rows(
        take_rows(group.observation_space, group.observations, ids),
        group.rewards[pick].copy(),
        group.terminations[pick].copy(),
        group.truncations[pick].copy(),
        infos,
    )


# -- the parent's end ------------------------------------------------------------------------------


class PipeHandle(ProcessHandle):
    """The parent's end of a ``subproc`` worker: steps and their rows over the pipe."""

    serve = staticmethod(serve)

    def __init__(self, index: int, envs: range, group: ProcessGroup) -> None:
        super().__init__(index, envs, group)
        self._batch: Batch | None = None
        self._rows = slice(envs.start, envs.stop)  # its rows of the batch
        self._raw_rows: list[memoryview] | None = None  # a whole share's observations, then flags
        self._flag_bytes, *self._flag_views = flag_rows(len(envs))
        self._action_dtype: np.dtype | None = None  # an array action space's: its actions go raw
        self._all_ids = np.arange(envs.start, envs.stop)
        self._command: Any = None  # the control command sent last, to read its answer
        self._step: tuple[int, np.ndarray | None] | None = None  # (number, global ids; None: abandoned)

    def attach(self, batch: Batch) -> None:
        self._batch = batch
        array_rows = isinstance(batch.observation_space, ARRAY_SPACES)
        self._raw_rows = (
            [batch.observations[self._rows].data.cast("B"), self._flag_bytes] if array_rows else None
        )
        action_space = batch.action_space
        self._action_dtype = action_space.dtype if isinstance(action_space, ARRAY_SPACES) else None
        self._step = None
        self._command = None
        super().send(Setup(None))

    def send(self, command: Any, raw: Any = None) -> None:
        self._command = command
        super().send(command, raw)

    def reply(self, deadline: Deadline) -> Any:
        reply = self._receive(deadline, self.seq)
        if isinstance(self._command, ROW_COMMANDS) and not isinstance(reply, ErrorReply):
            assert self._batch is not None
            ids = np.asarray(self._command.local_ids, dtype=np.int64) + self.envs.start
            self._batch.store(ids, *reply[:4])
            return reply.infos
        return reply

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        dtype = self._action_dtype
        if local_ids is None and dtype is not None and getattr(actions, "dtype", None) == dtype:
            # bytes, whatever the shape
            super().send(RawStep(), raw=np.ascontiguousarray(actions).data.cast("B"))
        else:  # some envs, or actions in another dtype (sent as given, so that every env gets them unchanged)
            super().send(Step(local_ids, actions))
        self._step = (
            self.seq,
            self._all_ids if local_ids is None else np.asarray(local_ids) + self.envs.start,
        )

    def poll(self) -> bool:
        # A step answered already was read (and dropped) while waiting for a later control answer.
        return self._step is None or self.answered >= self._step[0] or self.readable()

    def finish_step(self, deadline: Deadline | None) -> list[dict] | ErrorReply:
        assert self._step is not None and self._batch is not None
        (seq, ids), self._step = self._step, None
        if self.answered >= seq:
            return []  # an abandoned step, dropped already
        # A whole share's rows come raw (array spaces); some envs' rows, pickled.
        try:
            reply = self._receive(
                self.reply_deadline(deadline), seq, self._raw_rows if ids is self._all_ids else None
            )
        except TimeoutError:
            self._step = (seq, ids)  # still to come: waited for again by the next recv
            raise
        if ids is None or isinstance(reply, ErrorReply):
            return reply if ids is not None else []
        if reply.rewards is None:  # the observations were read in place, the flags into their buffer
            self._batch.store(self._rows, None, *self._flag_views)
        else:
            self._batch.store(ids, *reply[:4])
        return reply.infos

    def abandon_step(self) -> None:
        if self._step is not None:
            self._step = (self._step[0], None)

    def restart(self, payload: WorkerPayload) -> None:
        self._step = None
        super().restart(payload)


class PipeGroup(ProcessGroup):
    """The workers of a ``subproc`` pool; it waits on their pipes and process sentinels."""

    handle = PipeHandle

    def wait(self, busy: list[WorkerHandle], timeout: float | None, need_all: bool) -> bool:
        workers: list[PipeHandle] = busy  # type: ignore[assignment]
        started = time.perf_counter()
        while time.perf_counter() - started < REPLY_SPIN_SECONDS:
            if any(worker.readable() for worker in workers):
                return False
            os.sched_yield()
        wait_connections(
            [worker.conn for worker in workers] + [worker.process.sentinel for worker in workers], timeout
        )
        return True
