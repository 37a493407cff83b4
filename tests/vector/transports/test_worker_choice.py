"""The rule that chooses how many workers shmem starts from the measured env step and hand-off
(torchwm/vector/transports/worker_choice.py)."""

from __future__ import annotations

import pytest

from torchwm.vector.transports.handoff import Handoff
from torchwm.vector.transports.worker_choice import (
    PARENT_SECONDS_PER_WORKER,
    choose_worker_count,
    predicted_step_seconds,
)

FAST_WAKES = Handoff(poll=2e-6, wake=10e-6)
SLOW_WAKES = Handoff(poll=2e-6, wake=150e-6)  # a VM whose wake-ups are 15x dearer


def test_the_predicted_step_is_the_largest_share_the_hand_offs_and_the_parents_work():
    env_step, handoff = 50e-6, Handoff(poll=3e-6, wake=40e-6)
    per_env = env_step
    parent = PARENT_SECONDS_PER_WORKER
    # 10 envs on 3 workers: shares of 4, 3, 3; a core to spare, so the parent polls both ways.
    assert predicted_step_seconds(10, 3, 4, env_step, handoff) == pytest.approx(
        4 * per_env + 3e-6 + 3e-6 + 3 * parent
    )
    # 4 workers on 4 cores: the parent sleeps, and the last worker wakes it.
    assert predicted_step_seconds(10, 4, 4, env_step, handoff) == pytest.approx(
        3 * per_env + 3e-6 + 40e-6 + 4 * parent
    )


def test_a_cheap_env_on_a_machine_with_slow_wake_ups_gets_fewer_workers_than_cores():
    choice = choose_worker_count(32, 2, 5e-6, SLOW_WAKES)
    assert choice.workers == 1
    assert "an env step 5 µs, a hand-off 2 µs polling and 150 µs asleep" in choice.measured
    assert str(choice).startswith("1 worker (measured: ")
    # With more cores, it leaves the parent a core rather than going down to one worker.
    choice = choose_worker_count(32, 8, 5e-6, SLOW_WAKES)
    predicted = {w: predicted_step_seconds(32, w, 8, 5e-6, SLOW_WAKES) for w in range(1, 9)}
    assert 1 < choice.workers == min(predicted, key=predicted.__getitem__) < 8


def test_one_worker_per_core_where_it_pays():
    assert choose_worker_count(32, 2, 5e-6, FAST_WAKES).workers == 2  # cheap env, cheap wake-ups
    assert choose_worker_count(8, 2, 200e-6, SLOW_WAKES).workers == 2  # dear wake-ups, but a Pong-sized step
    assert choose_worker_count(3, 8, 200e-6, FAST_WAKES).workers == 3  # never more workers than envs


def test_the_default_stays_unless_fewer_workers_are_clearly_faster():
    # Predicted 176 µs with one worker against 186 µs with two: not 10% faster, so one per core stays.
    handoff = Handoff(poll=2e-6, wake=80e-6)
    assert predicted_step_seconds(32, 1, 2, 5e-6, handoff) < predicted_step_seconds(32, 2, 2, 5e-6, handoff)
    assert choose_worker_count(32, 2, 5e-6, handoff).workers == 2
