"""`torchwm.sources`: the built-in sources, ``gym`` (`gymnasium.make`) and ``ale`` (ALE's `AtariEnv` without
the checker and order-enforcing wrappers `gymnasium.make` adds, the same arrays)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ale_py.env import AtariEnv

import torchwm
from torchwm.sources import make_ale, make_gym


def test_the_ale_source_is_the_atari_env_gymnasium_makes_without_its_wrappers():
    env, reference = make_ale("ALE/Pong-v5"), make_gym("ALE/Pong-v5")
    assert type(env) is AtariEnv and isinstance(reference, gym.Wrapper)
    assert env.spec is None and reference.spec.id == "ALE/Pong-v5"
    assert np.array_equal(env.reset(seed=3)[0], reference.reset(seed=3)[0])
    for action in (1, 2, 3):
        got, expected = env.step(action), reference.step(action)
        assert np.array_equal(got[0], expected[0]) and got[1:4] == expected[1:4]


def test_the_ale_source_takes_the_ids_kwargs_and_refuses_other_ids():
    assert make_ale("ALE/Pong-v5", frameskip=1)._frameskip == 1
    with pytest.raises(
        ValueError, match=r"'ale' source makes Atari envs only; 'CartPole-v1' is not an ALE id"
    ):
        make_ale("CartPole-v1")


def test_both_sources_are_registered():
    assert {"gym", "ale"} <= {info.name for info in torchwm.list_sources()}
