"""How the parent and the ``shmem`` workers wait for each other: measured while it runs.

A process that waits for the other side either polls (it keeps looking, with
``os.sched_yield`` so that a process that needs the core gets it) or sleeps on
a futex (no CPU, but the side that rings must then wake it up, which costs
much more on some machines than on others, VMs most). Which is faster depends
on the machine, the env and the caller, so the ``shmem`` backend measures its
steps (the workers write when they began and ended each one in the shared
block; the parent knows when it sent each and saw it end) and sets from them:

- **an idle worker's poll**: `MAX_SPIN_SECONDS` when it usually (the median)
  waits less than half that for its next step, so that the next step finds
  it awake, even after an unusually long wait; `SLOW_CALLER_WORKER_SPIN_SECONDS`
  when it waits longer (a slow caller: a policy on the same cores, say), so
  that polling workers leave those cores to the caller, since a wake-up then
  costs little beside the wait.
- **the parent's poll**: through a whole step (1.5 x the median step, at most
  `MAX_SPIN_SECONDS`) only when the workers leave it a core of its own (fewer
  workers than the cores this process may use); otherwise
  `SHORT_SPIN_SECONDS`, then it sleeps, leaving the cores to the workers. A
  parent polling next to busy workers that take every core makes every step
  slower, while the timing of short alternating windows says the opposite:
  polling only looks faster while something else loads the cores, so it is
  not chosen by such a comparison.

The steps measured: `WINDOW_STEPS` per worker after `WARMUP_STEPS` of warm-up,
then again every `RECHECK_SECONDS`, since the caller's pace changes
(collecting, then learning). `WaitTuner` keeps the timings and the choice, a
`WaitPlan`: the vector env's ``wait_plan``, logged on the ``torchwm`` logger at
INFO when it changes. The backend option ``spin_seconds`` fixes both polls
instead.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from typing import NamedTuple

logger = logging.getLogger("torchwm")

SHORT_SPIN_SECONDS = 0.00002  # the parent's poll before it sleeps when it has no core of its own
WORKER_SPIN_SECONDS = 0.001  # an idle worker's poll until measured
SLOW_CALLER_WORKER_SPIN_SECONDS = 0.00005  # an idle worker's poll when it waits long between steps
MAX_SPIN_SECONDS = 0.002  # no poll lasts longer: past that, a wake-up costs little in comparison
WARMUP_STEPS = 16  # steps per worker not measured at the start (first calls, caches)
WINDOW_STEPS = 48  # steps per worker measured each time
RECHECK_SECONDS = 2.0  # how often the steps are measured again


def as_microseconds(seconds: float) -> str:
    """``0.000012`` -> ``"12 µs"``."""
    return f"{seconds * 1e6:,.0f} µs"


@dataclass(frozen=True)
class Handoff:
    """What one hand-off between processes costs on this machine, measured by
    `torchwm.vector.transports.worker_count`: how long one process takes to see what another
    wrote in shared memory, in seconds (one way)."""

    poll: float  # while it polls for it
    wake: float  # while it sleeps on a futex and must be woken


@dataclass(frozen=True)
class WaitPlan:
    """How long each side polls before it sleeps, and where that came from.

    Attributes:
        parent_spin: seconds the parent polls for a step's end before it sleeps.
        worker_spin: seconds an idle worker polls for the next command before it sleeps.
        how: ``"measured"``, ``"spin_seconds"`` (the user's), or ``"measuring"`` during the first steps.
        measured: the figures a measured plan came from, in words.
    """

    parent_spin: float
    worker_spin: float
    how: str
    measured: str = ""

    def __str__(self) -> str:
        text = (
            f"the parent polls up to {as_microseconds(self.parent_spin)} for a step, then sleeps; an idle "
            f"worker polls {as_microseconds(self.worker_spin)}, then sleeps ({self.how}"
        )
        return text + (f": {self.measured})" if self.measured else ")")


class Sample(NamedTuple):
    """The timings of one step of one worker, in seconds."""

    cycle: float  # from the previous step's send to this one's: what the caller sees
    turnaround: float  # from the previous step's end being seen to this send: the caller's own time
    idle: float  # from the worker's end of the previous step to this send: how long it waited
    compute: float  # from the worker's start of the step to its end
    dispatch: float  # from the send to the worker's start: the hand-off there
    collect: float  # from the worker's end to the parent seeing it: the hand-off back


def _median(samples: list[Sample], field: str) -> float:
    return statistics.median(getattr(sample, field) for sample in samples)


class WaitTuner:
    """Times one pool's steps and chooses its `WaitPlan` (``plan``, which the parent's wait reads).

    Args:
        num_workers: workers in the pool.
        cores: the cores this process may use.
        spin_seconds: the user's poll for both sides (nothing measured), or None.
    """

    def __init__(self, num_workers: int, cores: int, spin_seconds: float | None = None) -> None:
        self.num_workers = num_workers
        self.core_to_spare = num_workers < cores
        if spin_seconds is None:
            self.plan = WaitPlan(SHORT_SPIN_SECONDS, WORKER_SPIN_SECONDS, "measuring")
        else:
            self.plan = WaitPlan(spin_seconds, spin_seconds, "spin_seconds")
        self.measuring = spin_seconds is None
        self._last: list[tuple[float, float, float] | None] = [None] * num_workers  # (sent, ended, seen)
        self._samples: list[Sample] = []
        self._skip = WARMUP_STEPS * num_workers  # steps still to pass before measuring
        # When (time.perf_counter) a step sent from then on starts measuring again (`measure_again`): read,
        # not called, on every step of the pool.
        self.recheck_at = math.inf
        self._last_seen = 0.0

    def record(self, worker: int, sent: float, began: float, ended: float, seen: float) -> None:
        """One finished step of ``worker`` while ``measuring``: when the parent sent it, the worker began and
        ended it, and the parent saw it end (``time.perf_counter`` of each process: one clock on one
        machine)."""
        last, self._last[worker] = self._last[worker], (sent, ended, seen)
        self._last_seen = seen
        if last is None:
            return
        if self._skip > 0:
            self._skip -= 1
            return
        self._samples.append(
            Sample(sent - last[0], sent - last[2], sent - last[1], ended - began, began - sent, seen - ended)
        )
        if len(self._samples) >= WINDOW_STEPS * self.num_workers:
            self._choose()

    def measure_again(self) -> None:
        """Measure the next steps (a step was sent at or after `recheck_at`, `RECHECK_SECONDS` after the last
        measured one): the plan follows a caller whose pace changed."""
        self.recheck_at = math.inf
        self.measuring = True
        self._last = [None] * self.num_workers
        self._samples = []

    def _choose(self) -> None:
        samples = self._samples
        step, idle = _median(samples, "dispatch") + _median(samples, "compute"), _median(samples, "idle")
        parent_spin = (
            min(max(1.5 * step, SHORT_SPIN_SECONDS), MAX_SPIN_SECONDS)
            if self.core_to_spare
            else SHORT_SPIN_SECONDS
        )
        worker_spin = MAX_SPIN_SECONDS if idle <= MAX_SPIN_SECONDS / 2 else SLOW_CALLER_WORKER_SPIN_SECONDS
        measured = (
            f"a step of a worker's envs {as_microseconds(_median(samples, 'compute'))}, hand-off there "
            f"{as_microseconds(_median(samples, 'dispatch'))} and back "
            f"{as_microseconds(_median(samples, 'collect'))}, the caller's time "
            f"between steps {as_microseconds(_median(samples, 'turnaround'))}, a worker's wait "
            f"{as_microseconds(idle)}, a step every "
            f"{as_microseconds(_median(samples, 'cycle'))}; "
            + ("a core to spare for the parent" if self.core_to_spare else "no core to spare for the parent")
        )
        if _median(samples, "compute") < _median(samples, "dispatch") + _median(samples, "collect"):
            measured += (
                "; a worker's step is shorter than its hand-offs: fewer workers (num_workers) or "
                "backend='sync' would be faster"
            )
        previous, self.plan = self.plan, WaitPlan(parent_spin, worker_spin, "measured", measured)
        self.measuring = False
        self.recheck_at = self._last_seen + RECHECK_SECONDS
        if (previous.how, previous.parent_spin, previous.worker_spin) != (
            "measured",
            parent_spin,
            worker_spin,
        ):
            # a change only: the steps are measured every few seconds
            logger.info("shmem waits: %s", self.plan)
