"""The options every worker-pool backend takes (`torchwm.vector.pool_options`, with the transports' own):
a bad value is refused with Gymnasium's error type, saying what was expected, before any worker starts."""

from __future__ import annotations

import multiprocessing

import pytest
from support.processes import leaked_segments

import torchwm

BACKENDS = ["subproc", "shmem"]


def _no_new_children_or_segments(before):
    assert set(multiprocessing.active_children()) <= before
    assert leaked_segments() == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": 0}, ValueError, "num_workers must be an int >= 1, got 0"),
        ({"num_workers": 2.5}, TypeError, "num_workers must be an int"),
        ({"batch_size": 9}, ValueError, "batch_size must be an int from 1 to num_envs=4, got 9"),
        ({"context": "threads"}, ValueError, r"context must be one of \['fork', 'forkserver', 'spawn'\]"),
        ({"num_wrokers": 2}, TypeError, r"unknown backend option\(s\) \['num_wrokers'\]"),
        ({"num_workers": 3, "envs_per_worker": 3}, ValueError, "do not fit num_envs=4"),
        ({"timeout": -1}, ValueError, "timeout must be a number of seconds > 0"),
        ({"copy": "yes"}, TypeError, "copy must be True or False"),
    ],
)
def test_bad_backend_kwargs_fail_before_any_worker_starts(backend, kwargs, error, match):
    before = set(multiprocessing.active_children())
    with pytest.raises(error, match=match):
        torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs=kwargs)
    _no_new_children_or_segments(before)
