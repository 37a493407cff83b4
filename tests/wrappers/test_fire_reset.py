"""``fire_reset`` (`torchwm.wrappers.fire_reset`) on real games, against the plain Gymnasium stack driven by
hand the way its semantics say (a FIRE step after a reset): Breakout (FIRE, 5 lives), Pong (FIRE, no lives),
Freeway (no FIRE). Through the wrapper chain (``fused=False``) unless said;
``tests/wrappers/test_atari_fused.py`` shows the fused env gives the same arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchwm
from wrappers.rollouts import PLAIN, breakout


@pytest.mark.parametrize("fused", [True, False])
def test_fire_reset_on_a_game_without_fire_raises(fused):
    with pytest.raises(
        ValueError,
        match=r"needs a game with a FIRE action, and 'freeway' has none \(its actions: NOOP, UP, DOWN\)",
    ):
        torchwm.make_env("ALE/Freeway-v5", wrappers=["atari_preprocessing", "fire_reset"], fused=fused)


@pytest.mark.parametrize(("env_id", "fire"), [("ALE/Breakout-v5", 1), ("ALE/Pong-v5", 1)])
def test_fire_reset_presses_fire_once_after_reset(env_id, fire):
    env = torchwm.make_env(env_id, wrappers=[*PLAIN, "fire_reset"], fused=False)
    plain = torchwm.make_env(env_id, wrappers=PLAIN, fused=False)
    obs, info = env.reset(seed=5)
    _, plain_reset_info = plain.reset(seed=5)
    plain_obs, _, _, _, plain_info = plain.step(fire)
    assert np.array_equal(obs, plain_obs)
    # One FIRE step of 4 frames and nothing else (no action 2, unlike stable-baselines3).
    assert info["episode_frame_number"] == plain_reset_info["episode_frame_number"] + 4
    assert info["lives"] == plain_info["lives"] and info["seeds"] == plain_reset_info["seeds"]
    for action in np.random.default_rng(5).integers(env.action_space.n, size=50):
        got, expected = env.step(int(action)), plain.step(int(action))
        assert np.array_equal(got[0], expected[0]) and got[1:] == expected[1:]


def lives_under_noop_policy(wrappers, steps=400):
    """Lives seen while only NOOP is played (Breakout serves the ball only on FIRE)."""
    env = breakout(wrappers, repeat_action_probability=0.0)
    _, info = env.reset(seed=0)
    seen = [info["lives"]]
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(0)
        seen.append(info["lives"])
        if terminated or truncated:
            if info["lives"] == 0:
                break
            _, info = env.reset()
    return seen


def test_breakout_needs_fire_and_fire_reset_serves_the_ball():
    assert set(lives_under_noop_policy(PLAIN)) == {5}  # the ball is never served
    assert min(lives_under_noop_policy([*PLAIN, "fire_reset"])) == 4  # served once, lost once


def test_fire_reset_above_episodic_life_fires_after_each_lost_life():
    assert lives_under_noop_policy([*PLAIN, "episodic_life", "fire_reset"])[-1] == 0  # every ball served
    # Below episodic_life, FIRE follows only real resets: the second ball is never served.
    assert min(lives_under_noop_policy([*PLAIN, "fire_reset", "episodic_life"])) == 4
