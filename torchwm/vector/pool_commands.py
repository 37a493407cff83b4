"""The control commands of a worker pool: reset, call and set_attr, sent to every involved worker at once.

`PoolCommands` is the part of `torchwm.vector.pool_stepper.PoolStepper` that routes a command's
``env_ids`` to each worker's local indices, sends every worker its command, then gathers every answer
(`_broadcast`): the commands run in parallel, and a worker still stepping other envs is waited for first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from torchwm.errors import (
    WorkerError,
)
from torchwm.vector.messages import (
    Call,
    ControlCommand,
    PickledFunction,
    Reset,
    SetAttr,
)
from torchwm.vector.pool_faults import PoolFaults
from torchwm.vector.transports.contract import (
    Deadline,
)


class PoolCommands(PoolFaults):
    """Reset, call and set_attr of a worker pool's stepper (mixed into `PoolStepper`)."""

    worker_slices: list[range]
    _worker_of: np.ndarray
    _check_usable: Callable[[], None]
    _poll_until: Callable[..., None]

    def _broadcast(self, commands: dict[int, ControlCommand], doing: str) -> dict[int, Any]:
        """Send each worker its command, then gather every answer (commands run in parallel).

        An error reply (an env raised, or its result cannot be pickled) fails this call only; a worker
        that died fails the vector env, unless ``restart_on_crash`` restarts it and the command is sent
        again. Runs under the calling method's hold of the vector env (`VectorEnv._enter`).
        """
        self._check_usable()
        deadline = Deadline.after(self.timeout)
        # A worker still stepping other envs (a reset of some envs while others are in flight) runs
        # one thing at a time: its step is taken in first, and waits among the ready envs for recv.
        busy = self.state.busy
        stepping = [w for w in commands if busy.get(w) is not None]
        if stepping:
            self._poll_until(lambda: all(busy.get(w) is None for w in stepping), deadline, doing)
        for w, command in commands.items():
            self._handles[w].send(command)
        replies: dict[int, Any] = {}
        first_error: BaseException | None = None
        for w in commands:
            handle = self._handles[w]
            try:
                replies[w] = self._answer(handle, deadline, doing, resend=commands[w])
            except WorkerError as error:
                if first_error is None:
                    first_error = error
        if first_error is not None:
            raise first_error
        return replies

    def reset_envs(
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
        for env in ids.tolist():
            self._restarted.pop(env, None)  # reset now: no episode of theirs to end
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
        return self._call(name, args, kwargs, ids, None)

    def call_each(self, fn: Callable, per_env: list[Any], ids: list[int]) -> list[Any]:
        """`call` of function ``fn`` with one more argument for each env (``per_env``, in the order of
        ``ids``): each worker gets its envs' arguments in one message."""
        return self._call(fn, (), {}, ids, per_env)

    def _call(
        self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int], per_env: list[Any] | None
    ) -> list[Any]:
        positions = self._by_worker(ids)
        # A function goes by value: a lambda, a closure or a function of __main__ reaches the workers.
        sent = PickledFunction.of(name) if callable(name) else name
        replies = self._broadcast(
            {
                w: Call(
                    sent,
                    args,
                    kwargs,
                    self._local_ids(w, ids, where),
                    None if per_env is None else [per_env[p] for p in where],
                )
                for w, where in positions.items()
            },
            f"calling {getattr(name, '__name__', name)!r}",
        )
        values: list[Any] = [None] * len(ids)
        for w, where in positions.items():
            for p, value in zip(where, replies[w], strict=True):
                values[p] = value
        return values

    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        commands: dict[int, ControlCommand] = {
            w: SetAttr(name, [values[p] for p in where], self._local_ids(w, ids, where))
            for w, where in self._by_worker(ids).items()
        }
        self._broadcast(commands, f"setting {name!r}")
