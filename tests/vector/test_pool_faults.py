"""How a worker pool turns its workers' faults into the vector env's answer (`torchwm.vector.pool_faults`),
one kind each: an env's error is a `WorkerError` of the env's own type naming env and worker, after which
only that env needs a reset; a worker's death fails the vector env for good, or, with ``restart_on_crash``,
restarts that worker alone, its envs' episodes ended and flagged. The faults of every backend, in their
default configurations, are in tests/vector/faults/."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from support.processes import wait_until_ended

import torchwm
from torchwm.errors import WorkerError
from torchwm.testing import COUNTDOWN_ID

BACKENDS = ["subproc", "shmem"]


def pool(backend, **options):
    options = {"num_workers": 2, "context": "fork", "timeout": 60, **options}
    return torchwm.make_vec(COUNTDOWN_ID, 4, backend=backend, seed=0, backend_kwargs=options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_envs_error_is_its_own_type_naming_env_and_worker_and_only_that_env_needs_a_reset(backend):
    with pool(backend) as envs:
        envs.reset()
        envs.set_attr("broken", [True], env_ids=[1])
        with pytest.raises(WorkerError) as caught:
            envs.step(np.zeros(4, dtype=np.int64))
        error = caught.value
        assert isinstance(error, RuntimeError) and (error.env_index, error.worker_index) == (1, 0)
        assert str(error).startswith(f"{backend}: env 1 on worker 0 ") and "broke on purpose" in str(error)
        envs.set_attr("broken", [False], env_ids=[1])
        with pytest.raises(gym.error.ResetNeeded, match=r"envs \[1\] must be reset"):
            envs.step(np.zeros(4, dtype=np.int64))
        obs, *_ = envs.step(np.zeros(3, dtype=np.int64), env_ids=[0, 2, 3])  # the others step on
        assert obs[:, 3].tolist() == [2, 2, 2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dead_worker_fails_the_vector_env_for_good(backend):
    with pool(backend) as envs:
        envs.reset()
        pids = envs.worker_pids
        envs.set_attr("crash", [os.getpid()], env_ids=[3])
        with pytest.raises(
            WorkerError, match=r"worker 1 \(envs 2-3, pid \d+\) died \(exit code 3\)"
        ) as caught:
            envs.step(np.zeros(4, dtype=np.int64))
        assert (caught.value.worker_index, caught.value.env_index) == (1, None)
        assert "restart_on_crash" in str(caught.value)  # what to do about it
        for call in (envs.reset, lambda: envs.call("steps", env_ids=[0])):
            with pytest.raises(WorkerError, match="lost a worker earlier"):
                call()
    wait_until_ended(pids, 30)


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_on_crash_restarts_that_worker_alone_and_flags_its_envs(backend):
    with pool(backend, restart_on_crash=True) as envs:
        envs.reset()
        pids = envs.worker_pids
        envs.set_attr("crash", [os.getpid()], env_ids=[3])
        obs, rewards, terminations, truncations, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert truncations.tolist() == [False, False, True, True]
        assert infos["worker_restarted"].tolist() == [False, False, True, True]
        assert obs[:, 3].tolist() == [1, 1, 0, 0] and rewards[2:].tolist() == [0.0, 0.0]
        assert envs.worker_pids[0] == pids[0] and envs.worker_pids[1] != pids[1]
        obs, *_ = envs.step(np.zeros(4, dtype=np.int64))  # the new worker's envs are fresh: no crash left
        assert obs[:, 3].tolist()[:2] == [2, 2]
