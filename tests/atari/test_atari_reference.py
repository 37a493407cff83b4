"""The default ALE stack on ``sync`` gives exactly the arrays of Gymnasium's own wrapper chain.

The reference is what ALE's docs give as the equivalent of the standard stack:
``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)), 4, padding_type="zero")``
in a `gymnasium.vector.SyncVectorEnv`. torchwm is run twice, through the wrapper chain
(``fused=False``) and through the fused env (the default). Same seeds, same seeded random
actions, several episodes per env; sticky actions (v5: 0.25) come from ALE's own seeded RNG.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.names import register_ale

NUM_ENVS = 2


def gymnasium_reference(env_id: str, **env_kwargs) -> gym.vector.SyncVectorEnv:
    register_ale()

    def make():
        env = gym.wrappers.AtariPreprocessing(gym.make(env_id, frameskip=1, **env_kwargs))
        return gym.wrappers.FrameStackObservation(env, 4, padding_type="zero")

    return gym.vector.SyncVectorEnv([make for _ in range(NUM_ENVS)])


def run(envs, actions: np.ndarray, seed: int):
    """Every step's arrays, and the number of episode ends."""
    obs, infos = envs.reset(seed=seed)
    record = {
        "obs": [obs.copy()],
        "rewards": [],
        "terminations": [],
        "truncations": [],
        "lives": [infos["lives"].copy()],
        "frames": [infos["episode_frame_number"].copy()],
    }
    for action in actions:
        obs, rewards, terminations, truncations, infos = envs.step(action)
        record["obs"].append(obs.copy())
        record["rewards"].append(rewards.copy())
        record["terminations"].append(terminations.copy())
        record["truncations"].append(truncations.copy())
        record["lives"].append(infos["lives"].copy())
        record["frames"].append(infos["episode_frame_number"].copy())
    envs.close()
    return {key: np.stack(value) for key, value in record.items()}


# Breakout v5: real game overs under random play, sticky actions 0.25.
# Pong v4 (sticky 0.0): episodes cut to 600 frames, so they end by truncation.
CASES = [
    ("ALE/Breakout-v5", {}, 600),
    ("PongNoFrameskip-v4", {"max_num_frames_per_episode": 500}, 400),
]


@functools.cache
def expected_run(env_id: str, env_kwargs_items: tuple, steps: int):
    """Gymnasium's arrays, computed once for the chain and the fused test."""
    reference_envs = gymnasium_reference(env_id, **dict(env_kwargs_items))
    space = reference_envs.single_observation_space
    actions = np.random.default_rng(7).integers(reference_envs.single_action_space.n, size=(steps, NUM_ENVS))
    return space, actions, run(reference_envs, actions, seed=11)


@pytest.mark.parametrize("fused", [False, True], ids=["chain", "fused"])
@pytest.mark.parametrize(("env_id", "env_kwargs", "steps"), CASES, ids=[c[0] for c in CASES])
def test_default_stack_matches_gymnasium_sync_vector_env(env_id, env_kwargs, steps, fused):
    space, actions, expected = expected_run(env_id, tuple(sorted(env_kwargs.items())), steps)

    envs = torchwm.make_vec(env_id, NUM_ENVS, backend="sync", fused=fused, **env_kwargs)
    assert envs.single_observation_space == space
    assert (type(envs.envs[0]).__name__ == "FusedAtariEnv") is fused
    got = run(envs, actions, seed=11)

    episode_ends = (expected["terminations"] | expected["truncations"]).sum(axis=0)
    assert episode_ends.min() >= 3, f"each env should see at least 3 episodes, saw {episode_ends}"
    for key in expected:
        assert got[key].dtype == expected[key].dtype, key
        assert np.array_equal(got[key], expected[key]), f"{key} differs from Gymnasium's"


def test_v5_default_is_sticky_and_v4_is_not():
    # The same seed and actions give different games only through ALE's sticky actions.
    def frames(env_id: str, probability: float | None):
        kwargs = {} if probability is None else {"repeat_action_probability": probability}
        env = torchwm.make_env(env_id, **kwargs)
        obs, _ = env.reset(seed=3)
        rng = np.random.default_rng(3)
        return [env.step(int(rng.integers(env.action_space.n)))[0] for _ in range(150)]

    sticky = frames("ALE/Breakout-v5", None)
    assert all(np.array_equal(a, b) for a, b in zip(sticky, frames("ALE/Breakout-v5", 0.25), strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(sticky, frames("ALE/Breakout-v5", 0.0), strict=True))
    assert torchwm.make_vec("BreakoutNoFrameskip-v4").spec.env_kwargs["repeat_action_probability"] == 0.0
    assert torchwm.make_vec("ALE/Breakout-v5").spec.env_kwargs["repeat_action_probability"] == 0.25
