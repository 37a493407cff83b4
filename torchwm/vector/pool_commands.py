"""The control commands of a worker pool: reset, call, set_attr and the states' clone and restore, sent to
every involved worker at once.

`PoolCommands` is an object the pool's stepper (`torchwm.vector.pool_stepper.PoolStepper`) holds: it
routes a command's ``env_ids`` to each worker's local indices, sends every worker its command, then
gathers every answer through the pool's faults (`torchwm.vector.pool_faults.PoolFaults.answer`), so that
the commands run in parallel; a worker still stepping other envs is waited for first (the stepper's wait,
given as ``wait_until``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from torchwm.env_state import EnvState
from torchwm.errors import WorkerError
from torchwm.vector.messages import (
    Call,
    CloneStates,
    ControlCommand,
    PickledFunction,
    Reset,
    RestoreStates,
    SetAttr,
)
from torchwm.vector.pool_faults import PoolFaults
from torchwm.vector.step_state import StepState
from torchwm.vector.transports.contract import (
    Deadline,
    WorkerHandle,
)


class PoolCommands:
    """Reset, call, set_attr, clone_states and restore_states of a worker pool.

    Args:
        handles: the pool's handles (the same list, kept current by the pool).
        worker_slices: the envs of each worker.
        worker_of: the worker of each env.
        state: the pool's step state (which workers are busy).
        faults: the pool's faults: each answer goes through them.
        wait_until: the pool's wait, ``wait_until(satisfied, deadline, doing)``: takes in finished steps
            until ``satisfied()``.
        timeout: the seconds each command may take (the pool keeps it current).
    """

    def __init__(
        self,
        handles: list[WorkerHandle],
        worker_slices: list[range],
        worker_of: np.ndarray,
        state: StepState,
        faults: PoolFaults,
        wait_until: Callable[[Callable[[], bool], Deadline, str], None],
        timeout: float | None,
    ) -> None:
        self._handles = handles
        self.worker_slices = worker_slices
        self._worker_of = worker_of
        self.state = state
        self.faults = faults
        self._wait_until = wait_until
        self.timeout = timeout

    def _broadcast(self, commands: dict[int, ControlCommand], doing: str) -> dict[int, Any]:
        """Send each worker its command, then gather every answer (commands run in parallel).

        An error reply (an env raised, or its result cannot be pickled) fails this call only; a worker
        that died fails the vector env, unless ``restart_on_crash`` restarts it and the command is sent
        again. Runs under the calling method's hold of the vector env (`VectorEnv._enter`).
        """
        deadline = Deadline.after(self.timeout)
        # A worker still stepping other envs (a reset of some envs while others are in flight) runs
        # one thing at a time: its step is taken in first, and waits among the ready envs for recv.
        busy = self.state.busy
        stepping = [w for w in commands if busy.get(w) is not None]
        if stepping:
            self._wait_until(lambda: all(busy.get(w) is None for w in stepping), deadline, doing)
        for w, command in commands.items():
            self._handles[w].send(command)
        replies: dict[int, Any] = {}
        first_error: BaseException | None = None
        for w in commands:
            handle = self._handles[w]
            try:
                replies[w] = self.faults.answer(handle, deadline, doing, resend=commands[w])
            except WorkerError as error:
                if first_error is None:
                    first_error = error
        if first_error is not None:
            raise first_error
        return replies

    def reset(
        self, ids: np.ndarray, seeds: list[int | None], options: dict | None, streams: list | None = None
    ) -> list[dict]:
        positions: dict[int, list[int]] = {}
        for position, env in enumerate(ids.tolist()):
            positions.setdefault(int(self._worker_of[env]), []).append(position)
        commands: dict[int, ControlCommand] = {}
        for w, where in positions.items():
            start = self.worker_slices[w].start
            commands[w] = Reset(
                [int(ids[p]) - start for p in where],
                [seeds[p] for p in where],
                options,
                None if streams is None else [streams[p] for p in where],
            )
        replies = self._broadcast(commands, "resetting")
        self.faults.forget_restarts(ids.tolist())  # reset now: no episode of theirs to end
        infos: list[dict] = [{}] * len(ids)
        for w, reply in replies.items():
            for p, info in zip(positions[w], reply, strict=True):
                infos[p] = info
        return infos

    def _by_worker(self, ids: list[int]) -> dict[int, list[int]]:
        """The positions in ``ids`` of each worker's envs (workers in order, positions in ``ids``' order)."""
        positions: dict[int, list[int]] = {}
        for position, env in enumerate(ids):
            positions.setdefault(int(self._worker_of[env]), []).append(position)
        return dict(sorted(positions.items()))

    def _local_ids(self, w: int, ids: list[int], where: list[int]) -> list[int] | None:
        """Worker ``w``'s local indices of ``ids[p]`` for ``p`` in ``where``; None if they are all its envs in
        order (the command then names no envs: it runs on all of them)."""
        start = self.worker_slices[w].start
        local = [ids[p] - start for p in where]
        return None if local == list(range(len(self.worker_slices[w]))) else local

    def call(self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int]) -> list[Any]:
        positions = self._by_worker(ids)
        # A function goes by value: a lambda, a closure or a function of __main__ reaches the workers.
        sent = PickledFunction.of(name) if callable(name) else name
        replies = self._broadcast(
            {w: Call(sent, args, kwargs, self._local_ids(w, ids, where)) for w, where in positions.items()},
            f"calling {getattr(name, '__name__', name)!r}",
        )
        return self._in_order(len(ids), positions, replies)

    def _in_order(self, count: int, positions: dict[int, list[int]], replies: dict[int, Any]) -> list[Any]:
        """The workers' answers (one value per env each) as one list, in the caller's order."""
        values: list[Any] = [None] * count
        for w, where in positions.items():
            for p, value in zip(where, replies[w], strict=True):
                values[p] = value
        return values

    def clone_states(self, ids: np.ndarray) -> list[EnvState]:
        env_ids = ids.tolist()
        self.faults.refuse_lost_episodes(env_ids, self._worker_of)
        positions = self._by_worker(env_ids)
        replies = self._broadcast(
            {
                w: CloneStates([env_ids[p] - self.worker_slices[w].start for p in where])
                for w, where in positions.items()
            },
            "cloning env states",
        )
        # A worker that died while cloning was restarted and answered with its new episodes' states, which
        # are not the episodes the caller holds: refused as well (the restart is announced at their step).
        self.faults.refuse_lost_episodes(env_ids, self._worker_of)
        return self._in_order(len(env_ids), positions, replies)

    def restore_states(self, ids: np.ndarray, states: list[EnvState]) -> list[dict]:
        env_ids = ids.tolist()
        positions = self._by_worker(env_ids)
        replies = self._broadcast(
            {
                w: RestoreStates(
                    [env_ids[p] - self.worker_slices[w].start for p in where], [states[p] for p in where]
                )
                for w, where in positions.items()
            },
            "restoring env states",
        )
        self.faults.forget_restarts(env_ids)  # restored: the episode a restart ended is replaced, as by reset
        return self._in_order(len(env_ids), positions, replies)

    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        commands: dict[int, ControlCommand] = {
            w: SetAttr(name, [values[p] for p in where], self._local_ids(w, ids, where))
            for w, where in self._by_worker(ids).items()
        }
        self._broadcast(commands, f"setting {name!r}")
