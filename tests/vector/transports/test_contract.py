"""The backend contract (`torchwm.vector.transports.contract`): how envs are split over workers, the default
number of workers, and the `Deadline` every wait of a pool is given."""

from __future__ import annotations

import math
import os
import time

import pytest

import torchwm
from torchwm.vector.transports.contract import (
    LONGEST_DEADLINE_SECONDS,
    Deadline,
    default_num_workers,
    split_envs,
)


def test_worker_slices_uneven_and_envs_per_worker():
    assert split_envs(5, 2, None) == [range(0, 3), range(3, 5)]
    assert split_envs(5, None, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert split_envs(3, 8, None) == [range(0, 1), range(1, 2), range(2, 3)]
    with torchwm.make_vec(
        "CartPole-v1", 5, backend="shmem", backend_kwargs={"envs_per_worker": 2, "context": "fork"}
    ) as vec:
        assert vec.worker_slices == [range(0, 2), range(2, 4), range(4, 5)]
        assert vec.num_workers == 3 and len(set(vec.worker_pids)) == 3


def test_default_num_workers_is_the_cpu_affinity():
    with torchwm.make_vec("CartPole-v1", 8, backend="subproc", backend_kwargs={"context": "fork"}) as vec:
        assert vec.num_workers == min(8, len(__import__("os").sched_getaffinity(0)))


def test_a_deadline_counts_down_then_expires():
    deadline = Deadline.after(0.2)
    left = deadline.remaining()
    assert left is not None and 0.0 < left <= 0.2 and not deadline.expired
    time.sleep(0.25)
    assert deadline.expired and deadline.remaining() == 0.0  # never below 0, whatever the wait gives it


@pytest.mark.parametrize("seconds", [None, math.inf, LONGEST_DEADLINE_SECONDS + 1, 1e9])
def test_no_timeout_or_one_longer_than_any_wait_is_no_deadline(seconds):
    # select.poll takes at most 2**31 ms: a longer timeout must mean "wait for ever", not an overflow.
    deadline = Deadline.after(seconds)
    assert deadline.at is None and not deadline.expired
    assert deadline.remaining(forever=-1.0) == -1.0 and deadline.remaining() is None


def test_the_longest_deadline_a_wait_can_take_is_kept():
    deadline = Deadline.after(LONGEST_DEADLINE_SECONDS)
    assert deadline.at is not None and deadline.remaining() > LONGEST_DEADLINE_SECONDS - 60


def test_a_wait_names_its_timeout_or_the_real_time_when_it_took_longer():
    assert Deadline.after(2.5).waited() == "2.5 s"
    # Begun 6 s ago with a 1 s timeout (a transport that waited longer, as an actor's start may).
    late = Deadline(1.0, time.monotonic() - 5.0)
    assert late.waited() == "6 s (timeout=1)"


@pytest.mark.parametrize("num_envs", range(1, 12))
@pytest.mark.parametrize("num_workers", [1, 2, 3, 5, 16])
def test_a_split_covers_every_env_once_in_order_as_evenly_as_possible(num_envs, num_workers):
    ranges = split_envs(num_envs, num_workers, None)
    assert len(ranges) == min(num_workers, num_envs)
    assert [env for r in ranges for env in r] == list(range(num_envs))  # contiguous, in order, each once
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)  # larger shares first


def test_envs_per_worker_that_does_not_fit_num_workers_is_refused_in_the_backends_words():
    assert split_envs(10, 3, 4) == [range(0, 4), range(4, 8), range(8, 10)]  # matching values are taken
    with pytest.raises(ValueError, match=r"ray: num_actors=2 and envs_per_actor=4 do not fit num_envs=10 "):
        split_envs(10, 2, 4, backend="ray", unit="actor")


def test_without_num_workers_the_split_takes_one_worker_per_core(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert default_num_workers() == 3
    assert split_envs(7, None, None) == [range(0, 3), range(3, 5), range(5, 7)]
