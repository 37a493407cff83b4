"""What the wrappers' tests share: a seeded rollout of one env, two rollouts compared, and Breakout through
the wrapper chain below the Atari wrappers (``PLAIN``)."""

from __future__ import annotations

import numpy as np

import torchwm

PLAIN = ["atari_preprocessing"]  # the stack the Atari wrappers are compared against


def rollout(env, steps=40, seed=0):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = [(obs, 0.0)]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        out.append((obs, reward))
        if terminated or truncated:
            out.append((env.reset()[0], 0.0))
    return out


def assert_same_rollout(got_env, expected_env, steps=40):
    got, expected = rollout(got_env, steps), rollout(expected_env, steps)
    assert len(got) == len(expected)
    for (obs_a, rew_a), (obs_b, rew_b) in zip(got, expected, strict=True):
        assert np.array_equal(obs_a, obs_b) and rew_a == rew_b


def breakout(wrappers, **kwargs):
    return torchwm.make_env("ALE/Breakout-v5", wrappers=wrappers, fused=False, **kwargs)
