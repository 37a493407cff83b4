"""`torchwm.envs`: ``torchwm/Synthetic-v0``, registered with Gymnasium on import, with the spaces, episodes
and observations it documents."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np

import torchwm  # registers the env
from torchwm.envs import SYNTHETIC_ID, SyntheticEnv


def test_the_env_is_registered_by_an_entry_point_string():
    assert gym.registry[SYNTHETIC_ID].entry_point == "torchwm.envs:SyntheticEnv"
    env = gym.make(SYNTHETIC_ID, step_seconds=0.0, obs_shape=(2, 3))
    assert isinstance(env.unwrapped, SyntheticEnv)
    assert env.observation_space == gym.spaces.Box(0, 255, (2, 3), np.uint8)
    assert env.action_space == gym.spaces.Discrete(4)


def test_episodes_truncate_at_their_length_and_each_step_marks_its_action():
    env = SyntheticEnv(step_seconds=0.0, episode_length=3)
    obs, _ = env.reset(seed=1)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert np.array_equal(obs, SyntheticEnv(step_seconds=0.0).reset(seed=1)[0])  # seeded
    flags = []
    for t, action in enumerate([2, 0, 3], start=1):
        obs, reward, terminated, truncated, _ = env.step(action)
        assert obs[0, 0, 0] == (action + t) % 256 and reward == 1.0
        flags.append((terminated, truncated))
    assert flags == [(False, False), (False, False), (False, True)]


def test_synthetic_env_costs_cpu_and_has_the_atari_shape():
    env = gym.make(SYNTHETIC_ID, step_seconds=0.002, episode_length=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    before = time.thread_time()
    for _ in range(3):
        obs, reward, terminated, truncated, _ = env.step(1)
    used = time.thread_time() - before
    assert used >= 0.006  # a busy loop, not a sleep: this thread spent the CPU time of 3 steps
    assert truncated and not terminated and reward == 1.0


def test_synthetic_env_under_spawn_workers():
    with torchwm.make_vec(
        SYNTHETIC_ID,
        2,
        backend="shmem",
        seed=0,
        step_seconds=0.0001,
        backend_kwargs={"num_workers": 2, "context": "spawn"},
    ) as vec:
        obs, _ = vec.reset()
        obs, rewards, *_ = vec.step(np.array([1, 2]))
    assert obs.shape == (2, 4, 84, 84) and np.array_equal(rewards, [1.0, 1.0])
