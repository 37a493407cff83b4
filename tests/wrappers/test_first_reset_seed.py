"""`torchwm.wrappers.first_reset_seed.FirstResetSeed`: ``make_env(seed=...)``'s seed goes to the first reset
(unless it brings its own) and to the action space, as ``gym.make`` then ``reset(seed=...)`` would."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import torchwm
from torchwm.wrappers.first_reset_seed import FirstResetSeed


def test_the_first_reset_takes_the_seed_and_later_ones_do_not():
    env = FirstResetSeed(gym.make("CartPole-v1"), 5)
    ref = gym.make("CartPole-v1")
    np.testing.assert_array_equal(env.reset()[0], ref.reset(seed=5)[0])
    # the second reset continues the env's stream, as Gymnasium's reset() without a seed does
    np.testing.assert_array_equal(env.reset()[0], ref.reset()[0])


def test_a_first_reset_with_its_own_seed_wins():
    env = FirstResetSeed(gym.make("CartPole-v1"), 5)
    np.testing.assert_array_equal(env.reset(seed=9)[0], gym.make("CartPole-v1").reset(seed=9)[0])
    assert env.reset()[0] is not None


def test_the_action_space_is_seeded_at_once():
    env = FirstResetSeed(gym.make("CartPole-v1"), 3)
    space = gym.make("CartPole-v1").action_space
    space.seed(3)
    assert [env.action_space.sample() for _ in range(20)] == [space.sample() for _ in range(20)]


def test_make_env_uses_it_only_with_a_seed():
    assert isinstance(torchwm.make_env("CartPole-v1", seed=1), FirstResetSeed)
    assert not isinstance(torchwm.make_env("CartPole-v1"), FirstResetSeed)
