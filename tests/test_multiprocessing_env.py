"""TorchVectorizedEnv: any Gym-like factory over worker processes, the classic (obs, rewards, dones, infos)
API."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from support.processes import leaked_segments

import torchwm


def cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.parametrize("backend", ["shmem", "subproc", "sync"])
def test_matches_gymnasium_same_step_autoreset(backend):
    # Gymnasium's SyncVectorEnv with same_step autoreset is the reference for (obs, done) semantics.
    reference = gym.vector.SyncVectorEnv([cartpole] * 4, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    options = {} if backend == "sync" else {"context": "fork"}
    with torchwm.TorchVectorizedEnv(
        cartpole, num_workers=2, envs_per_worker=2, backend=backend, **options
    ) as vec:
        assert vec.total_envs == 4 == vec.num_envs
        obs = vec.reset(seed=0)
        expected_obs, _ = reference.reset(seed=0)
        assert np.array_equal(obs, expected_obs)
        dones_seen = 0
        for _ in range(40):
            actions = reference.action_space.sample()
            obs, rewards, dones, infos = vec.step(actions)
            e_obs, e_rewards, e_term, e_trunc, e_infos = reference.step(actions)
            assert np.array_equal(obs, e_obs) and np.array_equal(rewards, e_rewards)
            assert np.array_equal(dones, e_term | e_trunc)
            if dones.any():
                dones_seen += 1
                for i in np.flatnonzero(dones):
                    assert np.array_equal(infos["final_obs"][i], e_infos["final_obs"][i])
        assert dones_seen > 0
    reference.close()


def test_total_envs_and_spaces():
    with torchwm.TorchVectorizedEnv(cartpole, num_workers=2, envs_per_worker=3, context="fork") as vec:
        assert vec.total_envs == 6
        assert vec.vec_env.worker_slices == [range(0, 3), range(3, 6)]
        assert vec.action_space.shape == (6,)
        assert vec.observation_space.shape == (6, 4)
        obs = vec.reset()
        assert isinstance(obs, np.ndarray) and obs.shape == (6, 4)


def test_wrong_action_count_names_total_envs():
    with torchwm.TorchVectorizedEnv(cartpole, num_workers=2, envs_per_worker=2, context="fork") as vec:
        vec.reset()
        with pytest.raises(
            ValueError, match=r"first dimension is total_envs=4 \(num_workers=2 x envs_per_worker=2\), got 3"
        ):
            vec.step(np.zeros(3, dtype=np.int64))
        with pytest.raises(ValueError, match="total_envs=4"):
            vec.step(0)


def test_make_env_factory_with_pixels_under_forkserver():
    # The seed document's example: a torchwm factory with rendered 64x64 frames.
    def env_factory():
        return torchwm.make_env("CartPole-v1", backend="gym", size=(64, 64))

    with torchwm.TorchVectorizedEnv(
        env_factory, num_workers=2, envs_per_worker=1, context="forkserver"
    ) as vec:
        obs = vec.reset(seed=0)
        assert obs.shape == (2, 64, 64, 3) and obs.dtype == np.uint8
        single = env_factory()
        assert np.array_equal(obs[1], single.reset(seed=1)[0])
        obs, rewards, dones, infos = vec.step(np.array([0, 1]))
        assert np.array_equal(rewards, [1.0, 1.0]) and not dones.any()
    assert leaked_segments() == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"num_workers": 0}, ValueError, "num_workers must be an int >= 1, got 0"),
        ({"envs_per_worker": -1}, ValueError, "envs_per_worker must be an int >= 1"),
        ({"backend": "ray"}, ValueError, "TorchVectorizedEnv runs on one of"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        torchwm.TorchVectorizedEnv(cartpole, **kwargs)
    with pytest.raises(TypeError, match="env_factory must be a no-argument callable"):
        torchwm.TorchVectorizedEnv("CartPole-v1")
