"""The ``subproc`` backend: worker processes, each stepping several envs; commands and results over pipes.

Each worker runs an `EnvGroup` (the same loop as ``sync``) over its envs and
answers a step command with its rows (observations, rewards, flags) and
infos, pickled through its pipe. It works for any space, including ones that
do not fit in fixed-size shared memory; for array observations ``shmem`` is
faster, since it moves nothing through pipes on a step. With ``inline`` (see
`torchwm.vector.processes`) the parent steps worker 0's envs into its own
batch, with no message at all. Replies are taken in the order they come, so
with ``batch_size`` the envs that finished first are returned first.
"""

from __future__ import annotations

import collections
import os
import time
from multiprocessing.connection import wait as wait_connections
from typing import Any

import numpy as np

from torchwm.errors import EnvTimeoutError, WorkerError
from torchwm.hookspecs import hookimpl
from torchwm.spec import VecSpec
from torchwm.vector.batching import create_batch, put_rows, slice_rows, take_rows
from torchwm.vector.processes import CONFORMANCE_VARIANTS, OPTION_DEFAULTS, ProcessVectorEnv, WorkerHandle

SPIN_SECONDS = 0.001  # a wait for replies polls the pipes with sched_yield this long, then blocks


class SubprocVectorEnv(ProcessVectorEnv):
    """Envs in worker processes, results over pipes. Options: see `ProcessVectorEnv`.

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="subproc", seed=0,
        ...                         backend_kwargs={"num_workers": 2})
        >>> obs, infos = envs.reset()
        >>> obs.shape, envs.worker_slices
        ((4, 4), [range(0, 2), range(2, 4)])
        >>> envs.close()
    """

    backend_name = "subproc"

    def __init__(self, spec: VecSpec, **options: Any) -> None:
        self._outstanding: list[collections.deque] = []
        super().__init__(spec, **options)

    def _make_buffers(self) -> None:
        n = self.num_envs
        self._observations = create_batch(self.single_observation_space, n)
        self._rewards = np.zeros(n, dtype=np.float64)
        self._terminations = np.zeros(n, dtype=np.bool_)
        self._truncations = np.zeros(n, dtype=np.bool_)
        # Per worker, (number, global ids) of each step command not answered yet, oldest first.
        self._outstanding = [collections.deque() for _ in self._handles]
        self._worker_ids = [np.arange(r.start, r.stop) for r in self.worker_slices]

    def _store(self, ids: np.ndarray | slice, rows: tuple) -> None:
        obs, rewards, terminations, truncations = rows
        if obs is not None:  # None: already read into the batch
            put_rows(self.single_observation_space, self._observations, ids, obs)
        self._rewards[ids] = rewards
        self._terminations[ids] = terminations
        self._truncations[ids] = truncations

    def _reset_reply(self, handle: WorkerHandle, local_ids: list[int], reply: Any) -> list[dict]:
        if handle.inline:
            return reply  # the parent's envs wrote their rows in place
        *rows, infos = reply
        ids = np.asarray(local_ids, dtype=np.int64) + handle.envs.start
        self._store(ids, tuple(rows))
        return infos

    def _worker_restarted(self, handle: WorkerHandle) -> None:
        self._outstanding[handle.index].clear()

    def _forget_steps(self) -> None:
        for outstanding in self._outstanding:
            outstanding.clear()  # their replies carry older numbers than any later command: dropped

    def _start_step(self, ids: np.ndarray, actions: Any) -> None:
        local_step = None  # the parent's own envs and their actions, under inline
        if ids.size == self.num_envs:
            # Every env: each worker's actions are a contiguous slice.
            for handle in self._handles:
                rows = handle.envs
                local = list(range(len(rows)))
                mine = slice_rows(self.single_action_space, actions, rows.start, rows.stop)
                if handle.inline:
                    local_step = (local, mine)
                else:
                    self._send(handle, ("step", local, mine), self._worker_ids[handle.index])
        else:
            workers = self._worker_of[ids]
            for w in np.unique(workers).tolist():
                handle = self._handles[w]
                positions = np.flatnonzero(workers == w)
                mine = ids[positions]
                local, rows = (mine - handle.envs.start).tolist(), take_rows(self.single_action_space, actions, positions)
                if handle.inline:
                    local_step = (local, rows)
                else:
                    self._send(handle, ("step", local, rows), mine)
        if local_step is not None:
            # After the children's commands, so that they step in parallel with these envs.
            self._step_local(*local_step)

    def _send(self, handle: WorkerHandle, command: tuple, ids: np.ndarray) -> None:
        self._outstanding[handle.index].append((self._request(handle, command), ids))

    def _await_ready(self, candidates: np.ndarray, count: int, timeout: float | None) -> tuple[np.ndarray, list[dict]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        busy = [h for h in self._children if self._outstanding[h.index]]
        if busy and self._enough_ready(count):
            # Enough are ready already; still take in the replies that have come, so that envs are
            # served in the order they finished, and none waits behind envs that finished later.
            for handle in busy:
                while self._outstanding[handle.index] and handle.conn.poll():
                    self._collect(handle, deadline)
        while not self._enough_ready(count):
            busy = [h for h in self._children if self._outstanding[h.index]]
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                waiting = sorted(int(i) for h in busy for _, ids in self._outstanding[h.index] for i in ids)
                raise EnvTimeoutError(
                    f"{self.backend_name}: envs {waiting} did not finish their step within {timeout} s; "
                    f"recv(timeout=...) again to keep waiting, or close() to stop the workers"
                )
            waitables = [h.conn for h in busy] + [h.process.sentinel for h in busy]
            ready = self._poll_briefly(busy, SPIN_SECONDS) or wait_connections(waitables, remaining)
            for handle in busy:
                if handle.conn in ready:
                    self._collect(handle, deadline)
                elif handle.process.sentinel in ready:
                    self._on_crash(handle, self._dead(handle, "stepping"), deadline)
                    self._outstanding[handle.index].clear()
        return self._collect_ready(count)

    @staticmethod
    def _poll_briefly(busy: list[WorkerHandle], seconds: float) -> list[Any]:
        """The busy workers' pipes that have a reply within ``seconds`` (polled with sched_yield);
        a reply that comes that soon then costs no wake-up from a blocking wait."""
        started = time.perf_counter()
        while True:
            ready = [h.conn for h in busy if h.conn.poll()]
            if ready or time.perf_counter() - started >= seconds:
                return ready
            os.sched_yield()

    def _drain(self, deadline: float | None) -> None:
        for handle in self._children:
            while self._outstanding[handle.index]:
                seq, _ = self._outstanding[handle.index].popleft()
                self._receive(handle, deadline, "finishing a step after an env raised", seq)

    def _collect(self, handle: WorkerHandle, deadline: float | None) -> None:
        """Read one reply of ``handle`` (it has one): its oldest step's results, or a late reply to drop."""
        seq, ids = self._outstanding[handle.index][0]
        try:
            # A whole share's observations come as raw bytes (see serve_pipe): its rows are contiguous.
            current, message = self._read_reply(handle, seq, "stepping",
                                                into=lambda: self._observations[ids[0]:ids[-1] + 1].data.cast("B"))
        except WorkerError as death:
            if self._failure is not None:  # a pipe cut by an interrupt: nothing to restart
                raise
            self._on_crash(handle, death, deadline)
            self._outstanding[handle.index].clear()
            return
        if not current:
            return
        self._outstanding[handle.index].popleft()
        try:
            self._check_reply(handle, message, "stepping")
        except WorkerError as error:
            self._fail_step(error, deadline)
        *rows, infos = message[1]
        self._store(ids, tuple(rows))
        for env, info in zip(ids.tolist(), infos, strict=True):
            self._ready[env] = info


@hookimpl
def register_backends(register):
    register("subproc", SubprocVectorEnv,
             description="worker processes, several envs each; results over pipes (any space)",
             options=OPTION_DEFAULTS,
             conformance={"variants": CONFORMANCE_VARIANTS})
