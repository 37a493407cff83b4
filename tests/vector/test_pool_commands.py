"""The control commands of a worker pool (`torchwm.vector.pool_commands`): ``reset``, ``call`` and
``set_attr`` reach the envs ``env_ids`` name on whichever workers hold them, answer in the order of
``env_ids``, and a worker still stepping another of its envs is waited for first, its step kept. The
states' clone and restore meet a worker's restart (``restart_on_crash``) as a reset does."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import torchwm
from torchwm import testing
from torchwm.errors import WorkerError
from torchwm.testing import COUNTDOWN_ID

BACKENDS = ["subproc", "shmem"]


def pool(backend, num_envs=4):
    options = {"num_workers": 2, "context": "fork", "timeout": 60}
    return torchwm.make_vec(COUNTDOWN_ID, num_envs, backend=backend, seed=0, backend_kwargs=options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_attr_and_call_reach_the_envs_named_across_workers_in_their_order(backend):
    with pool(backend) as envs:
        envs.reset()
        envs.set_attr("delay", [0.0, 0.01, 0.02, 0.03])
        envs.set_attr("delay", [0.5, 0.25], env_ids=[3, 0])  # worker 1's env 3, then worker 0's env 0
        assert envs.get_attr("delay") == (0.25, 0.01, 0.02, 0.5)
        assert envs.call("delay", env_ids=[2, 1, 3]) == (0.02, 0.01, 0.5)
        # A function of the env, with an argument, on two workers' envs.
        assert envs.call(lambda env, k: env.unwrapped.delay * k, 4, env_ids=[3, 1]) == (2.0, 0.04)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reset_of_some_envs_gives_their_rows_and_leaves_the_others(backend):
    with pool(backend) as envs, torchwm.make_vec(COUNTDOWN_ID, 4, backend="sync", seed=0) as reference:
        envs.reset()
        reference.reset()
        envs.step(np.ones(4, dtype=np.int64))
        expected_others, *_ = reference.step(np.ones(4, dtype=np.int64))
        obs, infos = envs.reset(env_ids=[3, 0], seed=[30, 31])
        want, want_infos = reference.reset(env_ids=[3, 0], seed=[30, 31])
        np.testing.assert_array_equal(obs, want)
        assert (
            infos["env_id"].tolist() == [3, 0] and infos["length"].tolist() == want_infos["length"].tolist()
        )
        # Envs 1 and 2 were not reset: their next step continues their episodes, as in sync.
        got = envs.step(np.zeros(4, dtype=np.int64))[0]
        np.testing.assert_array_equal(got, reference.step(np.zeros(4, dtype=np.int64))[0])
        assert got[1, 3] == 2 and expected_others[1, 3] == 1  # its step count went on


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_command_to_a_worker_still_stepping_waits_for_that_step_and_keeps_it(backend):
    with pool(backend) as envs:
        envs.reset()
        envs.set_attr("delay", [0.8], env_ids=[3])
        envs.send(np.zeros(1, dtype=np.int64), env_ids=[3])  # worker 1 is busy with env 3
        began = time.monotonic()
        obs, infos = envs.reset(env_ids=[2], seed=5)  # env 2 is on the same worker
        assert time.monotonic() - began >= 0.5 and infos["env_id"].tolist() == [2]
        *_, infos = envs.recv()  # env 3's step was kept, not dropped by the reset
        assert infos["env_id"].tolist() == [3] and infos["steps"].tolist() == [1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restore_after_an_idle_workers_restart_steps_the_restored_state(backend):
    # 51.1: the restart queued for env 2 (idle when worker 1 died) is cleared by the restore, as by a reset.
    testing.check_restore_after_a_restart_steps_the_restored_state(
        testing.BackendUnderTest(backend, {"num_workers": 2, "context": "fork"})
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_clone_after_an_idle_workers_restart_names_the_env_and_the_restart(backend):
    # 51.2: never the state of the fresh episode the restart began.
    options = {"num_workers": 2, "context": "fork", "timeout": 60, "restart_on_crash": True}
    with torchwm.make_vec(COUNTDOWN_ID, 4, backend=backend, seed=0, backend_kwargs=options) as envs:
        envs.reset()
        envs.step(np.ones(4, dtype=np.int64))
        envs.set_attr("crash", os.getpid(), env_ids=[3])
        envs.step(np.ones(1, dtype=np.int64), env_ids=[3])  # worker 1 dies: env 2 is idle, env 3 in flight
        with pytest.raises(WorkerError, match=r"env 2 lost its episode when worker 1 .* was restarted"):
            envs.clone_state(env_ids=[0, 2])
        (state,) = envs.clone_state(env_ids=[3])  # env 3 heard of its restart: its new episode is its own
        *_, truncations, infos = envs.step(np.ones(4, dtype=np.int64))
        assert infos["worker_restarted"].tolist() == [False, False, True, False] and truncations[2]
    testing.check_clone_after_a_restart_names_the_lost_episode(testing.BackendUnderTest(backend, options))
