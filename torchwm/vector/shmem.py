"""The ``shmem`` backend: worker processes stepping several envs each, the batch in shared memory.

Actions, observations, rewards and flags live in one shared-memory block
(`SharedBatch`). A step costs no pipe round trip and no pickling: the parent
writes the actions and a step mask, bumps each worker's ``command_seq``; each
worker steps its envs, writes its rows in place and sets ``done_seq``. Both
sides poll those counters with ``os.sched_yield()`` for a few tens of
microseconds, then sleep on a futex until the other side rings (`futex`), so
that no waiting process holds a core a worker needs.
Pipes carry only control commands, errors and infos too large for their
share of the block (the rest travel pickled in it). With
``inline`` (see `torchwm.vector.processes`) the parent steps worker 0's envs
into the same shared rows.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from torchwm.errors import EnvTimeoutError, WorkerError
from torchwm.hookspecs import hookimpl
from torchwm.spec import VecSpec
from torchwm.vector import futex
from torchwm.vector.batching import put_rows, slice_rows, take_rows
from torchwm.vector.processes import (
    CONFORMANCE_VARIANTS,
    OPTION_DEFAULTS,
    ProcessVectorEnv,
    WorkerHandle,
)
from torchwm.vector.shared_batch import Layout, SharedBatch
from torchwm.vector.worker import STATUS_ERROR, STATUS_INFOS, STATUS_SHARED_INFOS

SPIN_SECONDS = 0.00002  # a wait polls with sched_yield this long, then sleeps on parent_bell
LIVENESS_SECONDS = 0.005  # longest sleep between checks that the busy workers are alive
IDLE_SLEEP_SECONDS = 0.0005  # polling period of the rare waits that need no speed


class ShmemVectorEnv(ProcessVectorEnv):
    """Envs in worker processes, batch in shared memory. Options: see `ProcessVectorEnv`.

    Observations are copies by default; ``copy=False`` returns views of the shared block that the next
    `step` overwrites. With ``send(env_ids=...)`` on envs of a worker that is still stepping, `send`
    first waits for that worker (a worker runs one command at a time).

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="shmem", seed=0,
        ...                         backend_kwargs={"num_workers": 2})
        >>> obs, infos = envs.reset()
        >>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()
    """

    backend_name = "shmem"

    def __init__(self, spec: VecSpec, **options: Any) -> None:
        self._shared: SharedBatch | None = None
        self._busy: dict[int, np.ndarray] = {}  # worker -> global ids of its step in progress
        self._spin_seconds = SPIN_SECONDS
        super().__init__(spec, **options)

    def _make_buffers(self) -> None:
        self._shared = SharedBatch.create(self.single_observation_space, self.single_action_space,
                                          self.num_envs, self.num_workers)
        shared = self._shared
        self._observations = shared.observations
        self._rewards = shared.rewards
        self._terminations = shared.terminations
        self._truncations = shared.truncations
        self._expected_seq = [0] * self.num_workers
        self._worker_ids = [np.arange(r.start, r.stop) for r in self.worker_slices]
        self._child_workers = [w for w in range(self.num_workers) if not self._handles[w].inline]
        first = self.worker_slices[0]
        self._local_actions = slice_rows(self.single_action_space, shared.actions, first.start, first.stop)

    def _release_buffers(self) -> Callable[[], None] | None:
        assert self._shared is not None
        return self._shared.release

    def _layout(self) -> Layout:
        assert self._shared is not None
        return self._shared.layout

    def _reset_reply(self, handle: WorkerHandle, local_ids: list[int], reply: Any) -> list[dict]:
        return reply  # the worker wrote the rows in place

    def _worker_restarted(self, handle: WorkerHandle) -> None:
        assert self._shared is not None
        w = handle.index
        self._busy.pop(w, None)
        # The new worker starts from the current command_seq; nothing of the old one is pending.
        self._shared.done_seq[w] = self._shared.command_seq[w]
        self._expected_seq[w] = int(self._shared.command_seq[w])

    # -- stepping --------------------------------------------------------------------------------

    def _send_step(self, ids: np.ndarray, actions: Any) -> None:
        self._check_usable()
        shared = self._shared
        assert shared is not None
        if ids.size == self.num_envs:
            if self._busy:
                self._poll_until(lambda: not self._busy, self._deadline(), "waiting for busy workers")
            put_rows(self.single_action_space, shared.actions, slice(None), actions)
            shared.step_mask[:] = True
            for w in self._child_workers:
                self._signal(w, self._worker_ids[w])
            if self._local_group is not None:
                # After ringing the children, so that they step in parallel with these envs.
                self._step_local(list(range(len(self._worker_ids[0]))), self._local_actions)
            return
        workers = self._worker_of[ids]
        involved = np.unique(workers).tolist()
        if any(w in self._busy for w in involved):
            self._poll_until(lambda: not any(w in self._busy for w in involved), self._deadline(),
                             "waiting for busy workers")
        put_rows(self.single_action_space, shared.actions, ids, actions)
        for w in involved:
            if self._handles[w].inline:
                continue
            rows = self.worker_slices[w]
            shared.step_mask[rows.start:rows.stop] = False
            mine = ids[workers == w]
            shared.step_mask[mine] = True
            self._signal(w, mine)
        if self._local_group is not None and 0 in involved:
            mine = ids[workers == 0]
            start = self.worker_slices[0].start
            self._step_local((mine - start).tolist(), take_rows(self.single_action_space, shared.actions, mine))

    def _signal(self, w: int, ids: np.ndarray) -> None:
        assert self._shared is not None
        self._busy[w] = ids
        self._expected_seq[w] += 1
        # Written last: the worker starts once it sees the new value.
        self._shared.command_seq[w] = self._expected_seq[w]
        self._shared.ring_worker(w)

    def _ring(self, handle: WorkerHandle) -> None:
        if self._shared is not None:
            self._shared.ring_worker(handle.index)

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _wait_ready(self, candidates: np.ndarray, count: int, timeout: float | None) -> tuple[np.ndarray, list[dict]]:
        self._check_usable()
        deadline = None if timeout is None else time.monotonic() + timeout
        if len(self._ready) < count:
            # A wait for every env in flight needs every busy worker: only the last one need wake us.
            need_all = count >= candidates.size
            self._poll_until(lambda: len(self._ready) >= count, deadline, "stepping", timeout, need_all)
        return self._take_ready(count)

    def _poll_until(self, satisfied: Callable[[], bool], deadline: float | None, doing: str,
                    timeout: float | None = None, need_all: bool = False) -> None:
        """Collect finished workers until ``satisfied()``; detects dead workers and the deadline."""
        shared = self._shared
        assert shared is not None
        done_seq = shared.done_seq
        parent_bell = shared.parent_bell
        bell_address = shared.parent_bell_address
        sleeping = shared.parent_sleeping
        expected = self._expected_seq
        started = time.perf_counter()
        while True:
            bell = int(parent_bell[0])  # read before the checks: a ring after them ends the sleep
            progressed = False
            for w in list(self._busy):
                if done_seq[w] == expected[w]:
                    self._finish(w, deadline)
                    progressed = True
            if satisfied():
                return
            if progressed:
                started = time.perf_counter()
                continue
            if time.perf_counter() - started < self._spin_seconds:
                os.sched_yield()
                continue
            for w in list(self._busy):
                handle = self._handles[w]
                if not handle.alive:
                    self._busy.pop(w)
                    self._on_crash(handle, self._dead(handle, doing), deadline)
            if satisfied():
                return
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                waiting = sorted(int(i) for ids in self._busy.values() for i in ids)
                raise EnvTimeoutError(
                    f"{self.backend_name}: envs {waiting} did not finish their step within "
                    f"{timeout if timeout is not None else self.timeout} s; recv(timeout=...) again to keep "
                    f"waiting, or close() to stop the workers"
                )
            # Bounded so that a dead worker is noticed at once (it never rings) and a missed ring costs little.
            shared.ring_threshold[0] = self.num_workers if need_all else 0
            sleeping[0] = 1
            if not any(done_seq[w] == expected[w] for w in self._busy):
                futex.wait(bell_address, bell, LIVENESS_SECONDS if remaining is None else min(LIVENESS_SECONDS, remaining))
            sleeping[0] = 0

    def _drain(self, deadline: float | None) -> None:
        shared = self._shared
        assert shared is not None
        for w in list(self._busy):
            handle = self._handles[w]
            while shared.done_seq[w] != self._expected_seq[w]:
                if not handle.alive or (deadline is not None and time.monotonic() > deadline):
                    break  # left busy: the next send waits for it, or finds it dead
                time.sleep(IDLE_SLEEP_SECONDS)
            else:
                self._busy.pop(w)
                if shared.status[w] in (STATUS_INFOS, STATUS_ERROR):  # a message waits in the pipe
                    self._receive(handle, deadline, "finishing a step after an env raised")

    def _finish(self, w: int, deadline: float | None) -> None:
        """Worker ``w`` finished its step: its envs are ready (reading infos or an error from its pipe)."""
        assert self._shared is not None
        ids = self._busy.pop(w)
        status = self._shared.status[w]
        handle = self._handles[w]
        if status == STATUS_SHARED_INFOS:
            infos = pickle.loads(self._shared.info_bytes[w, : self._shared.info_length[w]].data)
        elif status == STATUS_INFOS:
            infos = self._receive(handle, deadline, "stepping")
        elif status == STATUS_ERROR:
            try:
                self._check_reply(handle, self._receive(handle, deadline, "stepping"), "stepping")
            except WorkerError as error:
                self._fail_step(error, deadline)
            raise RuntimeError(f"{handle.describe()} reported an error without a message")
        else:
            infos = [{}] * ids.size
        self._ready.update(zip(ids.tolist(), infos))


@hookimpl
def register_backends(register):
    register("shmem", ShmemVectorEnv,
             description="worker processes, several envs each; batch in shared memory, no pipe per step",
             options=OPTION_DEFAULTS,
             conformance={"variants": CONFORMANCE_VARIANTS})
