"""A worker pool's faults: every way a worker's answer can go wrong becomes one outcome, here.

`PoolFaults` is an object the pool's stepper (`torchwm.vector.pool_stepper.PoolStepper`) holds. It owns
the state of the pool's faults (the failure that ended the vector env, the restarts its envs have not
announced yet, the restarts a Ctrl-C cut short) and is the one place that reads a fault, as CPython's
``concurrent.futures.process`` sends every fault through ``terminate_broken``::

    what a handle gave back                  the outcome (`outcome`)              the stepper then
    ──────────────────────────────────────   ──────────────────────────────────   ──────────────────────────
    ErrorReply (an env raised)           ->   StepFailed(ids, must_reset, error) -> keeps the error for the
                                                                                   recv that collects ids
    ErrorReply of an abandoned step      ->   Dropped()                          -> nothing
    WorkerGone, restart_on_crash         ->   Replaced(ids, infos)               -> those envs are ready
    WorkerGone, no restart               ->   Stop(error): failed for good       -> raises it
    TimeoutError                         ->   Stop(error, resume=True)           -> worker busy again; raise
    StepLost (cannot be waited again)    ->   Stop(error, close=True)            -> closes itself; raises

A control command's answer (`answer`, `started`) goes through the same rules and raises its error at
once (a restart's envs in flight are made ready here: no stepper waits for that answer). The messages of
every fault are written here: an env's error (`remote_error`, a `WorkerError` that is also the env's
exception type, with the hint for an id a worker does not know), a worker gone (`gone_error`) and a wait
past its deadline (`timeout_error`). A restart resets the worker's envs, and
every env that lost its episode says so: those in flight in their result (`Replaced`), the idle ones in
their next step (`announce_restarts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cloudpickle
import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.errors import (
    EnvTimeoutError,
    StepLost,
    WorkerError,
    WorkerGone,
    worker_error_class,
)
from torchwm.vector.batching import get_row, take_rows
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

RESTARTING = "restarting after a crash"


@dataclass(frozen=True)
class StepFailed:
    """An env's error ended a worker's step of envs ``ids``: the recv that collects them raises ``error``;
    ``must_reset`` must be reset first."""

    ids: np.ndarray
    must_reset: np.ndarray
    error: WorkerError


@dataclass(frozen=True)
class Dropped:
    """The fault of a step abandoned earlier (Ctrl-C, or its send failed): nothing to keep."""


@dataclass(frozen=True)
class Replaced:
    """A dead worker was restarted: its envs ``ids`` that a recv still expects are ready with ``infos``."""

    ids: list[int]
    infos: list[dict]


@dataclass(frozen=True)
class Stop:
    """Nothing comes for the worker's envs now: raise ``error``. ``resume``: the step is still to come (the
    worker stays busy); ``close``: the vector env closes (a step that cannot be waited for again)."""

    error: BaseException
    resume: bool = False
    close: bool = False


Outcome = StepFailed | Dropped | Replaced | Stop


class PoolFaults:
    """The faults and restarts of one worker pool (see the module docstring).

    Args:
        backend_name: for messages.
        state: the pool's step state, read to know which envs a restart ends, and failed when nothing more
            can work.
        group: the backend's group (its start method names the hint of an id a worker does not know).
        handles: the pool's handles (the same list), for restarts.
        payloads: what each worker builds its envs from, for restarts.
        restart_on_crash: restart a dead worker instead of failing the vector env.
        autoreset_mode: what a restarted env reports in its result.
        episode_seeds: each env's seed stream, continued by a restarted worker (None: no seeded autoresets).
    """

    def __init__(
        self,
        backend_name: str,
        state: StepState,
        group: WorkerGroup,
        handles: list[WorkerHandle],
        payloads: list[WorkerPayload],
        restart_on_crash: bool,
        autoreset_mode: AutoresetMode,
        episode_seeds: EpisodeSeedBook | None,
    ) -> None:
        self.backend_name = backend_name
        self.state = state
        self.group = group
        self.handles = handles
        self.payloads = payloads
        self.restart_on_crash = restart_on_crash
        self.autoreset_mode = autoreset_mode
        self.episode_seeds = episode_seeds
        self.batch: Batch | None = None  # set once the pool made it; a restart writes the envs' rows there
        self.failure: WorkerError | None = None  # what ended the vector env (every later call says so)
        # Idle envs of a restarted worker -> the restart's infos, which their next step returns instead of
        # stepping. The stepper reads this dict (the same object) on every send.
        self.restarted: dict[int, dict] = {}
        self.half_restarted: set[int] = set()  # workers whose restart a Ctrl-C cut short
        self.unusable = False  # failure or half_restarted: the one flag the stepper's hot path reads

    # -- the one place a step's fault becomes an outcome -----------------------------------------

    def outcome(
        self,
        handle: WorkerHandle,
        ids: np.ndarray | None,
        fault: ErrorReply | WorkerGone | TimeoutError,
        deadline: Deadline,
        doing: str,
    ) -> Outcome:
        """What worker ``handle``'s step of envs ``ids`` (None: an abandoned step) comes to, after ``fault``;
        see the module docstring. A restart (``restart_on_crash``) is made here; an error it meets, or a
        Ctrl-C, propagates."""
        if isinstance(fault, ErrorReply):
            if ids is None:
                return Dropped()
            # The env that raised has no state its rows show (for the worker's own error: its envs of this
            # step).
            must_reset = ids if fault.env is None else np.array([handle.envs.start + fault.env])
            return StepFailed(ids, must_reset, self.remote_error(handle, fault, doing))
        if isinstance(fault, WorkerGone):
            dead = handle if fault.worker is None else self.handles[fault.worker]
            return self._crashed(dead, fault, doing, deadline)
        if isinstance(fault, StepLost):
            return Stop(self.timeout_error(handle, deadline, doing, fault), close=True)
        return Stop(self.timeout_error(handle, deadline, doing), resume=True)

    def _crashed(self, handle: WorkerHandle, gone: WorkerGone, doing: str, deadline: Deadline) -> Outcome:
        """A death: a restart whose result is its envs' in flight (``restart_on_crash``), or the end."""
        if not self.restart_on_crash or not gone.restartable or self.failure is not None:
            error = self.gone_error(handle, gone, doing)
            self.fail_for_good(error)
            return Stop(error)
        infos = self._restart_or_fail(handle, deadline)
        state = self.state
        waited_for = [env for env in handle.envs if state.in_flight[env]]  # the envs a recv still expects
        self._end_restarted_episodes(waited_for)
        # The idle envs lost their episodes too: their next step says so instead of stepping (see
        # `announce_restarts`). Envs never reset, or that must be reset anyway, have no episode to lose.
        for env in handle.envs:
            if not state.in_flight[env] and state.ever_reset[env] and not state.must_reset[env]:
                self.restarted[env] = infos[env - handle.envs.start]
        return Replaced(waited_for, [infos[env - handle.envs.start] for env in waited_for])

    # -- control commands: the answer, or its error raised --------------------------------------

    def answer(
        self, handle: WorkerHandle, deadline: Deadline, doing: str, resend: ControlCommand | None = None
    ) -> Any:
        """The answer to the command ``handle``'s worker was sent; torchwm's error for anything else.

        A worker that is gone fails the vector env for good, unless ``resend`` is given and
        ``restart_on_crash`` restarts it: ``resend`` then goes to the new worker.
        """
        try:
            reply = handle.reply(deadline)
        except WorkerGone as gone:
            if (
                resend is None
                or not self.restart_on_crash
                or not gone.restartable
                or self.failure is not None
            ):
                error = self.gone_error(handle, gone, doing)
                self.fail_for_good(error)
                raise error from None
            replaced = self._crashed(handle, gone, doing, deadline)
            if isinstance(replaced, Replaced):  # its envs that a recv expects: ready, as after a step's death
                self.state.arrived(replaced.ids, replaced.infos)
            handle.send(resend)
            return self.answer(handle, deadline, doing)
        except TimeoutError:
            raise self.timeout_error(handle, deadline, doing) from None
        if isinstance(reply, ErrorReply):
            raise self.remote_error(handle, reply, doing)
        return reply

    def started(self, handle: WorkerHandle, deadline: Deadline, doing: str) -> ShareDescription:
        """The description of ``handle``'s envs once built; the error of a worker that cannot build them."""
        try:
            share = handle.started(deadline)
        except WorkerGone as gone:
            raise self.gone_error(handle, gone, doing) from None
        except TimeoutError:
            raise self.timeout_error(handle, deadline, doing) from None
        if isinstance(share, ErrorReply):
            raise self.remote_error(handle, share, doing)
        return share

    # -- the state of the faults -------------------------------------------------------------------

    def fail_for_good(self, failure: WorkerError) -> None:
        """Nothing more can work (a dead worker, a cut channel): every later call raises ``failure``'s
        message (the first failure's, when several workers fail in one call)."""
        if self.failure is None:
            # A copy without the traceback: its frames hold views of the batch, which close() must free.
            self.failure = WorkerError(failure.args[0], worker_index=failure.worker_index)
        self.unusable = True
        self.state.fail()

    def check_usable(self, timeout: float | None) -> None:
        """Refuse any call after a failure; restart again, from scratch, the workers whose restart a Ctrl-C
        cut short, before anything is sent to them."""
        if self.failure is not None:
            raise WorkerError(
                f"{self.backend_name}: this vector env lost a worker earlier ({self.failure.args[0]})",
                worker_index=self.failure.worker_index,
            )
        for w in sorted(self.half_restarted):
            handle = self.handles[w]
            handle.stop()
            self._restart(handle, Deadline.after(timeout))
            self.half_restarted.discard(w)
        self.unusable = False

    def announce_restarts(
        self, ids: np.ndarray, actions: Any
    ) -> tuple[np.ndarray, Any, list[int], list[dict]]:
        """Envs of ``ids`` whose worker was restarted while they were idle: instead of a step, their result
        is the restart's (truncated, ``worker_restarted``), as the envs in flight got it; the action is not
        applied. Returns the other envs and their actions, to be sent, then the announced envs and their
        infos, which are ready."""
        announced = [position for position, env in enumerate(ids.tolist()) if env in self.restarted]
        if not announced:
            return ids, actions, [], []
        envs = ids[announced].tolist()
        self._end_restarted_episodes(envs)
        infos = [self.restarted.pop(env) for env in envs]
        keep = np.setdiff1d(np.arange(ids.size), announced)
        return ids[keep], take_rows(self._action_space, actions, keep), envs, infos

    def forget_restarts(self, envs: list[int]) -> None:
        """Envs reset or restored: the episode a restart ended is replaced, nothing to announce."""
        for env in envs:
            self.restarted.pop(env, None)

    def refuse_lost_episodes(self, ids: list[int], worker_of: np.ndarray) -> None:
        """A `WorkerError` if an env of ``ids`` lost its episode to a worker's restart that its next step
        has not announced yet (its state would be the new episode's, unlike the caller's last rows)."""
        lost = [env for env in ids if env in self.restarted]
        if not lost:
            return
        w = int(worker_of[lost[0]])
        named = f"env {lost[0]}" if len(lost) == 1 else f"envs {lost}"
        its, it = ("its episode", "it") if len(lost) == 1 else ("their episodes", "them")
        raise WorkerError(
            f"{self.backend_name}: {named} lost {its} when {self.handles[w].describe()} was restarted "
            f"after a crash, so there is no state of {its} to clone; reset or restore {it} (the next step "
            f"reports the restart)",
            env_index=lost[0],
            worker_index=w,
        )

    # -- restarts ----------------------------------------------------------------------------------

    def _restart_or_fail(self, handle: WorkerHandle, deadline: Deadline) -> list[dict]:
        try:
            return self._restart(handle, deadline)
        except (WorkerError, EnvTimeoutError) as error:
            # Nothing in flight can come back now: a later call must say so, not that a step is pending.
            self.fail_for_good(WorkerError(str(error), worker_index=handle.index))
            raise
        except BaseException:
            # Interrupted (Ctrl-C) half-way: the new worker's answers are not all read, so it is restarted
            # again, from scratch, before anything is sent to it (`check_usable`); its envs lost their
            # episodes and must be reset.
            self.half_restarted.add(handle.index)
            self.unusable = True
            self.state.mark_for_reset(np.arange(handle.envs.start, handle.envs.stop))
            raise

    def _restart(self, handle: WorkerHandle, deadline: Deadline) -> list[dict]:
        """A new worker for a dead one's envs, reset; returns their reset infos, flagged
        ``worker_restarted``. Under ``same_step`` each also has what every ended env reports in that mode:
        ``final_obs`` (the env's row of the batch before the restart) and ``final_info``."""
        batch = self.batch
        assert batch is not None, "a worker restarts only once the pool has its batch"
        ids = np.arange(handle.envs.start, handle.envs.stop)
        final_obs: list[Any] | None = None
        if self.autoreset_mode is AutoresetMode.SAME_STEP:
            # Copied now: the reset below writes the new episodes' observations over these rows, and an
            # ended episode's last observation is what same_step promises (SB3's terminal_observation).
            space = batch.observation_space
            rows = take_rows(space, batch.observations, ids)
            final_obs = [get_row(space, rows, k) for k in range(len(ids))]
        self.state.worker_gone(handle.index)
        handle.restart(self.payloads[handle.index])
        self.started(handle, deadline, RESTARTING)
        handle.attach(batch)
        self.answer(handle, deadline, RESTARTING)
        local_ids = list(range(len(handle.envs)))
        # Each env goes on with its own seed stream, from the next episode the caller has not seen.
        streams = None if self.episode_seeds is None else self.episode_seeds.of(list(handle.envs))
        handle.send(Reset(local_ids, [None] * len(local_ids), None, streams))
        infos = self.answer(handle, deadline, RESTARTING)
        if self.autoreset_mode is AutoresetMode.NEXT_STEP:
            handle.send(NeedsReset())
            self.answer(handle, deadline, RESTARTING)
        if final_obs is None:
            # next_step: the next step of these envs resets them (NeedsReset), and disabled leaves that to
            # the user: neither reports a final observation.
            return [{**info, "worker_restarted": True} for info in infos]
        # The keys in EnvGroup.step's order for an ended env: final_obs, final_info, then the reset's infos.
        return [
            {"final_obs": obs, "final_info": {"worker_restarted": True}, **info, "worker_restarted": True}
            for obs, info in zip(final_obs, infos, strict=True)
        ]

    def _end_restarted_episodes(self, envs: list[int]) -> None:
        """The rows of restarted envs as their episodes' end: truncated, no reward, the new episode's first
        observation (under same_step, the last one is in ``final_obs``)."""
        batch = self.batch
        assert batch is not None
        batch.rewards[envs] = 0.0
        batch.terminations[envs] = False
        batch.truncations[envs] = True

    @property
    def _action_space(self) -> Any:
        assert self.batch is not None
        return self.batch.action_space

    # -- the messages of every fault -------------------------------------------------------------

    def gone_error(self, handle: WorkerHandle, gone: WorkerGone, doing: str) -> WorkerError:
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

    def remote_error(self, handle: WorkerHandle, reply: ErrorReply, doing: str) -> WorkerError:
        """The `WorkerError` for an `ErrorReply`: it names the env and the worker, carries the worker's
        traceback, and is also an instance of the env's exception type where it can be."""
        try:
            original_type = None if reply.pickled_type is None else cloudpickle.loads(reply.pickled_type)
        except Exception:  # a type the parent cannot import: plain WorkerError, the message names it
            original_type = None
        env_index = None if reply.env is None else handle.envs.start + reply.env
        where = f"env {env_index} on {handle.describe()}" if env_index is not None else handle.describe()
        # how the worker's process started (None for workers that are no multiprocessing process, as an
        # inline one or a Ray actor): the message about an id the worker does not know depends on it
        start_method = getattr(self.group, "start_method", None) if handle.pid else None
        return worker_error(
            f"{self.backend_name}: {where} raised {reply.summary} while {doing}",
            original_type=original_type,
            start_method=start_method,
            env_index=env_index,
            worker_index=handle.index,
            remote_traceback=reply.traceback,
        )

    def timeout_error(
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


def worker_error(
    message: str,
    *,
    original_type: type[BaseException] | None = None,
    start_method: str | None = None,
    **details: Any,
) -> WorkerError:
    """A `WorkerError` (``details``: ``env_index``, ``worker_index``, ``remote_traceback``) that is also an
    instance of ``original_type`` where `torchwm.errors.worker_error_class` allows it.

    ``start_method`` is how the worker's process was started (``"fork"``, ``"forkserver"``, ``"spawn"``),
    None where that is unknown or the worker is no process of multiprocessing's.
    """
    if (
        isinstance(original_type, type)
        and issubclass(original_type, gymnasium.error.UnregisteredEnv)
        and start_method != "fork"
    ):
        message += _unregistered_id_hint(start_method)
    return worker_error_class(original_type)(message, **details)


def _unregistered_id_hint(start_method: str | None) -> str:
    """Why a worker does not know an id (NamespaceNotFound, NameNotFound, VersionNotFound) that the
    script may have registered, and what to do. Gymnasium's own words ("Have you installed the proper
    package?") mislead here: the package is installed, but the worker never ran the registration."""
    if start_method == "forkserver":
        why = (
            "this worker was started by the 'forkserver' start method (torchwm's default), which runs none "
            "of your script's top level"
        )
    elif start_method == "spawn":
        why = (
            "this worker was started by the 'spawn' start method, which runs your script's top level again "
            "but not its `if __name__ == '__main__':` block"
        )
    else:
        why = (
            "a worker started by the 'forkserver' start method (torchwm's default) runs none of your "
            "script's top level, and one started by 'spawn' runs it again but not its "
            "`if __name__ == '__main__':` block"
        )
    return (
        f". If your script registers this id (gym.register(...), gym.register_envs(ale_py)): {why}, so the "
        "id is unknown there. Register it inside the env factory (or at the top of the module that "
        "defines the factory, if that is not your script), or pass backend_kwargs={'context': 'fork'}: "
        "forked workers start with every id registered before the vector env was made"
    )
