"""The local transport: a pool worker whose envs the parent steps itself (the ``inline`` option).

`LocalWorker` has the interface of every worker's handle (`torchwm.vector.transports.contract.WorkerHandle`),
so the pool treats the parent's share like any worker: it sends it the same
commands and takes its results the same way, and nothing in the pool depends
on where a worker runs. Work is done when the pool asks for the answer (`reply`,
`poll`): the pool sends every worker its command first, so the other workers
run theirs while the parent runs these. Its envs write straight into the
pool's batch rows; they have none of a worker process's protections (no
timeout, a crash ends the program).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym

from torchwm.vector.batching import take_rows
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.messages import (
    ControlCommand,
    ErrorReply,
    ShareDescription,
    Step,
    describe_share,
    error_reply,
)
from torchwm.vector.transports.contract import Batch, Deadline, WorkerHandle, WorkerPayload


class LocalWorker(WorkerHandle):
    """Worker ``index``'s envs, built and stepped in this process."""

    def __init__(self, index: int, envs: range) -> None:
        super().__init__(index, envs)
        self._payload: WorkerPayload | None = None
        self._envs: list[gym.Env] = []
        self._group: EnvGroup | None = None
        self._command: ControlCommand | None = None
        self._step: tuple[list[int], Any] | None = None  # a step sent, not run yet
        self._step_result: list[dict] | ErrorReply = []

    def start(self, payload: WorkerPayload) -> None:
        self._payload = payload

    def started(self, deadline: Deadline) -> ShareDescription | ErrorReply:
        assert self._payload is not None
        try:
            self._envs = self._payload.build_envs()
        except Exception as exc:
            return error_reply(exc)
        return describe_share(self._envs)

    def attach(self, batch: Batch) -> None:
        assert self._payload is not None
        self._group = EnvGroup(
            self._envs,
            self._payload.autoreset_mode,
            *batch.rows(self.envs.start, self.envs.stop),
            first_env=self.envs.start,
        )
        self._command = None

    def send(self, command: ControlCommand | Step) -> None:
        assert not isinstance(command, Step), "the parent's own share steps through send_step"
        self._command = command

    def reply(self, deadline: Deadline) -> Any:
        command, self._command = self._command, None
        if command is None:
            return None  # the answer to attach
        assert self._group is not None
        return self._group.answer(command)

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        assert self._group is not None
        # A copy: the step runs when the pool polls, and the caller may change its array before that.
        rows = take_rows(self._group.action_space, actions, None)
        self._step = (list(range(len(self.envs))) if local_ids is None else local_ids, rows)

    def poll(self) -> bool:
        """Runs the step sent, if one is waiting, and answers True: the envs are stepped here, in the
        parent, when the pool first asks whether the step is done, which it does after sending every
        worker its step, so that the worker processes step theirs meanwhile."""
        if self._step is not None:
            assert self._group is not None
            (local_ids, actions), self._step = self._step, None
            try:
                self._step_result = self._group.step(local_ids, actions)
            except Exception as exc:
                self._step_result = error_reply(exc)
        return True

    def finish_step(self, deadline: Deadline | None) -> list[dict] | ErrorReply:
        self.poll()
        result, self._step_result = self._step_result, []
        return result

    def abandon_step(self) -> None:
        self._step = None

    def describe(self) -> str:
        return (
            f"worker {self.index} (envs {self.envs.start}-{self.envs.stop - 1}, in the parent process, "
            f"pid {os.getpid()})"
        )

    def close(self, deadline: Deadline) -> None:
        envs, self._envs, self._group = self._envs, [], None  # the group's rows are views of the batch
        for env in envs:
            try:
                env.close()
            except Exception:
                pass
