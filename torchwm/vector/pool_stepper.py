"""The stepping loop of a worker pool: send a step to each involved worker, wait, take the results in.

`PoolStepper` is the `torchwm.vector.stepper.Stepper` of every `torchwm.vector.pool.WorkerPool`. Its
envs are split over workers, each reached through the backend's `WorkerGroup` and a `WorkerHandle` per
worker (`torchwm.vector.transports.contract`). A step is one loop, send, wait, take in::

    VectorEnv.send ──> send_step ──────────> WorkerHandle.send_step ──> the worker steps its envs,
    (base.py)          each involved worker   (the transport)            rows written into the batch
                       gets its rows                                           │
                       (StepState: busy)                                       v
    VectorEnv.recv <── wait_ready <──────── _finish(w, reply) <────── WorkerHandle.poll, finish_step
    (rows in the       poll every busy       rows   -> StepState.arrived (ready)
     caller's order)   worker, sleep on      a fault (ErrorReply, WorkerGone, TimeoutError)
                       the group until          -> PoolFaults.outcome: one outcome, acted on here
                       enough envs are             (_take_fault): an env's error kept for the recv
                       ready (collect)             that collects it, a restart's envs ready, or raised

An env's error is raised by the recv that collects its envs, never by another call: other sends keep
their rows, and no error path waits out another worker's step. A death fails the vector env at once (all
its envs lost their workers' state) unless the worker is restarted.

The stepper holds its parts: the faults and restarts (`torchwm.vector.pool_faults.PoolFaults`, which
turns every fault into one outcome), the control commands reset/call/set_attr and the states' clone and
restore (`torchwm.vector.pool_commands.PoolCommands`); the options are `torchwm.vector.pool_options`.
Closing ends every worker within a deadline (also at garbage collection, `weakref.finalize`).
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np

from torchwm.building import spec_env_fns
from torchwm.env_state import EnvState
from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError, WorkerError, WorkerGone
from torchwm.spec import VecSpec, with_env_fn
from torchwm.vector.batching import slice_rows, take_rows
from torchwm.vector.episode_seeds import EpisodeSeedBook
from torchwm.vector.messages import ErrorReply
from torchwm.vector.pool_commands import PoolCommands
from torchwm.vector.pool_faults import Dropped, PoolFaults, Replaced, StepFailed
from torchwm.vector.pool_options import check_pool_options
from torchwm.vector.stepper import Stepper, resolve_spaces
from torchwm.vector.transports.contract import (
    Batch,
    Deadline,
    WorkerChoice,
    WorkerHandle,
    WorkerPayload,
    end_workers,
    gym_specs_of,
    poll_wait,
    shutdown,
)
from torchwm.vector.transports.local import LocalWorker

# What a worker's step comes back as (`PoolStepper._finish`): its envs' infos, an env's error, a death, or
# a reply not read by its deadline (`StepLost`: one that cannot be waited for again).
Reply = list[dict] | ErrorReply | WorkerGone | TimeoutError


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


class PoolStepper(Stepper):
    """The envs of a `WorkerPool`, split over workers and reached through the backend's `WorkerGroup` and
    `WorkerHandle` (`torchwm.vector.transports.contract`).

    Args:
        spec: what to build.
        pool: the backend's `WorkerPool` class: its ``backend_name``, ``worker_group`` and ``unit``.
        options: the backend options (`WorkerPool`'s), checked here before anything starts.
    """

    def __init__(self, spec: VecSpec, pool: Any, options: dict[str, Any]) -> None:
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
        self.episode_seeds = EpisodeSeedBook(spec.num_envs)
        env_fns = spec_env_fns(spec)
        group = self.group = pool.worker_group(backend, spec, env_fns, settings.transport_options, settings)
        self._finalizer = weakref.finalize(self, shutdown, group, self._handles, None, self._owner_pid)
        try:
            self.worker_slices = group.split(spec, env_fns, settings)
            # How many workers the group chose from measurements, when the user did not say (None: one per
            # core, or the user's split).
            self.worker_choice: WorkerChoice | None = group.worker_choice
            self.num_workers = len(self.worker_slices)
            self._inline = settings.inline
            self._worker_of = np.concatenate([np.full(len(r), w) for w, r in enumerate(self.worker_slices)])
            self._worker_ids = [np.arange(r.start, r.stop) for r in self.worker_slices]
            gym_specs = gym_specs_of(spec)
            self._payloads = [
                WorkerPayload(w, env_fns[r.start : r.stop], r.start, spec.autoreset, gym_specs)
                for w, r in enumerate(self.worker_slices)
            ]
            self.faults = PoolFaults(
                backend,
                self.state,
                group,
                self._handles,
                self._payloads,
                settings.restart_on_crash,
                spec.autoreset,
                self.episode_seeds,
            )
            # The faults' queue of restarts to announce (the same dict): read on every send.
            self._restarted = self.faults.restarted
            self.commands = PoolCommands(
                self._handles,
                self.worker_slices,
                self._worker_of,
                self.state,
                self.faults,
                self._poll_until,
                self.timeout,
            )
            # For batch_size < num_envs: the envs in flight that were passed over for too long
            # (`StepState.overdue`): recv waits for those.
            self._overdue: list[int] = []
            self._wanted = 0  # how many ready envs the recv under way returns
            self._handles[:] = [
                LocalWorker(w, envs) if settings.inline and w == 0 else group.worker(w, envs)
                for w, envs in enumerate(self.worker_slices)
            ]
            for handle in self._handles:
                handle.reply_timeout = self.timeout
            self._batch: Batch | None = None
            deadline = Deadline.after(settings.timeout)
            for handle in self._handles:
                handle.start(self._payloads[handle.index])
            shares = [self.faults.started(handle, deadline, "starting its envs") for handle in self._handles]
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
            self.faults.batch = self._batch
            self.observations = self._batch.observations
            self.rewards = self._batch.rewards
            self.terminations = self._batch.terminations
            self.truncations = self._batch.truncations
            for handle in self._handles:
                handle.attach(self._batch)
            for handle in self._handles:
                self.faults.answer(handle, deadline, "attaching its buffers")
        except BaseException:
            self._finalizer()
            raise

    @property  # type: ignore[override]
    def timeout(self) -> float | None:
        return self._timeout_seconds

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        # The handles' too: a handle the pool gives no deadline (`finish_step(None)`) waits this long.
        self._timeout_seconds = value
        for handle in self._handles:
            handle.reply_timeout = value
        commands = self.__dict__.get("commands")  # None while the constructor sets the first value
        if commands is not None:
            commands.timeout = value

    @property
    def restart_on_crash(self) -> bool:
        return self.faults.restart_on_crash

    # -- stepping: what the vector env calls -----------------------------------------------------

    def send_step(self, ids: np.ndarray, actions: Any) -> None:
        """Hand each involved worker its rows of ``actions``; a busy one is waited for first (a worker runs
        one step at a time)."""
        if _Forks.count != self._owner_forks or self.faults.unusable:
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
                ids, actions, announced, infos = self.faults.announce_restarts(ids, actions)
                self.state.arrived(announced, infos)
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
        if _Forks.count != self._owner_forks or self.faults.unusable:
            self._check_usable()
        state = self.state
        self._wanted = count
        self._overdue = [] if count >= candidates.size else state.overdue(candidates, count)
        try:
            if min_ready is None:
                # A steady step whose workers are done when recv looks (an agent that computes between send
                # and recv) is taken in at once, with no deadline made: there is nothing to wait for.
                handles = self._handles
                for w in list(state.busy):
                    if handles[w].poll():
                        self._finish(w, None)
                if self._enough_ready() and not state.errors:
                    return state.collect(min(count, len(state.ready)))
            # Every finished worker is taken in first (in _poll_until): envs are then served in the order
            # they finished, and none waits behind envs that finished later. A wait for every env in
            # flight needs every busy worker: only the last one need wake this process.
            fault_deadline = Deadline.after(self.timeout)
            # A finished worker's result is read within the longer of the two deadlines: a recv(timeout=30)
            # after a backend timeout of 2 s reads a result that comes at 5 s.
            reply_deadline = (
                fault_deadline
                if timeout == self.timeout or _no_longer(timeout, self.timeout)
                else Deadline.after(timeout)
            )
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
                        self._finish(w, finish_deadline, handles[w].gone(), doing)
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

    def _finish(
        self, w: int, deadline: Deadline | None, reply: Reply | None = None, doing: str = "stepping"
    ) -> None:
        """Worker ``w``'s step is over: its reply, read as a value, becomes its envs' answer. Rows (the infos
        of its envs) make them ready; anything else (an env's error, a death, a late reply) is a fault, and
        the faults object says what it comes to (`_take_fault`). ``reply``: a death the pool found itself
        (`WorkerGone`), with what it was ``doing``."""
        if reply is None:
            try:
                reply = self._handles[w].finish_step(deadline)
            except (WorkerGone, TimeoutError) as fault:
                reply = fault
        if isinstance(reply, (ErrorReply, WorkerGone, TimeoutError)):
            # A fault met before any wait gets the pool's deadline: the restart's, and the message's.
            self._take_fault(w, reply, deadline or Deadline.after(self.timeout), doing)
            return
        ids = self.state.worker_finished(w)
        if ids is not None:  # else an abandoned step (see _abandon_step): its results are dropped
            self.state.arrived(ids, reply)

    def _take_fault(
        self, w: int, fault: ErrorReply | WorkerGone | TimeoutError, deadline: Deadline, doing: str
    ) -> None:
        """Act on what worker ``w``'s fault comes to (`PoolFaults.outcome`, the one place that decides)."""
        state = self.state
        ids = state.worker_gone(w)  # not busy any more; its envs, or None for an abandoned step
        outcome = self.faults.outcome(self._handles[w], ids, fault, deadline, doing)
        if isinstance(outcome, StepFailed):
            # The error is a result like rows: the recv that collects those envs raises it.
            state.mark_for_reset(outcome.must_reset)
            state.step_failed(outcome.ids, outcome.error)
        elif isinstance(outcome, Replaced):
            state.arrived(outcome.ids, outcome.infos)
        elif not isinstance(outcome, Dropped):
            if outcome.resume:
                state.worker_resumed(w, ids)  # still to come: the next recv waits for it
            if outcome.close:
                self.closed = True  # the vector env closes on seeing it
                self.close()
            raise outcome.error from None

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

    def _check_usable(self) -> None:
        if _Forks.count != self._owner_forks:
            self._refuse_in_forked_copy()
        if self.faults.unusable:
            self.faults.check_usable(self.timeout)

    def _refuse_in_forked_copy(self) -> NoReturn:
        """This object was copied into a forked process: the workers are its parent's. The copy says it is
        closed (and is: closing it or dropping it touches nothing of the parent's)."""
        self.closed = True
        raise ClosedEnvironmentError(
            f"{self.backend_name}: this vector env's workers belong to process {self._owner_pid}, and this "
            f"is a forked copy of it in process {os.getpid()}: the copy is closed and cannot step them. Make "
            f"a new vector env in this process"
        )

    def interrupt(self) -> bool:
        # Another thread's call ends with its workers (its waits then raise ClosedEnvironmentError), and the
        # buffers it reads are freed once it has left. Not in a forked copy: the workers are the owner's.
        self.faults.restart_on_crash = False  # a worker this close ends is not to be replaced
        if os.getpid() != self._owner_pid:
            return False
        end_workers(self._handles)
        return True

    # -- control commands: the commands object's, once the vector env is usable -----------------

    def reset_envs(
        self, ids: np.ndarray, seeds: list[int | None], options: dict | None, streams: list | None = None
    ) -> list[dict]:
        self._check_usable()
        return self.commands.reset(ids, seeds, options, streams)

    def call(self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int]) -> list[Any]:
        self._check_usable()
        return self.commands.call(name, args, kwargs, ids)

    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        self._check_usable()
        self.commands.set_attr(name, values, ids)

    def clone_states(self, ids: np.ndarray) -> list[EnvState]:
        self._check_usable()
        return self.commands.clone_states(ids)

    def restore_states(self, ids: np.ndarray, states: list[EnvState]) -> list[dict]:
        self._check_usable()
        return self.commands.restore_states(ids, states)

    def close(self) -> None:
        if "faults" in self.__dict__:
            self.faults.restart_on_crash = False
        # The batch arrays may be views of memory the handle frees: dropped first, so that close() frees it
        # at once (views handed out with copy=False keep it until they go).
        for name in ("observations", "rewards", "terminations", "truncations"):
            self.__dict__.pop(name, None)
        if self._finalizer is not None:
            self._finalizer()
