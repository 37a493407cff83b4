"""`torchwm.testing.envs`: ``CountdownEnv``, the env the conformance checks step: seeded episode lengths of
3 to 7 steps, ended by termination when even and by truncation when odd, and its switches (``broken``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from torchwm.testing.envs import COUNTDOWN_ID, CountdownEnv


def episode(env, seed):
    _, info = env.reset(seed=seed)
    steps = []
    while True:
        obs, reward, terminated, truncated, _ = env.step(2)
        steps.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            return info["length"], steps


def test_an_episode_lasts_its_drawn_length_and_ends_by_its_parity():
    lengths = set()
    for seed in range(20):
        length, steps = episode(CountdownEnv(), seed)
        lengths.add(length)
        assert len(steps) == length and 3 <= length <= 7
        assert steps[-1][2:] == ((True, False) if length % 2 == 0 else (False, True))
        # The reward is the step count plus half the action (2).
        assert [reward for _, reward, _, _ in steps] == [step + 1.0 for step in range(1, length + 1)]
    assert any(n % 2 == 0 for n in lengths) and any(n % 2 == 1 for n in lengths)  # both endings come up
    assert np.array_equal(episode(CountdownEnv(), 5)[1][0][0], episode(CountdownEnv(), 5)[1][0][0])


def test_it_is_registered_passes_gymnasiums_checker_and_breaks_when_told():
    env = gym.make(COUNTDOWN_ID)
    check_env(env.unwrapped, skip_render_check=True)
    env.unwrapped.broken = True
    env.reset(seed=0)
    with pytest.raises(RuntimeError, match="CountdownEnv broke on purpose"):
        env.step(0)
