"""The count of ``shmem`` workers predicted fastest from what `torchwm.vector.transports.worker_count`
measured: one env's step and the machine's hand-off between two processes.

A vector step with ``w`` workers waits for the largest share of envs, the hand-off to the workers (an idle
worker polls) and back (the parent polls only with a core to spare, else it sleeps and the last worker
must wake it), and the parent's own work for each worker (`predicted_step_seconds`). `choose_worker_count`
keeps one worker per core unless fewer are predicted at least 10% faster (`KEEP_DEFAULT_WITHIN`).
"""

from __future__ import annotations

from torchwm.vector.transports.contract import WorkerChoice
from torchwm.vector.transports.handoff import Handoff, as_microseconds

# The parent's own work for one worker's step (write its actions, ring it, read its status and infos): the
# value with which the prediction fits CartPole on one and on two workers on the machine of
# docs/performance.md.
PARENT_SECONDS_PER_WORKER = 0.000012
KEEP_DEFAULT_WITHIN = 0.9  # fewer workers than cores only when predicted at least 10% faster


def predicted_step_seconds(
    num_envs: int, workers: int, cores: int, env_step: float, handoff: Handoff
) -> float:
    """A vector step's time with ``workers`` workers: the largest share of envs stepped, the hand-off there
    (an idle worker polls), the hand-off back (the parent polls only with a core to spare, else it sleeps),
    and the parent's own work for each worker."""
    largest_share = -(-num_envs // workers)
    back = handoff.poll if workers < cores else handoff.wake
    return largest_share * env_step + handoff.poll + back + workers * PARENT_SECONDS_PER_WORKER


def choose_worker_count(num_envs: int, cores: int, env_step: float, handoff: Handoff) -> WorkerChoice:
    """The count of workers predicted fastest; one per core (at most one per env) unless fewer are predicted
    at least 10% faster."""
    default = min(cores, num_envs)
    predicted = {
        w: predicted_step_seconds(num_envs, w, cores, env_step, handoff) for w in range(1, default + 1)
    }
    fastest = min(predicted, key=predicted.__getitem__)
    workers = fastest if predicted[fastest] < KEEP_DEFAULT_WITHIN * predicted[default] else default
    measured = (
        f"an env step {as_microseconds(env_step)}, a hand-off {as_microseconds(handoff.poll)} polling and "
        f"{as_microseconds(handoff.wake)} asleep; a step predicted "
        f"{', '.join(f'{as_microseconds(t)} with {w}' for w, t in predicted.items())} "
        f"worker(s) on {cores} cores"
    )
    return WorkerChoice(workers, measured)
