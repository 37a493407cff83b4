"""``episodic_life`` (`torchwm.wrappers.episodic_life`) on real games, against the plain Gymnasium stack
driven by hand the way its semantics say (a no-op step instead of a reset after a lost life): Breakout
(5 lives), Pong and Freeway (no lives). Through the wrapper chain (``fused=False``);
``tests/wrappers/test_atari_fused.py`` shows the fused env gives the same arrays.
"""

from __future__ import annotations

import numpy as np
import pytest

import torchwm
from wrappers.rollouts import PLAIN, assert_same_rollout, breakout


def test_episodic_life_ends_the_episode_on_life_loss_and_the_game_goes_on():
    """Against the plain stack driven by hand: a no-op step where the learner resets after a lost life."""
    env = breakout([*PLAIN, "episodic_life"])
    plain = breakout(PLAIN)
    obs, info = env.reset(seed=2)
    plain_obs, _ = plain.reset(seed=2)
    assert np.array_equal(obs, plain_obs) and info["lives"] == 5
    rng = np.random.default_rng(2)
    life_losses = game_overs = 0
    lives = 5
    for _ in range(3000):
        action = int(rng.integers(4))
        obs, reward, terminated, truncated, info = env.step(action)
        plain_obs, plain_reward, plain_terminated, _, plain_info = plain.step(action)
        assert np.array_equal(obs, plain_obs) and reward == plain_reward and info == plain_info
        if info["lives"] < lives and info["lives"] > 0:
            # A lost life ends the learner's episode; the game itself has not ended.
            assert terminated and not plain_terminated
            frame = info["episode_frame_number"]
            obs, info = env.reset()
            plain_obs, _, _, _, plain_info = plain.step(0)
            assert np.array_equal(obs, plain_obs) and info == plain_info
            assert info["lives"] == lives - 1
            assert info["episode_frame_number"] == frame + 4  # one no-op step, no emulator reset
            life_losses += 1
        elif terminated:
            assert plain_terminated and info["lives"] == 0
            obs, info = env.reset()
            plain_obs, plain_info = plain.reset()
            assert np.array_equal(obs, plain_obs) and info == plain_info
            assert info["lives"] == 5 and info["episode_frame_number"] <= 30  # a real reset: only the no-ops
            game_overs += 1
        else:
            assert not plain_terminated
        lives = info["lives"]
        if game_overs == 2:
            break
    assert game_overs == 2 and life_losses == 8


def test_episodic_life_reset_with_a_seed_restarts_the_game():
    env = breakout([*PLAIN, "episodic_life"])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    while True:
        _, _, terminated, _, info = env.step(int(rng.integers(4)))
        if terminated:
            break
    assert info["lives"] == 4
    obs, info = env.reset(seed=9)
    fresh_obs, fresh_info = breakout(PLAIN).reset(seed=9)
    assert np.array_equal(obs, fresh_obs) and info == fresh_info and info["lives"] == 5


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Freeway-v5"])
def test_episodic_life_changes_nothing_in_games_without_lives(env_id):
    with_life = torchwm.make_env(env_id, wrappers=[*PLAIN, "episodic_life"], fused=False)
    plain = torchwm.make_env(env_id, wrappers=PLAIN, fused=False)
    assert_same_rollout(with_life, plain, steps=300)
    assert with_life.unwrapped.ale.lives() == 0
