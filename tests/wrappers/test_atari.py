"""`torchwm.wrappers.atari`: ``atari_preprocessing`` is Gymnasium's `AtariPreprocessing`, its options refused
as Gymnasium refuses them (before any env is built), and the helpers that find ALE under any stack."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from torchwm.errors import InvalidOptionError
from torchwm.names import register_ale
from torchwm.wrappers.atari import (
    action_meanings,
    ale_of,
    atari_preprocessing,
    check_preprocessing_options,
    game_name,
    screen_dims,
)


def breakout():
    register_ale()
    return gym.make("ALE/Breakout-v5", frameskip=1)


def test_atari_preprocessing_is_gymnasiums_with_the_same_arrays():
    env = atari_preprocessing(breakout(), screen_size=(64, 48), grayscale_newaxis=True)
    reference = gym.wrappers.AtariPreprocessing(breakout(), screen_size=(64, 48), grayscale_newaxis=True)
    assert (
        env.observation_space == reference.observation_space == gym.spaces.Box(0, 255, (48, 64, 1), np.uint8)
    )
    assert np.array_equal(env.reset(seed=1)[0], reference.reset(seed=1)[0])
    for action in (1, 2, 3, 0):
        assert np.array_equal(env.step(action)[0], reference.step(action)[0])


@pytest.mark.parametrize(
    ("option", "value"), [("frame_skip", 0), ("screen_size", (0, 84)), ("screen_size", -1), ("noop_max", -1)]
)
def test_a_bad_option_is_refused_with_gymnasiums_sentence_naming_the_option(option, value):
    with pytest.raises(ValueError) as reference:
        gym.wrappers.AtariPreprocessing(breakout(), **{option: value})
    with pytest.raises(InvalidOptionError) as caught:
        check_preprocessing_options({option: value})
    assert str(reference.value) in str(caught.value) and caught.value.option == option
    assert isinstance(caught.value, gym.error.Error)


def test_the_helpers_find_ale_its_actions_and_game_under_wrappers():
    env = gym.wrappers.RecordEpisodeStatistics(breakout())
    assert ale_of(env, "fire_reset") is env.unwrapped.ale
    assert action_meanings(env) == ["NOOP", "FIRE", "RIGHT", "LEFT"] and game_name(env) == "breakout"
    assert screen_dims(84) == (84, 84) and screen_dims((64, 48)) == (64, 48)
    with pytest.raises(ValueError, match=r"wrapper 'fire_reset' needs an ALE env .* got CartPoleEnv"):
        ale_of(gym.make("CartPole-v1"), "fire_reset")
