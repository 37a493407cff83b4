"""The shmem backend's waits: measured while it runs (torchwm/vector/transports/handoff.py), or fixed by
spin_seconds."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import torchwm
from torchwm.vector.transports.handoff import (
    MAX_SPIN_SECONDS,
    RECHECK_SECONDS,
    SHORT_SPIN_SECONDS,
    SLOW_CALLER_WORKER_SPIN_SECONDS,
    WARMUP_STEPS,
    WINDOW_STEPS,
    WaitTuner,
)

MEASURED_STEPS = (
    WARMUP_STEPS + WINDOW_STEPS + 1
)  # steps per worker until the first plan (the first has no previous)


def feed(
    tuner: WaitTuner, steps: int, *, compute: float, turnaround: float, handoff: float, clock: float = 0.0
) -> float:
    """Two workers stepping in lockstep with these timings from ``clock`` on, as
    `SharedMemoryHandle.finish_step` reports them; the clock after them."""
    for _ in range(steps):
        sent = clock
        began = sent + handoff
        ended = began + compute
        seen = ended + handoff
        for worker in range(2):
            if tuner.measuring:
                tuner.record(worker, sent, began, ended, seen)
            elif sent >= tuner.recheck_at:
                tuner.measure_again()
        clock = seen + turnaround
    return clock


def test_a_fast_caller_gets_workers_that_poll_and_a_parent_that_sleeps_without_a_core_to_spare():
    tuner = WaitTuner(2, cores=2)
    assert tuner.plan.how == "measuring" and tuner.measuring
    feed(tuner, MEASURED_STEPS, compute=800e-6, turnaround=40e-6, handoff=10e-6)
    assert tuner.plan.how == "measured" and not tuner.measuring
    assert tuner.plan.worker_spin == MAX_SPIN_SECONDS  # it waits 60 µs between steps: it keeps polling
    assert tuner.plan.parent_spin == SHORT_SPIN_SECONDS  # two workers on two cores: the parent sleeps
    assert "a step of a worker's envs 800 µs, hand-off there 10 µs and back 10 µs" in tuner.plan.measured
    assert "no core to spare" in tuner.plan.measured and "fewer workers" not in tuner.plan.measured


def test_the_parent_polls_through_a_step_when_a_core_is_free_for_it():
    tuner = WaitTuner(2, cores=4)
    feed(tuner, MEASURED_STEPS, compute=100e-6, turnaround=30e-6, handoff=5e-6)
    assert tuner.plan.parent_spin == pytest.approx(1.5 * 105e-6)  # the hand-off there and the step
    tuner = WaitTuner(2, cores=4)
    feed(tuner, MEASURED_STEPS, compute=50e-3, turnaround=30e-6, handoff=5e-6)
    assert tuner.plan.parent_spin == MAX_SPIN_SECONDS  # never longer


def test_a_slow_caller_gets_workers_that_sleep_soon():
    tuner = WaitTuner(2, cores=2)
    feed(tuner, MEASURED_STEPS, compute=1e-3, turnaround=5e-3, handoff=5e-6)
    assert tuner.plan.worker_spin == SLOW_CALLER_WORKER_SPIN_SECONDS


def test_the_steps_are_measured_again_and_the_plan_follows_the_caller(caplog):
    tuner = WaitTuner(2, cores=2)
    with caplog.at_level(logging.INFO, logger="torchwm"):
        clock = feed(tuner, MEASURED_STEPS, compute=100e-6, turnaround=30e-6, handoff=5e-6)
    assert tuner.plan.worker_spin == MAX_SPIN_SECONDS and len(caplog.records) == 1
    # RECHECK_SECONDS of 140 µs steps later, measuring starts again ...
    clock = feed(
        tuner, int(RECHECK_SECONDS / 140e-6) - 10, compute=100e-6, turnaround=30e-6, handoff=5e-6, clock=clock
    )
    assert not tuner.measuring
    clock = feed(tuner, 20, compute=100e-6, turnaround=30e-6, handoff=5e-6, clock=clock)
    assert tuner.measuring
    # ... and a caller that now takes 5 ms between steps gets workers that sleep soon.
    with caplog.at_level(logging.INFO, logger="torchwm"):
        feed(tuner, WINDOW_STEPS + 1, compute=100e-6, turnaround=5e-3, handoff=5e-6, clock=clock)
    assert not tuner.measuring and tuner.plan.worker_spin == SLOW_CALLER_WORKER_SPIN_SECONDS
    assert len(caplog.records) == 2  # logged when it changed


def test_a_step_shorter_than_its_hand_offs_says_fewer_workers_would_be_faster():
    tuner = WaitTuner(2, cores=2)
    feed(tuner, MEASURED_STEPS, compute=5e-6, turnaround=20e-6, handoff=30e-6)
    assert "fewer workers (num_workers) or backend='sync' would be faster" in tuner.plan.measured


def test_spin_seconds_fixes_both_polls_and_measures_nothing():
    tuner = WaitTuner(2, cores=2, spin_seconds=0.0005)
    assert not tuner.measuring
    assert (tuner.plan.parent_spin, tuner.plan.worker_spin, tuner.plan.how) == (
        0.0005,
        0.0005,
        "spin_seconds",
    )
    feed(tuner, 10_000, compute=100e-6, turnaround=30e-6, handoff=5e-6)
    assert not tuner.measuring and str(tuner.plan).endswith("(spin_seconds)")


def test_shmem_measures_its_waits_on_the_first_steps_and_logs_the_plan(caplog):
    with (
        caplog.at_level(logging.INFO, logger="torchwm"),
        torchwm.make_vec(
            "CartPole-v1", num_envs=4, backend="shmem", seed=0, backend_kwargs={"num_workers": 2}
        ) as vec,
    ):
        vec.reset(seed=0)
        assert vec.wait_plan.how == "measuring"
        actions = np.zeros(4, dtype=np.int64)
        for _ in range(MEASURED_STEPS):
            vec.step(actions)
        plan = vec.wait_plan
        assert plan.how == "measured", plan
        assert vec._stepper._batch.worker_spin[0] == plan.worker_spin  # what the workers read
        assert plan.worker_spin in (SLOW_CALLER_WORKER_SPIN_SECONDS, MAX_SPIN_SECONDS)
        assert any(str(plan) in record.getMessage() for record in caplog.records)
    assert vec.wait_plan is None  # closed


def test_shmem_spin_seconds_is_what_the_workers_read():
    with torchwm.make_vec(
        "CartPole-v1", num_envs=2, backend="shmem", seed=0, backend_kwargs={"spin_seconds": 0.0001}
    ) as vec:
        vec.reset(seed=0)
        assert vec._stepper._batch.worker_spin[0] == 0.0001
        assert (vec.wait_plan.parent_spin, vec.wait_plan.how) == (0.0001, "spin_seconds")


@pytest.mark.parametrize(
    "value, error, words",
    [
        ("fast", TypeError, "spin_seconds must be a number of seconds or None"),
        (True, TypeError, "spin_seconds must be a number of seconds or None"),
        (-1, ValueError, "spin_seconds must be between 0 and 0.002"),
        (1.0, ValueError, "spin_seconds must be between 0 and 0.002"),
    ],
)
def test_a_bad_spin_seconds_is_refused_before_any_worker_starts(value, error, words):
    with pytest.raises(error, match=words):
        torchwm.make_vec("CartPole-v1", num_envs=2, backend="shmem", backend_kwargs={"spin_seconds": value})
