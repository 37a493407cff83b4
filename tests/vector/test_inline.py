"""The ``inline`` option of ``subproc`` and ``shmem``: the parent steps worker 0's envs itself, next to the
child workers.

Trajectories, partial steps, call/set_attr and close are also checked by the conformance suite
(the ``inline`` variants of `PROCESS_BACKEND_VARIANTS`); these tests cover what is particular to the
parent's share.
"""

from __future__ import annotations

import os
import signal

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from support.processes import leaked_segments, process_running

import torchwm
from torchwm.errors import WorkerError
from torchwm.vector.transports.contract import default_num_workers

OK, RAISE = 0, 1


class CountingEnv(gym.Env):
    """Observes its step count; action 1 raises."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        if action == RAISE:
            raise ValueError("the env broke on purpose")
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, self.t >= 50, {}


gym.register("TorchwmTest/Counting-v0", entry_point=CountingEnv)


BACKENDS = ["subproc", "shmem"]


def make(backend, **options):
    options = {"num_workers": 2, "context": "fork", "timeout": 30, "inline": True, **options}
    return torchwm.make_vec("TorchwmTest/Counting-v0", 4, backend=backend, seed=0, backend_kwargs=options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_env_is_in_a_worker_by_default_and_the_parent_share_is_opt_in(backend):
    # Isolation by default: no env runs in the parent unless inline=True is asked for.
    with torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs={"context": "fork"}) as vec:
        assert None not in vec.worker_pids and len(set(vec.worker_pids)) == vec.num_workers
        # One worker per core, or as many as shmem measured to be faster
        # (tests/vector/transports/test_worker_count.py).
        assert vec.num_workers == (
            vec.worker_choice.workers if vec.worker_choice else min(4, default_num_workers())
        )
        assert vec.worker_slices[0].start == 0 and vec.worker_slices[-1].stop == 4
    with torchwm.make_vec(
        "CartPole-v1",
        4,
        backend=backend,
        backend_kwargs={"num_workers": 2, "context": "fork", "inline": True},
    ) as vec:
        assert vec.worker_pids[0] is None and vec.worker_pids[1] is not None


@pytest.mark.parametrize("backend", BACKENDS)
def test_parent_share_is_ready_first_and_matches_sync(backend):
    with (
        make(backend, batch_size=2) as vec,
        torchwm.make_vec("TorchwmTest/Counting-v0", 4, backend="sync", seed=0) as ref,
    ):
        assert vec.worker_slices == [range(0, 2), range(2, 4)] and vec.worker_pids[0] is None
        vec.reset(seed=0)
        ref.reset(seed=0)
        for _ in range(3):
            vec.send(np.zeros(4, dtype=np.int64))
            expected = ref.step(np.zeros(4, dtype=np.int64))
            # The parent stepped its envs in send: they are the first ready.
            obs, rewards, *_, infos = vec.recv()
            assert infos["env_id"].tolist() == [0, 1]
            assert np.array_equal(obs, expected[0][:2]) and np.array_equal(rewards, expected[1][:2])
            obs, rewards, *_, infos = vec.recv()
            assert infos["env_id"].tolist() == [2, 3]
            assert np.array_equal(obs, expected[0][2:]) and np.array_equal(rewards, expected[1][2:])


@pytest.mark.parametrize("backend", BACKENDS)
def test_error_in_a_parent_env_names_env_worker_and_traceback(backend):
    vec = make(backend)
    pids = [pid for pid in vec.worker_pids if pid is not None]
    vec.reset()
    with pytest.raises(WorkerError) as caught:
        vec.step(np.array([OK, RAISE, OK, OK]))
    error = caught.value
    assert error.env_index == 1 and error.worker_index == 0
    assert "ValueError: the env broke on purpose" in error.remote_traceback
    assert "env 1" in str(error) and "in the parent process" in str(error)
    # Nothing is left in flight, and the vector env steps again after a reset.
    vec.reset()
    obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
    assert np.array_equal(obs[:, 0], [1, 1, 1, 1])
    vec.close()
    assert not any(process_running(pid) for pid in pids) and leaked_segments() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_step_of_parent_and_child_envs(backend):
    with make(backend) as vec:
        vec.reset()
        vec.send(np.zeros(2, dtype=np.int64), env_ids=[1, 2])
        obs, *_ = vec.recv()
        assert np.array_equal(obs[:, 0], [1, 1])
        obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
        assert np.array_equal(obs[:, 0], [1, 2, 2, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_set_attr_and_call_reach_the_parent_envs(backend):
    with make(backend) as vec:
        vec.reset()
        vec.set_attr("t", [10, 20, 30, 40])
        assert list(vec.get_attr("t")) == [10, 20, 30, 40]
        obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
        assert np.array_equal(obs[:, 0], [11, 21, 31, 41])


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_on_crash_restarts_the_child_and_keeps_the_parent_share(backend):
    vec = make(backend, restart_on_crash=True)
    pids = vec.worker_pids
    vec.reset()
    vec.step(np.zeros(4, dtype=np.int64))
    os.kill(pids[1], signal.SIGKILL)
    obs, rewards, terminations, truncations, infos = vec.step(np.zeros(4, dtype=np.int64))
    assert truncations.tolist() == [False, False, True, True]
    assert infos["worker_restarted"].tolist() == [False, False, True, True]
    assert np.array_equal(obs[:, 0], [2, 2, 0, 0])
    new_pids = vec.worker_pids
    assert new_pids[0] is None and new_pids[1] != pids[1] and process_running(os.getpid())
    vec.close()
    assert not process_running(new_pids[1]) and leaked_segments() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_construction_error_in_the_parent_share_is_a_worker_error(backend):
    def broken_factory():
        raise RuntimeError("cannot build this env")

    with pytest.raises(WorkerError, match="cannot build this env") as caught:
        torchwm.TorchVectorizedEnv(
            broken_factory, num_workers=2, backend=backend, context="fork", inline=True
        )
    assert caught.value.worker_index in (0, 1)
    assert leaked_segments() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_inline_must_be_a_bool(backend):
    with pytest.raises(TypeError, match="inline must be True or False"):
        make(backend, inline="yes")
