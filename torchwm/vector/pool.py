"""The worker pool: what every backend that spreads its envs over workers needs, written once.

A `WorkerPool` is a `torchwm.vector.base.VectorEnv` over a `PoolStepper`,
whose envs are split over workers (`split_envs`, visible as
``vec.worker_slices``). The stepper reaches each worker through a
*transport*: the backend's `WorkerGroup` and a `WorkerHandle` per worker (the
contract is `torchwm.vector.transports.contract`). It owns everything
that does not depend on how the bytes travel: the options every pool backend
shares (`check_pool_options`), routing actions and ``env_ids`` to workers
(global env ids to each worker's local ones), readiness and fair
``batch_size`` batches (the envs sent longest ago first, none starved), one
`Deadline` per wait and the `EnvTimeoutError` that names the real timeout,
restarts (``restart_on_crash``), turning a worker's `ErrorReply` into a
`WorkerError` that names the env and the worker, and closing within a
deadline (also at garbage collection, `weakref.finalize`). A backend is a
transport choice plus its options: ``subproc`` is ``WorkerPool`` over
`torchwm.vector.transports.pipe`, ``shmem`` over
`torchwm.vector.transports.shared_memory`. With ``inline=True`` worker 0 is a
`torchwm.vector.transports.local.LocalWorker`, the same interface run in this
process, so nothing here depends on where a worker runs.

How a step travels through the pool and a transport: docs/concepts.md, "One shmem step".
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import cloudpickle
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.building import spec_env_fns
from torchwm.errors import (
    ClosedEnvironmentError,
    EnvTimeoutError,
    WorkerError,
    worker_error,
)
from torchwm.spec import VecSpec, check_count, check_timeout, with_env_fn
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import slice_rows, take_rows
from torchwm.vector.messages import (
    Call,
    ControlCommand,
    ErrorReply,
    NeedsReset,
    PickledFunction,
    Reset,
    SetAttr,
    ShareDescription,
)
from torchwm.vector.stepper import Stepper, check_batch_size, check_observation_mode, resolve_spaces
from torchwm.vector.transports.contract import (
    CLOSE_GRACE_SECONDS,
    Batch,
    Deadline,
    PoolSettings,
    StepLost,
    WorkerChoice,
    WorkerGone,
    WorkerGroup,
    WorkerHandle,
    WorkerPayload,
    gym_specs_of,
    poll_wait,
    split_envs,
)
from torchwm.vector.transports.contract import default_num_workers as default_num_workers
from torchwm.vector.transports.local import LocalWorker

DEFAULT_TIMEOUT = 300.0
# Every option a pool backend takes and its default (None: decided from the machine or the spec). A
# backend's group adds its own (`WorkerGroup.OPTIONS`).
POOL_OPTIONS: dict[str, Any] = {
    "num_workers": None,
    "envs_per_worker": None,
    "batch_size": None,
    "timeout": DEFAULT_TIMEOUT,
    "copy": True,
    "restart_on_crash": False,
    "env_fn": None,
    "inline": False,
    "observation_mode": "same",
}


def check_pool_options(
    backend: str,
    num_envs: int,
    options: dict[str, Any],
    transport_options: Sequence[str] = (),
    unit: str = "worker",
) -> PoolSettings:
    """Every pool option checked and defaulted, before anything starts; the options named in
    ``transport_options`` are passed on unchecked (the backend's `WorkerGroup` checks them).

    ``unit`` is what the backend calls a worker in its option names (``"actor"``: ``num_actors``,
    ``envs_per_actor``)."""
    split_names = {"num_workers": f"num_{unit}s", "envs_per_worker": f"envs_per_{unit}"}
    known = [split_names.get(name, name) for name in POOL_OPTIONS] + list(transport_options)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{backend}: unknown backend option(s) {unknown}; expected some of {sorted(known)}")
    num_workers, envs_per_worker = (options.get(name) for name in split_names.values())
    if num_workers is not None:
        num_workers = check_count(f"{backend}: {split_names['num_workers']}", num_workers)
    if envs_per_worker is not None:
        envs_per_worker = check_count(f"{backend}: {split_names['envs_per_worker']}", envs_per_worker)
    flags = {flag: options.get(flag, POOL_OPTIONS[flag]) for flag in ("copy", "restart_on_crash", "inline")}
    if flags["inline"] is None:  # None means the default, as it does for the options that default to None
        flags["inline"] = False
    for flag in flags:
        if not isinstance(flags[flag], bool):
            raise TypeError(
                f"{backend}: {flag} must be True or False (default {POOL_OPTIONS[flag]}), got {flags[flag]!r}"
            )
    return PoolSettings(
        worker_slices=split_envs(num_envs, num_workers, envs_per_worker, backend, unit),
        split_given=num_workers is not None or envs_per_worker is not None,
        batch_size=check_batch_size(options.get("batch_size"), num_envs, f"{backend}: "),
        timeout=check_timeout(options.get("timeout", DEFAULT_TIMEOUT), f"{backend}: timeout"),
        env_fn=options.get("env_fn"),
        observation_mode=check_observation_mode(options.get("observation_mode", "same")),
        transport_options={key: options[key] for key in transport_options if key in options},
        **flags,
    )


def _no_longer(seconds: float | None, than: float | None) -> bool:
    """Whether a wait of ``seconds`` ends no later than one of ``than`` (None: no limit)."""
    return seconds is not None and (than is None or seconds <= than)


class _Forks:
    """How many times this process's line has forked: a pool records it when it starts its workers, so
    that its hot path tells a forked copy from the owner by comparing one int (``os.getpid()`` is a
    system call)."""

    count = 0

    @classmethod
    def after_in_child(cls) -> None:
        cls.count += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_Forks.after_in_child)


def end_workers(handles: list[WorkerHandle]) -> None:
    """Ask every worker to end, then end each within one deadline."""
    for handle in handles:
        handle.stop()
    deadline = Deadline.after(CLOSE_GRACE_SECONDS)
    try:
        for handle in handles:
            handle.close(deadline)
    except BaseException:
        # Interrupted (Ctrl-C) while the workers end on their own (an env's slow close): each is ended now,
        # so that close() never leaves a process it started, interrupted or not.
        now = Deadline.after(0.0)
        for handle in handles:
            try:
                handle.close(now)
            except Exception:  # noqa: BLE001 - the others are still ended; the interruption is raised
                pass
        raise


def shutdown(group: WorkerGroup, handles: list[WorkerHandle], batch: Batch | None, owner: int) -> None:
    """End every worker within a deadline (ask all, then end each), then free the batch and the group.

    Only in process ``owner``, the one that started the workers: a forked copy of the vector env (a
    data loader's worker, an evaluator) that is closed or collected, or that exits, must not end the
    parent's workers nor write to their channels; its own copy is simply dropped.

    Module-level (not a method) so that `weakref.finalize` can call it without keeping the env alive.
    """
    if os.getpid() != owner:
        return
    try:
        end_workers(handles)
    finally:
        try:
            if batch is not None:
                batch.release()
        finally:
            group.close()


class PoolStepper(Stepper):
    """The envs of a `WorkerPool`, split over workers and reached through the backend's `WorkerGroup` and
    `WorkerHandle` (`torchwm.vector.transports.contract`).

    Args:
        spec: what to build.
        pool: the backend's `WorkerPool` class: its ``backend_name``, ``worker_group`` and ``unit``.
        options: the backend options (`WorkerPool`'s), checked here before anything starts.
    """

    def __init__(self, spec: VecSpec, pool: type[WorkerPool], options: dict[str, Any]) -> None:
        self._handles: list[WorkerHandle] = []
        self._finalizer: weakref.finalize | None = None
        # Who owns the workers: recorded once, here. A forked copy of this object is no owner.
        self._owner_pid = os.getpid()
        self._owner_forks = _Forks.count
        backend = self.backend_name = pool.backend_name
        settings = self.settings = check_pool_options(
            backend, spec.num_envs, options, tuple(pool.worker_group.OPTIONS), pool.unit
        )
        spec = with_env_fn(spec, settings.env_fn, backend)
        # The step state first: nothing has started yet.
        super().__init__(spec, batch_size=settings.batch_size, timeout=settings.timeout)
        env_fns = spec_env_fns(spec)
        group = self.group = pool.worker_group(backend, spec, env_fns, settings.transport_options, settings)
        self._finalizer = weakref.finalize(self, shutdown, group, self._handles, None, self._owner_pid)
        try:
            self.worker_slices = group.split(spec, env_fns, settings)
            # How many workers the group chose from measurements, when the user did not say (None: one per
            # core, or the user's split).
            self.worker_choice: WorkerChoice | None = group.worker_choice
            self.num_workers = len(self.worker_slices)
            self.restart_on_crash = settings.restart_on_crash
            self._inline = settings.inline
            self._worker_of = np.concatenate([np.full(len(r), w) for w, r in enumerate(self.worker_slices)])
            self._worker_ids = [np.arange(r.start, r.stop) for r in self.worker_slices]
            gym_specs = gym_specs_of(spec)
            self._payloads = [
                WorkerPayload(w, env_fns[r.start : r.stop], r.start, spec.autoreset, gym_specs)
                for w, r in enumerate(self.worker_slices)
            ]
            self._failure: WorkerError | None = None
            # Idle envs of a restarted worker -> the restart's infos, which their next step returns.
            self._restarted: dict[int, dict] = {}
            self._half_restarted: set[int] = set()  # workers whose restart was interrupted
            # For batch_size < num_envs: the envs in flight that were passed over for too long
            # (`StepState.overdue`): recv waits for those.
            self._overdue: list[int] = []
            self._wanted = 0  # how many ready envs the recv under way returns
            self._handles[:] = [
                LocalWorker(w, envs) if settings.inline and w == 0 else group.worker(w, envs)
                for w, envs in enumerate(self.worker_slices)
            ]
            self._batch: Batch | None = None
            deadline = Deadline.after(settings.timeout)
            for handle in self._handles:
                handle.start(self._payloads[handle.index])
            shares = [self._started(handle, deadline, "starting its envs") for handle in self._handles]
            self.single_observation_space, self.observation_space, self.single_action_space = resolve_spaces(
                pool.__name__,
                settings.observation_mode,
                [space for share in shares for space in share.observation_spaces],
                [space for share in shares for space in share.action_spaces],
            )
            self.metadata = shares[0].metadata
            self.render_mode = shares[0].render_mode
            self._batch = group.create_batch(
                self.single_observation_space, self.single_action_space, self.num_envs, self.num_workers
            )
            self._finalizer.detach()
            self._finalizer = weakref.finalize(
                self, shutdown, group, self._handles, self._batch, self._owner_pid
            )
            self.observations = self._batch.observations
            self.rewards = self._batch.rewards
            self.terminations = self._batch.terminations
            self.truncations = self._batch.truncations
            for handle in self._handles:
                handle.attach(self._batch)
            for handle in self._handles:
                self._answer(handle, deadline, "attaching its buffers")
        except BaseException:
            self._finalizer()
            raise

    # -- stepping: what the vector env calls -----------------------------------------------------

    def send_step(self, ids: np.ndarray, actions: Any) -> None:
        """Hand each involved worker its rows of ``actions``; a busy one is waited for first (a worker runs
        one step at a time)."""
        if _Forks.count != self._owner_forks or self._failure is not None or self._half_restarted:
            self._check_usable()
        try:
            busy = self.state.busy
            whole = ids.size == self.num_envs
            if busy:
                involved = None if whole else set(self._worker_of[ids].tolist())
                self._poll_until(
                    lambda: not busy if involved is None else involved.isdisjoint(busy),
                    Deadline.after(self.timeout),
                    "waiting for busy workers",
                )
            if self._restarted:  # after the wait, which may have restarted a worker
                ids, actions = self._announce_restarts(ids, actions)
                whole = ids.size == self.num_envs
            if whole:
                space = self.single_action_space
                for handle in self._handles:
                    envs = handle.envs
                    handle.send_step(None, slice_rows(space, actions, envs.start, envs.stop))
                self.state.workers_sent(self._worker_ids)
            elif ids.size:
                self._send_some(ids, actions)
        except (WorkerError, EnvTimeoutError):
            raise  # handled where raised: nothing half-done is left
        except BaseException:
            self._abandon_step(ids)
            raise

    def _send_some(self, ids: np.ndarray, actions: Any) -> None:
        """`send_step` of some envs, their workers idle: each involved worker gets its envs' rows."""
        space = self.single_action_space
        workers = self._worker_of[ids]
        for w in np.unique(workers).tolist():
            handle = self._handles[w]
            positions = np.flatnonzero(workers == w)
            # Each worker's envs in ascending order, whatever the caller's: a handle answers with one
            # info per env in that order (the shared block's step mask knows no other), and recv puts the
            # rows back in the caller's order.
            positions = positions[np.argsort(ids[positions])]
            mine = ids[positions]
            handle.send_step((mine - handle.envs.start).tolist(), take_rows(space, actions, positions))
            self.state.worker_sent(w, mine)

    def wait_ready(
        self, candidates: np.ndarray, count: int, timeout: float | None, *, min_ready: int | None = None
    ) -> tuple[np.ndarray, list[dict]]:
        if _Forks.count != self._owner_forks or self._failure is not None:
            self._check_usable()
        state = self.state
        self._wanted = count
        self._overdue = [] if count >= candidates.size else state.overdue(candidates, count)
        try:
            # Every finished worker is taken in first (in _poll_until): envs are then served in the order
            # they finished, and none waits behind envs that finished later. A wait for every env in
            # flight needs every busy worker: only the last one need wake this process.
            fault_deadline = Deadline.after(self.timeout)
            # A finished worker's result is read within the longer of the two deadlines: a recv(timeout=30)
            # after a backend timeout of 2 s reads a result that comes at 5 s.
            reply_deadline = fault_deadline if _no_longer(timeout, self.timeout) else Deadline.after(timeout)
            if min_ready is None:
                self._poll_until(
                    self._enough_ready,
                    fault_deadline if timeout == self.timeout else Deadline.after(timeout),
                    "stepping",
                    need_all=count >= candidates.size,
                    reply_deadline=reply_deadline,
                )
            else:
                try:
                    self._poll_until(
                        self._enough_ready, Deadline.after(timeout), "stepping", reply_deadline=reply_deadline
                    )
                except EnvTimeoutError:
                    if self.closed:  # a step lost for good (StepLost) closed the pool: no caller's deadline
                        raise
                    # The caller's deadline: whatever is ready, once at least min_ready are.
                    self._poll_until(
                        lambda: len(state.ready) >= min_ready or bool(state.errors),
                        fault_deadline,
                        "stepping",
                    )
            if state.errors:
                self._raise_step_error()
            return state.collect(min(count, len(state.ready)))
        except (WorkerError, EnvTimeoutError):
            raise  # a timeout leaves the envs in flight: recv() again to keep waiting
        except BaseException:
            self._abandon_step(None)
            raise

    def _poll_until(
        self,
        satisfied: Callable[[], bool],
        deadline: Deadline,
        doing: str,
        need_all: bool = False,
        reply_deadline: Deadline | None = None,
    ) -> None:
        """Take in finished workers until ``satisfied()``; detects dead workers and the deadline.

        ``reply_deadline``: for reading the result of a worker that finished, when ``deadline`` is a
        caller's own (``recv(timeout=)``) rather than the fault timeout: a finished worker's result is
        taken in whole, never cut off (and lost) by a deadline that passed while it was read."""
        finish_deadline = reply_deadline or deadline
        handles = self._handles
        busy = self.state.busy
        slept = False
        while True:
            progressed = False
            for w in list(busy):
                if handles[w].poll():
                    self._finish(w, finish_deadline)
                    progressed = True
            if satisfied():
                return
            if progressed:
                slept = False
                continue
            if slept:  # checked after a sleep only: a step that finishes while polled costs no check
                for w in list(busy):
                    if not handles[w].alive:
                        self.state.worker_gone(w)
                        self._on_crash(handles[w], handles[w].gone(), doing, finish_deadline)
                if satisfied():
                    return
            if deadline.expired:
                waiting = sorted(int(i) for ids in busy.values() if ids is not None for i in ids)
                raise EnvTimeoutError(
                    f"{self.backend_name}: envs {waiting} did not finish their step within "
                    f"{deadline.seconds:g} s; recv(timeout=...) again to keep waiting, or close() to stop "
                    f"the workers"
                )
            if not busy:
                raise RuntimeError(f"{self.backend_name}: waiting while {doing}, but no worker is busy")
            slept = self._sleep(list(busy), deadline.remaining(), need_all)

    def _sleep(self, workers: list[int], timeout: float | None, need_all: bool) -> bool:
        """Sleep until one of ``workers`` may have finished (`WorkerGroup.wait`); whether it slept."""
        handles = [self._handles[w] for w in workers]
        if self._inline and 0 in workers:  # the parent's own share steps when it is polled
            return poll_wait(handles, timeout)
        return self.group.wait(handles, timeout, need_all)

    def _finish(self, w: int, deadline: Deadline) -> None:
        """Worker ``w`` finished its step: its envs are ready (or its error is raised)."""
        ids = self.state.worker_finished(w)
        handle = self._handles[w]
        try:
            infos = handle.finish_step(deadline)
        except WorkerGone as gone:
            self._on_crash(
                handle if gone.worker is None else self._handles[gone.worker],
                gone,
                "stepping",
                deadline,
            )
            return
        except StepLost as lost:
            error = self._timeout(handle, deadline, "stepping", lost)
            self.closed = True  # the vector env closes on seeing it
            self.close()
            raise error from None
        except TimeoutError:
            self.state.worker_resumed(w, ids)
            raise self._timeout(handle, deadline, "stepping") from None
        if ids is None:
            return  # an abandoned step (see _abandon_step): its results are dropped
        if isinstance(infos, ErrorReply):
            # The env that raised has no state its rows show (for the worker's own error: its envs of this
            # step). The error is a result like rows: the recv that collects it raises it.
            self.state.mark_for_reset(ids if infos.env is None else np.array([handle.envs.start + infos.env]))
            self.state.step_failed(ids, self._remote_error(handle, infos, "stepping"))
            return
        self.state.arrived(ids, infos)

    def _enough_ready(self) -> bool:
        """Whether recv can return: the envs it wants ready (``_wanted`` of them), and every overdue env
        among them; or an env's error, which it raises."""
        ready = self.state.ready
        overdue = self._overdue
        return (len(ready) >= self._wanted and (not overdue or all(env in ready for env in overdue))) or bool(
            self.state.errors
        )

    def _raise_step_error(self) -> NoReturn:
        """Raise the first env error that came back: it fails its own send only. That send's other envs
        are no longer in flight (their steps ran; a worker still running one is not waited for, its result
        is dropped when it comes), and the env that raised must be reset; envs of other sends stay in
        flight with their results."""
        error, abandoned = self.state.take_error()
        for w in abandoned:
            self._handles[w].abandon_step()
        raise error

    def _abandon_step(self, sending: np.ndarray | None) -> None:
        """A step was interrupted midway (Ctrl-C, or an unexpected error in the parent): forget it.

        Its envs (those in flight, and ``sending``) must be reset; the workers are not waited for, so
        Ctrl-C returns at once, and their results are dropped when they come.
        """
        for w in self.state.abandon(sending):
            self._handles[w].abandon_step()

    # -- errors ----------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if _Forks.count != self._owner_forks:
            self._refuse_in_forked_copy()
        if self._failure is not None:
            raise WorkerError(
                f"{self.backend_name}: this vector env lost a worker earlier ({self._failure.args[0]})",
                worker_index=self._failure.worker_index,
            )
        if self._half_restarted:
            self._redo_restarts()

    def _refuse_in_forked_copy(self) -> NoReturn:
        """This object was copied into a forked process: the workers are its parent's. The copy says it is
        closed (and is: closing it or dropping it touches nothing of the parent's)."""
        self.closed = True
        raise ClosedEnvironmentError(
            f"{self.backend_name}: this vector env's workers belong to process {self._owner_pid}, and this "
            f"is a forked copy of it in process {os.getpid()}: the copy is closed and cannot step them. Make "
            f"a new vector env in this process"
        )

    def _fail_for_good(self, failure: WorkerError) -> None:
        """Nothing more can work (a dead worker, a cut channel): every later call raises ``failure``'s
        message."""
        # A copy without the traceback: its frames hold views of the batch, which close() must free.
        self._failure = WorkerError(failure.args[0], worker_index=failure.worker_index)
        self.state.fail()

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

    # -- restarts --------------------------------------------------------------------------------

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
        handle.send(Reset(local_ids, [None] * len(local_ids), None))
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

    # -- control commands (reset, call, set_attr) ------------------------------------------------

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

    def reset_envs(self, ids: np.ndarray, seeds: list[int | None], options: dict | None) -> list[dict]:
        positions: dict[int, list[int]] = {}
        for position, env in enumerate(ids.tolist()):
            positions.setdefault(int(self._worker_of[env]), []).append(position)
        commands: dict[int, ControlCommand] = {}
        for w, where in positions.items():
            start = self.worker_slices[w].start
            commands[w] = Reset([int(ids[p]) - start for p in where], [seeds[p] for p in where], options)
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
        positions = self._by_worker(ids)
        # A function goes by value: a lambda, a closure or a function of __main__ reaches the workers.
        sent = PickledFunction.of(name) if callable(name) else name
        replies = self._broadcast(
            {w: Call(sent, args, kwargs, self._local_ids(w, ids, where)) for w, where in positions.items()},
            f"calling {getattr(name, '__name__', name)!r}",
        )
        values: list[Any] = [None] * len(ids)
        for w, where in positions.items():
            for p, value in zip(where, replies[w], strict=True):
                values[p] = value
        return values

    def call_each(self, fn: Callable, per_env: list[Any], ids: list[int]) -> list[Any]:
        """`call` of function ``fn`` with one more argument for each env (``per_env``, in the order of
        ``ids``): each worker gets its envs' arguments in one message."""
        positions = self._by_worker(ids)
        sent = PickledFunction.of(fn)
        replies = self._broadcast(
            {
                w: Call(sent, (), {}, self._local_ids(w, ids, where), [per_env[p] for p in where])
                for w, where in positions.items()
            },
            f"calling {getattr(fn, '__name__', fn)!r}",
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

    def interrupt(self) -> bool:
        # Another thread's call ends with its workers (its waits then raise ClosedEnvironmentError), and the
        # buffers it reads are freed once it has left. Not in a forked copy: the workers are the owner's.
        self.restart_on_crash = False  # a worker this close ends is not to be replaced
        if os.getpid() != self._owner_pid:
            return False
        end_workers(self._handles)
        return True

    def close(self) -> None:
        self.restart_on_crash = False
        # The batch arrays may be views of memory the handle frees: dropped first, so that close() frees it
        # at once (views handed out with copy=False keep it until they go).
        for name in ("observations", "rewards", "terminations", "truncations"):
            self.__dict__.pop(name, None)
        if self._finalizer is not None:
            self._finalizer()


class WorkerPool(VectorEnv):
    """Envs split over workers, each reached through a transport. Subclassed by ``subproc`` and ``shmem``.

    Args:
        spec: what to build (each worker builds its envs with `torchwm.factory.build_env`, or with
            ``spec.env_fns``).
        num_workers: workers (default: the cores this process may use, at most num_envs; fewer when the
            transport measures that fewer are faster: `torchwm.vector.transports.worker_count`,
            ``worker_choice``).
        envs_per_worker: envs each worker steps (the last worker takes the rest); give this or num_workers.
        batch_size: `recv` returns ``batch_size`` envs among those ready, the ones ready first (default:
            all in flight).
        timeout: seconds a wait on workers may take before `EnvTimeoutError` (default 300; None or
            ``math.inf``: no limit). A dead worker is detected within a second whatever the timeout.
        copy: return copies of the observation batch (default) or a view the next call overwrites.
        restart_on_crash: restart a worker that died, with its envs; their episodes in flight end
            truncated with ``infos["worker_restarted"]``.
        env_fn: a no-argument callable that returns one env, or a list of one such callable per env;
            kept for callers that pass it as an option, it lands in ``vec.spec.env_fns`` (the place
            `torchwm.make_vec_from_fns` puts the factories).
        inline: the parent steps worker 0's envs itself (``worker_slices[0]``, ``worker_pids[0]`` is
            None; `torchwm.vector.transports.local.LocalWorker`) and starts ``num_workers - 1`` workers
            (default False). Those envs then have none of a worker's protections: no timeout, and a crash or
            ``os._exit`` in them ends the program. Their step runs in `recv`, while the other workers
            step theirs; ``restart_on_crash`` concerns the other workers only.
        observation_mode: Gymnasium's option (see `torchwm.vector.stepper.resolve_spaces`).
        **transport options: see the transport (``context`` for the process transports).
    """

    backend_name = "pool"
    worker_group: type[WorkerGroup]  # the backend's (`torchwm.vector.transports.contract`)
    unit = "worker"  # what the backend calls a worker in its option names (num_workers, envs_per_worker)

    _stepper: PoolStepper

    def __init__(self, spec: VecSpec, **options: Any) -> None:
        stepper = PoolStepper(spec, type(self), options)
        super().__init__(stepper, copy=stepper.settings.copy)

    @property
    def worker_slices(self) -> list[range]:
        """The envs of each worker."""
        return self._stepper.worker_slices

    @property
    def num_workers(self) -> int:
        return self._stepper.num_workers

    @property
    def worker_choice(self) -> WorkerChoice | None:
        """How many workers the backend chose from measurements, and why (None: the user's split, or one
        worker per core)."""
        return self._stepper.worker_choice

    @property
    def restart_on_crash(self) -> bool:
        return self._stepper.restart_on_crash

    @property
    def worker_pids(self) -> list[int | None]:
        """The process id of each worker (tests and fault injection use it); None for the parent's share."""
        return [handle.pid for handle in self._stepper._handles]

    def __repr__(self) -> str:
        settings = f", {self._stepper.group!r}" if repr(self._stepper.group) else ""
        return (
            f"{type(self).__name__}({self.spec.id}, num_envs={self.num_envs}, "
            f"num_workers={self.num_workers}{settings})"
        )

    def __copy__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be copied: it owns worker processes, which a copy would share "
            f"(closing or dropping either would stop the other's workers). Pass the vector env itself, or "
            f"make a second one with torchwm.make_vec"
        )

    def __deepcopy__(self, memo: dict) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be deep-copied: its envs live in worker processes. Make a second "
            f"vector env with torchwm.make_vec (the same spec, vec.spec, builds the same envs)"
        )
