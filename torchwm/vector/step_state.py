"""Where each env of a vector env is in its step cycle, and each worker in its step: the rules in one place.

An env is in one of four states:

- *idle*: it may be sent a step (once reset) or be reset;
- *in flight*: it was sent a step and `recv` has not returned it;
- *ready*: its result came in (its rows are in the batch, its infos in ``ready``) and waits for a
  `recv` that asks for it; it still counts as in flight for the caller;
- *must reset*: its last step raised or was interrupted (Ctrl-C), so its state is not what its rows
  say; it may not step again until a reset.

A worker (of a backend that spreads its envs over workers) is *idle*, *busy* with a step whose results
will come back (``busy[w]`` holds its envs), or busy with an *abandoned* step (``busy[w]`` is None: a step
interrupted or failed, whose results are dropped when they come).

`StepState` holds both and moves them only through its named transitions: `sent`, `worker_sent`,
`worker_finished`, `step_failed`, `take_error`, `collect` (with the fairness rule), `received`,
`was_reset`, `mark_for_reset`, `abandon` and `fail`; its ``check_...`` methods say, with Gymnasium's
exception types, why a call is refused. It does no I/O and starts nothing, so a backend's
`torchwm.vector.stepper.Stepper` builds it before it starts any env or worker, and it is tested on its
own, without any process (tests/vector/test_step_state.py). The vector env and its stepper read and
move it through the same methods.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from torchwm.errors import AlreadyPendingCallError, NoAsyncCallError, mark_dropped


class StepState:
    """The step state of one vector env's ``num_envs`` envs (and of its workers, for a worker pool).

    Args:
        num_envs: envs of the vector env.
        batch_size: how many envs a `recv` returns at the least (``num_envs``: every env in flight). Below
            ``num_envs``, `collect` serves the envs sent longest ago first and `overdue` names the envs
            passed over too long, so that none starves.
    """

    def __init__(self, num_envs: int, batch_size: int) -> None:
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.in_flight = np.zeros(num_envs, dtype=bool)
        # Ready envs: env id -> infos, their rows already in the batch, in the order they came.
        self.ready: dict[int, dict] = {}
        self.must_reset = np.zeros(num_envs, dtype=bool)
        self.any_must_reset = False  # must_reset.any(), kept so that a step costs no scan
        self.ever_reset = np.zeros(num_envs, dtype=bool)
        self.all_reset = False  # every env was reset at least once (then it stays so)
        # The order recv returns rows in: each env's place in the sequence of envs sent (the order of
        # env_ids within a send, earlier sends first). Not kept for a send of every env in env order
        # while batch_size is num_envs: its recv returns the whole batch, in env order.
        self.send_rank = np.zeros(num_envs, dtype=np.int64)
        self.sends = 0
        # A send of every env in env order ranks its envs lazily (`_rank_whole_send`): the place in the
        # sequence its first env took, until a partial recv or a later send needs the ranks.
        self._whole_send_rank: int | None = None
        # Which send each env in flight belongs to (a number per send): an env's error fails its own send,
        # never another's (`fail_send`).
        self.send_of = np.zeros(num_envs, dtype=np.int64)
        self.send_number = 0
        # Errors of steps that finished with an env's error, not yet raised: (send, error), raised by the
        # recv that collects them (`take_error`), in the order they came.
        self.errors: list[tuple[int, BaseException]] = []
        self.in_env_order = True  # the envs in flight were sent by one send of every env, in env order
        # With batch_size < num_envs: the number of recvs begun when each env was last sent (fairness).
        self.recvs = 0
        self.sent_at = np.zeros(num_envs, dtype=np.int64)
        # worker -> global ids of its step (None: an abandoned step, still running); idle workers absent.
        self.busy: dict[int, np.ndarray | None] = {}

    # -- checks: why a call is refused -------------------------------------------------------------

    def pending(self) -> str | None:
        """``"step"`` if an env is in flight, else None."""
        # np.count_nonzero, here and below: checked at every send and recv, and on so few flags the Python
        # wrapper that ndarray.any goes through first costs more than the count itself.
        return "step" if np.count_nonzero(self.in_flight) else None

    def check_can_send(self, ids: np.ndarray) -> None:
        """AlreadyPendingCallError for envs of ``ids`` in flight; `gymnasium.error.ResetNeeded` for envs
        never reset, or whose last step raised or was interrupted."""
        # Checked on flags first: a whole-batch step, the common case, then costs no fancy indexing.
        if np.count_nonzero(self.in_flight):
            busy = ids[self.in_flight[ids]]
            if busy.size:
                raise AlreadyPendingCallError(
                    f"Calling `step_async` while waiting for a pending call to `step` to complete: envs "
                    f"{busy.tolist()} already have an action in flight; recv() them before sending again",
                    "step",
                )
        if not self.all_reset:
            not_reset = ids[~self.ever_reset[ids]]
            if not_reset.size:
                raise gym.error.ResetNeeded(
                    f"envs {not_reset.tolist()} were never reset; call reset() before step()"
                )
        if self.any_must_reset and self.must_reset[ids].any():
            raise gym.error.ResetNeeded(
                f"envs {ids[self.must_reset[ids]].tolist()} must be reset before they step again (reset(), "
                f"or reset(env_ids=[...])): their last step raised or was interrupted (Ctrl-C), so their "
                f"state is not what the last results said"
            )

    def check_can_reset(self, ids: np.ndarray) -> None:
        """AlreadyPendingCallError if one of envs ``ids`` is in flight (envs not in flight may be reset while
        others step; a backend that resets only with nothing in flight checks that itself)."""
        if np.count_nonzero(self.in_flight):
            busy = ids[self.in_flight[ids]]
            if busy.size:
                raise AlreadyPendingCallError(
                    f"Calling `reset` while waiting for a pending call to `step` to complete: envs "
                    f"{busy.tolist()} have an action in flight; recv() them first (envs not in flight can be "
                    f"reset meanwhile)",
                    "step",
                )

    def check_not_ended(self, ids: np.ndarray, terminations: np.ndarray, truncations: np.ndarray) -> None:
        """Under autoreset mode 'disabled' (the caller's to know), a ValueError if an env of ``ids`` ended its
        episode (its row of the batch's ``terminations``/``truncations``) and was not reset since."""
        ended = ids[terminations[ids] | truncations[ids]]
        if ended.size:
            raise ValueError(
                f"envs {ended.tolist()} ended their episode and autoreset_mode is 'disabled': reset them "
                f"first, e.g. reset(options={{'reset_mask': mask}})"
            )

    def recv_started(self) -> np.ndarray:
        """A recv begins: the envs in flight, or NoAsyncCallError (Gymnasium's words) if none is."""
        candidates = np.flatnonzero(self.in_flight)
        if not candidates.size:
            self.check_can_recv()
        self.recvs += 1
        return candidates

    def check_can_recv(self) -> None:
        """NoAsyncCallError (Gymnasium's words) if no env is in flight."""
        if not np.count_nonzero(self.in_flight):
            raise NoAsyncCallError(
                "Calling `step_wait` without any prior call to `step_async`. (recv() with no action in "
                "flight; call send() first.)",
                "step",
            )

    # -- transitions -------------------------------------------------------------------------------

    def sent(self, ids: np.ndarray, ranked: np.ndarray | None, in_env_order: bool) -> None:
        """Envs ``ids`` were sent a step. ``ranked``: the same envs in the caller's order, whose rows recv
        returns in that order (None for one send of every env in env order, returned as a batch)."""
        self.in_flight[ids] = True
        self.in_env_order = in_env_order
        self.send_number += 1
        if ranked is None:
            self.send_of.fill(self.send_number)
            self._whole_send_rank = self.sends
            self.sends += self.num_envs
        else:
            self.send_of[ids] = self.send_number
            self._rank_whole_send()
            self.send_rank[ranked] = np.arange(self.sends, self.sends + ranked.size)
            self.sends += ranked.size
        if self.batch_size < self.num_envs:  # only batches of fewer envs choose (see collect)
            self.sent_at[ids] = self.recvs

    def _rank_whole_send(self) -> None:
        # A send of every env took ranks whole_send_rank.. in env order; written out once needed (before
        # any of its envs can be sent again, since that needs a recv, which ranks them first).
        if self._whole_send_rank is not None:
            self.send_rank[:] = np.arange(self._whole_send_rank, self._whole_send_rank + self.num_envs)
            self._whole_send_rank = None

    def rank(self, ids: np.ndarray) -> np.ndarray:
        """The place of envs ``ids`` in the sequence of envs sent: recv returns rows in this order."""
        self._rank_whole_send()
        return self.send_rank[ids]

    def batch_sent(self, ids: np.ndarray) -> None:
        """A backend that steps one batch at a time (``ale-native``) sent envs ``ids``: in flight, and
        returned together by the next recv (no ranks, no fairness)."""
        self.in_flight[ids] = True

    def batch_received(self) -> None:
        """That backend's recv returned its batch: nothing in flight."""
        self.in_flight[:] = False

    def worker_sent(self, worker: int, ids: np.ndarray) -> None:
        """Worker ``worker`` was sent the step of envs ``ids``: busy."""
        self.busy[worker] = ids

    def workers_sent(self, worker_ids: list[np.ndarray]) -> None:
        """Every worker ``w`` was sent the step of its envs ``worker_ids[w]``: one call for a whole batch."""
        self.busy.update(enumerate(worker_ids))

    def worker_resumed(self, worker: int, ids: np.ndarray | None) -> None:
        """Worker ``worker``'s step, taken as finished, is still to come (its reply was not read whole
        within its deadline): busy again, so that the next recv waits for it."""
        self.busy[worker] = ids

    def worker_gone(self, worker: int) -> np.ndarray | None:
        """Worker ``worker`` died or is replaced: not busy any more (its envs' results will not come).
        Returns the envs of its step, if it had one."""
        return self.busy.pop(worker, None)

    def worker_finished(self, worker: int) -> np.ndarray | None:
        """Worker ``worker``'s step finished: idle again. Returns its envs, whose results the caller hands to
        `arrived`, or None for an abandoned step (its results are dropped)."""
        return self.busy.pop(worker)

    def arrived(self, ids: list[int] | np.ndarray, infos: list[dict]) -> None:
        """The results of envs ``ids`` came in (their rows are in the batch): ready."""
        self.ready.update(zip(ids.tolist() if isinstance(ids, np.ndarray) else ids, infos))

    def step_failed(self, ids: np.ndarray, error: BaseException) -> None:
        """A worker's step of envs ``ids`` ended with an env's error: kept for the recv that collects it
        (`take_error`); other envs' results, of this send or another, are not touched now."""
        self.errors.append((int(self.send_of[ids[0]]), error))

    def take_error(self) -> tuple[BaseException, list[int]]:
        """The first error kept by `step_failed`, for the recv that raises it. The envs of its send are no
        longer in flight (their results, ready or to come, are dropped: that recv collected them); envs of
        other sends stay in flight; the error's ``dropped_env_ids`` names the envs whose results it dropped
        (`torchwm.errors.mark_dropped`). Returns the error and the busy workers whose steps are now
        abandoned."""
        send, error = self.errors.pop(0)
        mine = self.in_flight & (self.send_of == send)
        self.in_flight[mine] = False
        dropped = np.flatnonzero(mine).tolist()
        for env in dropped:
            self.ready.pop(env, None)
        mark_dropped(error, dropped)
        abandoned = [
            w for w, ids in self.busy.items() if ids is not None and ids.size and self.send_of[ids[0]] == send
        ]
        for w in abandoned:
            self.busy[w] = None
        return error, abandoned

    def collect(self, count: int) -> tuple[np.ndarray, list[dict]]:
        """``count`` ready envs and their infos, no longer ready: the envs sent longest ago first (in the
        order they came among envs sent together), so that with ``batch_size`` every env has its turn."""
        ready = self.ready
        if count == len(ready):  # all of them: no per-env pops
            ids, infos = np.fromiter(ready, np.int64, count), list(ready.values())
            ready.clear()
            return ids, infos
        chosen = sorted(ready, key=self.sent_at.__getitem__)[:count]  # stable: arrival order kept
        return np.asarray(chosen, dtype=np.int64), [ready.pop(i) for i in chosen]

    def received(self, ids: np.ndarray | slice) -> None:
        """`recv` returned envs ``ids``: idle."""
        self.in_flight[ids] = False

    def overdue(self, candidates: np.ndarray, count: int) -> list[int]:
        """The envs in flight sent two rounds of ``count`` envs ago or more (empty when every env in
        flight is waited for anyway): a recv waits for those too.

        With ``batch_size``, recv returns envs that are ready; a worker that the OS runs less than the
        others (more processes than cores) would then have its envs passed over again and again while
        the others cycle. Waiting for envs this overdue bounds how long any env waits for its turn.
        """
        if count >= candidates.size:
            return []
        patience = 2 * -(-self.num_envs // count)
        return candidates[self.sent_at[candidates] <= self.recvs - patience].tolist()

    def was_reset(self, ids: np.ndarray) -> None:
        """Envs ``ids`` were reset: idle, may step, no result of theirs waiting."""
        self.ever_reset[ids] = True
        self.all_reset = self.all_reset or bool(self.ever_reset.all())
        if self.ready:
            for env in ids.tolist():
                self.ready.pop(env, None)
        if self.any_must_reset:
            self.must_reset[ids] = False
            self.any_must_reset = bool(self.must_reset.any())

    def mark_for_reset(self, envs: np.ndarray) -> None:
        """Envs ``envs`` (ids or a mask) moved on without their rows reaching the user: must reset."""
        self.must_reset[envs] = True
        self.any_must_reset = bool(self.must_reset.any())

    def abandon(self, sending: np.ndarray | None = None) -> list[int]:
        """A step was interrupted midway (Ctrl-C, an unexpected error in the parent): the envs in flight,
        and ``sending``, must reset; nothing is in flight or ready. Returns the workers whose steps are
        now abandoned (busy still, their results to be dropped)."""
        envs = self.in_flight.copy()
        if sending is not None:
            envs[sending] = True
        self.mark_for_reset(envs)
        self.fail()
        return self.abandon_workers()

    def abandon_workers(self) -> list[int]:
        """Every busy worker's step is abandoned; returns the workers that were stepping envs until now."""
        abandoned = [w for w, ids in self.busy.items() if ids is not None]
        for w in abandoned:
            self.busy[w] = None
        return abandoned

    def fail(self) -> None:
        """Nothing in flight or ready: results that were to come back will not (a failed step, a lost
        worker)."""
        self.ready.clear()
        self.errors.clear()
        self.in_flight[:] = False
