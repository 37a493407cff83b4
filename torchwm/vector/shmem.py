"""The ``shmem`` backend: worker processes stepping several envs each, the batch in shared memory.

Actions, observations, rewards and flags live in one shared-memory block
(`SharedBatch`). A step costs no pipe round trip and no pickling: the parent
writes the actions and a step mask, sets each worker's ``command_seq`` to the
step's number; each worker steps its envs, writes its rows in place and sets
``done_seq``. Actions of another dtype than the action space's travel through
the pipes instead, so that envs get them exactly as given (as on ``sync``). Both
sides poll those counters with ``os.sched_yield()`` for a few tens of
microseconds, then sleep on a futex until the other side rings (`futex`), so
that no waiting process holds a core a worker needs.
Pipes carry only control commands, errors and infos too large for their
share of the block (the rest travel pickled in it). `recv` with
``batch_size`` returns the envs that finished first. With
``inline`` (see `torchwm.vector.processes`) the parent steps worker 0's envs
into the same shared rows.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

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
        # worker -> global ids of its step in progress (None: a step abandoned after Ctrl-C)
        self._busy: dict[int, np.ndarray | None] = {}
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
        self._step_seq = [0] * self.num_workers  # the number of the last step signalled to each worker
        self._worker_ids = [np.arange(r.start, r.stop) for r in self.worker_slices]
        self._child_workers = [w for w in range(self.num_workers) if not self._handles[w].inline]

    def _release_buffers(self) -> Callable[[], None] | None:
        assert self._shared is not None
        return self._shared.release

    def _layout(self) -> Layout:
        assert self._shared is not None
        return self._shared.layout

    def _close(self) -> None:
        # The batch arrays are views of the block: dropped first, so that close() unmaps it at once
        # (views handed out with copy=False keep it until they go).
        for name in ("_observations", "_rewards", "_terminations", "_truncations"):
            self.__dict__.pop(name, None)
        super()._close()

    def _hand_over_buffers(self, handle: WorkerHandle) -> None:
        assert self._shared is not None
        self._shared.send(handle.conn, handle.process.pid)

    def _reset_reply(self, handle: WorkerHandle, local_ids: list[int], reply: Any) -> list[dict]:
        return reply  # the worker wrote the rows in place

    def _worker_restarted(self, handle: WorkerHandle) -> None:
        assert self._shared is not None
        w = handle.index
        self._busy.pop(w, None)
        # The new worker starts from the current command_seq; nothing of the old one is pending.
        self._shared.done_seq[w] = self._shared.command_seq[w]
        self._step_seq[w] = int(self._shared.command_seq[w])

    def _forget_steps(self) -> None:
        # A worker still stepping is waited for before its actions are written again (send), but
        # its results are not taken: None marks its step as abandoned.
        for w in self._busy:
            self._busy[w] = None

    # -- stepping --------------------------------------------------------------------------------

    def _start_step(self, ids: np.ndarray, actions: Any) -> None:
        shared = self._shared
        assert shared is not None
        space = self.single_action_space
        # Actions of another dtype than the space's cannot go through the typed shared arrays
        # unchanged: they go through the pipes, so that every env gets them exactly as given.
        in_shared = _dtypes_match(space, actions)
        if ids.size == self.num_envs:
            if self._busy:
                self._poll_until(lambda: not self._busy, self._deadline(), "waiting for busy workers")
            if in_shared:
                put_rows(space, shared.actions, slice(None), actions)
                shared.step_mask[:] = True
            for w in self._child_workers:
                rows = self.worker_slices[w]
                piped = None if in_shared else (list(range(len(rows))), slice_rows(space, actions, rows.start, rows.stop))
                self._signal(w, self._worker_ids[w], piped)
            if self._local_group is not None:
                # After ringing the children, so that they step in parallel with these envs.
                first = self.worker_slices[0]
                self._step_local(list(range(len(first))), slice_rows(space, actions, first.start, first.stop))
            return
        workers = self._worker_of[ids]
        involved = np.unique(workers).tolist()
        if any(w in self._busy for w in involved):
            self._poll_until(lambda: not any(w in self._busy for w in involved), self._deadline(),
                             "waiting for busy workers")
        if in_shared:
            put_rows(space, shared.actions, ids, actions)
        for w in involved:
            if self._handles[w].inline:
                continue
            rows = self.worker_slices[w]
            positions = np.flatnonzero(workers == w)
            mine = ids[positions]
            piped = None
            if in_shared:
                shared.step_mask[rows.start:rows.stop] = False
                shared.step_mask[mine] = True
            else:
                piped = ((mine - rows.start).tolist(), take_rows(space, actions, positions))
            self._signal(w, mine, piped)
        if self._local_group is not None and 0 in involved:
            positions = np.flatnonzero(workers == 0)
            start = self.worker_slices[0].start
            self._step_local((ids[positions] - start).tolist(), take_rows(space, actions, positions))

    def _signal(self, w: int, ids: np.ndarray, piped: tuple[list[int], Any] | None) -> None:
        """Start worker ``w``'s step of ``ids``; ``piped``: (local ids, actions) to send over its pipe."""
        assert self._shared is not None
        handle = self._handles[w]
        if piped is None:
            handle.seq += 1
            self._shared.action_via_pipe[w] = 0
        else:
            self._request(handle, ("actions", *piped))  # takes the step's number
            self._shared.action_via_pipe[w] = 1
        self._busy[w] = ids
        self._step_seq[w] = handle.seq
        # Written last: the worker starts once it sees the new value.
        self._shared.command_seq[w] = handle.seq
        self._shared.ring_worker(w)

    def _ring(self, handle: WorkerHandle) -> None:
        if self._shared is not None:
            self._shared.ring_worker(handle.index)

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _await_ready(self, candidates: np.ndarray, count: int, timeout: float | None) -> tuple[np.ndarray, list[dict]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        # Always through _poll_until, which first takes in every worker that has finished: envs are
        # then served in the order they finished, and none waits behind envs that finished later.
        # A wait for every env in flight needs every busy worker: only the last one need wake us.
        need_all = count >= candidates.size
        self._poll_until(lambda: self._enough_ready(count), deadline, "stepping", timeout, need_all)
        return self._collect_ready(count)

    def _poll_until(self, satisfied: Callable[[], bool], deadline: float | None, doing: str,
                    timeout: float | None = None, need_all: bool = False) -> None:
        """Collect finished workers until ``satisfied()``; detects dead workers and the deadline."""
        shared = self._shared
        assert shared is not None
        done_seq = shared.done_seq
        parent_bell = shared.parent_bell
        bell_address = shared.parent_bell_address
        sleeping = shared.parent_sleeping
        expected = self._step_seq
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
                waiting = sorted(int(i) for ids in self._busy.values() if ids is not None for i in ids)
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
            while shared.done_seq[w] != self._step_seq[w]:
                if not handle.alive or (deadline is not None and time.monotonic() > deadline):
                    break  # left busy: the next send waits for it, or finds it dead
                time.sleep(IDLE_SLEEP_SECONDS)
            else:
                self._busy.pop(w)
                # A message that waits in the pipe is dropped by its number when the next reply is read.

    def _finish(self, w: int, deadline: float | None) -> None:
        """Worker ``w`` finished its step: its envs are ready (reading infos or an error from its pipe)."""
        assert self._shared is not None
        ids = self._busy.pop(w)
        if ids is None:
            return  # an abandoned step (see _forget_steps): its pipe message, if any, is dropped later
        status = self._shared.status[w]
        handle = self._handles[w]
        if status == STATUS_SHARED_INFOS:
            infos = pickle.loads(self._shared.info_bytes[w, : self._shared.info_length[w]].data)
        elif status == STATUS_INFOS:
            infos = self._receive(handle, deadline, "stepping", self._step_seq[w])
        elif status == STATUS_ERROR:
            try:
                self._check_reply(handle, self._receive(handle, deadline, "stepping", self._step_seq[w]), "stepping")
            except WorkerError as error:
                self._fail_step(error, deadline)
            raise RuntimeError(f"{handle.describe()} reported an error without a message")
        else:
            infos = [{}] * ids.size
        self._ready.update(zip(ids.tolist(), infos))


def _dtypes_match(space: gym.Space, actions: Any) -> bool:
    """Whether every array of ``actions`` has its space's dtype (then the shared arrays hold them as given)."""
    if isinstance(space, spaces.Dict):
        return all(_dtypes_match(sub, actions[key]) for key, sub in space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return all(_dtypes_match(sub, a) for sub, a in zip(space.spaces, actions, strict=True))
    return getattr(actions, "dtype", None) == space.dtype


@hookimpl
def register_backends(register):
    register("shmem", ShmemVectorEnv,
             description="worker processes, several envs each; batch in shared memory, no pipe per step",
             options=OPTION_DEFAULTS,
             conformance={"variants": CONFORMANCE_VARIANTS})
