"""How a worker pool turns what its workers answer into the vector env's answer, and restarts the dead.

`PoolFaults` is the part of `torchwm.vector.pool_stepper.PoolStepper` that reads one worker's answer
(`_answer`, `_started`) and turns each fault into its own error, one kind each: an env's error
(`ErrorReply`, raised as a `WorkerError` that is also the env's exception type, `_remote_error`), a
worker that is gone (`WorkerGone`, `_gone_error`: the vector env fails for good, unless
``restart_on_crash`` restarts it, `_on_crash`), and a wait past its deadline (`_timeout`). A restart
resets the worker's envs, and every env that lost its episode says so: those in flight in their
result, the idle ones in their next step (`_announce_restarts`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.errors import (
    EnvTimeoutError,
    StepLost,
    WorkerError,
    WorkerGone,
    worker_error,
)
from torchwm.vector.batching import take_rows
from torchwm.vector.episode_seeds import EpisodeSeedBook
from torchwm.vector.messages import (
    ControlCommand,
    ErrorReply,
    NeedsReset,
    Reset,
    ShareDescription,
)
from torchwm.vector.step_state import StepState
from torchwm.vector.transports.contract import (
    Batch,
    Deadline,
    WorkerGroup,
    WorkerHandle,
    WorkerPayload,
)


class PoolFaults:
    """Faults and restarts of a worker pool's stepper (mixed into `PoolStepper`, which holds what is
    declared here)."""

    backend_name: str
    state: StepState
    group: WorkerGroup
    restart_on_crash: bool
    autoreset_mode: AutoresetMode
    single_observation_space: Any
    single_action_space: Any
    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    timeout: float | None
    _handles: list[WorkerHandle]
    _payloads: list[WorkerPayload]
    _worker_ids: list[np.ndarray]
    _batch: Batch | None
    _failure: WorkerError | None
    _restarted: dict[int, dict]
    _half_restarted: set[int]
    episode_seeds: EpisodeSeedBook | None
    closed: bool
    close: Callable[[], None]

    def _fail_for_good(self, failure: WorkerError) -> None:
        """Nothing more can work (a dead worker, a cut channel): every later call raises ``failure``'s
        message."""
        # A copy without the traceback: its frames hold views of the batch, which close() must free.
        self._failure = WorkerError(failure.args[0], worker_index=failure.worker_index)
        self.state.fail()

    def _take_fault(self, w: int, fault: WorkerGone | TimeoutError, deadline: Deadline, doing: str) -> None:
        """`PoolStepper._finish` of a step's fault: a death (a restart, or the vector env fails for good) or
        a late reply (raised; a `StepLost` closes the vector env)."""
        handle = self._handles[w]
        if isinstance(fault, WorkerGone):
            self.state.worker_gone(w)
            self._on_crash(
                handle if fault.worker is None else self._handles[fault.worker], fault, doing, deadline
            )
            return
        ids = self.state.worker_finished(w)
        if isinstance(fault, StepLost):
            error = self._timeout(handle, deadline, "stepping", fault)
            self.closed = True  # the vector env closes on seeing it
            self.close()
            raise error from None
        self.state.worker_resumed(w, ids)
        raise self._timeout(handle, deadline, "stepping") from None

    def _gone_error(self, handle: WorkerHandle, gone: WorkerGone, doing: str) -> WorkerError:
        """The `WorkerError` for a worker that cannot answer any more."""
        if not gone.restartable:
            return WorkerError(
                f"{self.backend_name}: {gone.reason} ({handle.describe()}); close() this vector "
                f"env and make a new one",
                worker_index=handle.index,
            )
        if gone.hint:
            hint = gone.hint
        elif doing == "starting its envs":
            hint = (
                "An env's constructor ended the process (a crash, os._exit, exit()); its stderr may show why."
            )
        elif self.restart_on_crash:
            hint = (
                "Its envs are lost (it could not be restarted); close() this vector env and make a new one."
            )
        else:
            hint = (
                "Its envs are lost; close() this vector env and make a new one, or pass "
                "backend_kwargs={'restart_on_crash': True} to restart crashed workers."
            )
        return WorkerError(
            f"{self.backend_name}: {handle.describe()} died ({gone.reason}) while {doing}. {hint}",
            worker_index=handle.index,
        )

    def _remote_error(self, handle: WorkerHandle, reply: ErrorReply, doing: str) -> WorkerError:
        """The `WorkerError` for an `ErrorReply`: it names the env and the worker, carries the worker's
        traceback, and is also an instance of the env's exception type where it can be."""
        try:
            original_type = None if reply.pickled_type is None else cloudpickle.loads(reply.pickled_type)
        except Exception:  # a type the parent cannot import: plain WorkerError, the message names it
            original_type = None
        env_index = None if reply.env is None else handle.envs.start + reply.env
        where = f"env {env_index} on {handle.describe()}" if env_index is not None else handle.describe()
        return worker_error(
            f"{self.backend_name}: {where} raised {reply.summary} while {doing}",
            original_type=original_type,
            env_index=env_index,
            worker_index=handle.index,
            remote_traceback=reply.traceback,
            # how the worker's process started (None for workers that are no multiprocessing process, as
            # an inline one or a Ray actor): the message about an id the worker does not know depends on it
            start_method=getattr(self.group, "start_method", None) if handle.pid else None,
        )

    def _timeout(
        self, handle: WorkerHandle, deadline: Deadline, doing: str, lost: StepLost | None = None
    ) -> EnvTimeoutError:
        waited = deadline.waited()
        if lost is not None:
            return EnvTimeoutError(
                f"{self.backend_name}: {lost.late or handle.describe()} did not answer within {waited} "
                f"while {doing}, and this step cannot be waited for again, so this vector env is now closed; "
                f"make a new one (pass a larger timeout= for slow envs{lost.hint})"
            )
        return EnvTimeoutError(
            f"{self.backend_name}: {handle.describe()} did not answer within {waited} while "
            f"{doing}; pass a larger timeout= (backend_kwargs or recv(timeout=)), or look for an env that "
            f"hangs"
        )

    def _answer(
        self, handle: WorkerHandle, deadline: Deadline, doing: str, resend: ControlCommand | None = None
    ) -> Any:
        """The answer to the command ``handle``'s worker was sent; torchwm's error for anything else.

        A worker that is gone fails the vector env for good, unless ``resend`` is given and
        ``restart_on_crash`` restarts it: ``resend`` then goes to the new worker.
        """
        try:
            reply = handle.reply(deadline)
        except WorkerGone as gone:
            if resend is None:
                error = self._gone_error(handle, gone, doing)
                self._fail_for_good(error)
                raise error from None
            self._on_crash(handle, gone, doing, deadline)
            handle.send(resend)
            return self._answer(handle, deadline, doing)
        except TimeoutError:
            raise self._timeout(handle, deadline, doing) from None
        if isinstance(reply, ErrorReply):
            raise self._remote_error(handle, reply, doing)
        return reply

    def _started(self, handle: WorkerHandle, deadline: Deadline, doing: str) -> ShareDescription:
        try:
            share = handle.started(deadline)
        except WorkerGone as gone:
            raise self._gone_error(handle, gone, doing) from None
        except TimeoutError:
            raise self._timeout(handle, deadline, doing) from None
        if isinstance(share, ErrorReply):
            raise self._remote_error(handle, share, doing)
        return share

    def _on_crash(self, handle: WorkerHandle, gone: WorkerGone, doing: str, deadline: Deadline) -> None:
        """Restart ``handle``'s worker (restart_on_crash) and mark its envs in flight ready, or fail for
        good."""
        if not self.restart_on_crash or not gone.restartable or self._failure is not None:
            error = self._gone_error(handle, gone, doing)
            if self._failure is None:
                self._fail_for_good(error)
            raise error
        try:
            infos = self._restart(handle, deadline)
        except (WorkerError, EnvTimeoutError) as error:
            # Nothing in flight can come back now: a later call must say so, not that a step is pending.
            if self._failure is None:
                self._fail_for_good(WorkerError(str(error), worker_index=handle.index))
            raise
        except BaseException:
            # Interrupted (Ctrl-C) half-way: the new worker's answers are not all read, so it is restarted
            # again, from scratch, before anything is sent to it (`_redo_restarts`); its envs lost their
            # episodes and must be reset.
            self._half_restarted.add(handle.index)
            self.state.mark_for_reset(self._worker_ids[handle.index])
            raise
        state = self.state
        waited_for = [env for env in handle.envs if state.in_flight[env]]  # the envs a recv still expects
        self._end_restarted_episodes(waited_for)
        state.arrived(waited_for, [infos[env - handle.envs.start] for env in waited_for])
        # The idle envs lost their episodes too: their next step says so instead of stepping (see
        # `_announce_restarts`). Envs never reset, or that must be reset anyway, have no episode to lose.
        for env in handle.envs:
            if not state.in_flight[env] and state.ever_reset[env] and not state.must_reset[env]:
                self._restarted[env] = infos[env - handle.envs.start]

    def _redo_restarts(self) -> None:
        """Restart again the workers whose restart a Ctrl-C cut short (see `_on_crash`)."""
        for w in sorted(self._half_restarted):
            handle = self._handles[w]
            handle.stop()
            self._restart(handle, Deadline.after(self.timeout))
            self._half_restarted.discard(w)

    def _end_restarted_episodes(self, envs: list[int]) -> None:
        """The rows of restarted envs as their episodes' end: truncated, no reward, the new episode's first
        observation (under same_step, the last one is in ``final_obs``)."""
        self.rewards[envs] = 0.0
        self.terminations[envs] = False
        self.truncations[envs] = True

    def _announce_restarts(self, ids: np.ndarray, actions: Any) -> tuple[np.ndarray, Any]:
        """Envs of ``ids`` whose worker was restarted while they were idle: instead of a step, their result
        is the restart's (truncated, ``worker_restarted``), as the envs in flight got it; the action is not
        applied. Returns the other envs and their actions, to be sent."""
        announced = [position for position, env in enumerate(ids.tolist()) if env in self._restarted]
        if not announced:
            return ids, actions
        envs = ids[announced].tolist()
        self._end_restarted_episodes(envs)
        self.state.arrived(envs, [self._restarted.pop(env) for env in envs])
        keep = np.setdiff1d(np.arange(ids.size), announced)
        return ids[keep], take_rows(self.single_action_space, actions, keep)

    def _restart(self, handle: WorkerHandle, deadline: Deadline) -> list[dict]:
        """A new worker for a dead one's envs, reset; returns their reset infos, flagged
        ``worker_restarted``. Under ``same_step`` each also has what every ended env reports in that mode:
        ``final_obs`` (the env's row of the batch before the restart) and ``final_info``."""
        from torchwm.vector.batching import get_row

        doing = "restarting after a crash"
        ids = self._worker_ids[handle.index]
        final_obs: list[Any] | None = None
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            # Copied now: the reset below writes the new episodes' observations over these rows, and an
            # ended episode's last observation is what same_step promises (SB3's terminal_observation).
            space = self.single_observation_space
            rows = take_rows(space, self.observations, ids)
            final_obs = [get_row(space, rows, k) for k in range(len(ids))]
        self.state.worker_gone(handle.index)
        handle.restart(self._payloads[handle.index])
        self._started(handle, deadline, doing)
        handle.attach(self._batch)  # type: ignore[arg-type]
        self._answer(handle, deadline, doing)
        local_ids = list(range(len(handle.envs)))
        # Each env goes on with its own seed stream, from the next episode the caller has not seen.
        streams = None if self.episode_seeds is None else self.episode_seeds.of(list(handle.envs))
        handle.send(Reset(local_ids, [None] * len(local_ids), None, streams))
        infos = self._answer(handle, deadline, doing)
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            handle.send(NeedsReset())
            self._answer(handle, deadline, doing)
        if final_obs is None:
            # next_step: the next step of these envs resets them (NeedsReset), and disabled leaves that to
            # the user: neither reports a final observation.
            return [{**info, "worker_restarted": True} for info in infos]
        # The keys in EnvGroup.step's order for an ended env: final_obs, final_info, then the reset's infos.
        return [
            {"final_obs": obs, "final_info": {"worker_restarted": True}, **info, "worker_restarted": True}
            for obs, info in zip(final_obs, infos, strict=True)
        ]
