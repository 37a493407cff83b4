"""`AgentsEnv`: one PettingZoo env as one Gymnasium env; when it ends, and its per-agent arrays."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from support.pettingzoo_envs import scripted

from torchwm.multiagent.agents_env import AgentsEnv


def test_it_passes_gymnasiums_env_checker():
    check_env(AgentsEnv(scripted(end_at=3), dead_agents="zero"), skip_render_check=True)


def test_the_env_ends_truncated_when_its_last_agents_were_truncated():
    env = AgentsEnv(scripted(end_at=2))
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step(np.array([1, 1, 1]))
    assert not (terminated or truncated) and reward == 1 + 1 + 2 + 1 + 3 + 1
    obs, reward, terminated, truncated, info = env.step(np.array([0, 0, 0]))
    assert truncated and not terminated
    np.testing.assert_array_equal(obs["truncated"], [True] * 3)
    np.testing.assert_array_equal(obs["agent_mask"], [False] * 3)
    assert info == {"agent_infos": [{"step": 2}, {}, {}]}


def test_the_env_ends_terminated_when_an_agent_terminated_last_and_dead_rows_stay_terminated():
    env = AgentsEnv(scripted(die_at={"a_0": 1, "a_1": 2, "a_2": 2}, end_at=9), dead_agents="zero")
    env.reset(seed=0)
    obs, _, terminated, _, _ = env.step(np.array([2, 2, 2]))
    assert not terminated
    np.testing.assert_array_equal(obs["terminated"], [True, False, False])
    np.testing.assert_array_equal(obs["agent_mask"], [False, True, True])
    obs, reward, terminated, truncated, _ = env.step(np.array([2, 0, 0]))
    assert terminated and not truncated
    np.testing.assert_array_equal(obs["obs"][0], np.zeros(4))  # dead since step 1: a zero row
    np.testing.assert_array_equal(obs["reward"], [0, 4, 6])  # its action (2) was ignored
    np.testing.assert_array_equal(obs["terminated"], [True] * 3)


def test_an_agent_absent_at_reset_under_dead_agents_error_raises_naming_zero():
    env = AgentsEnv(scripted(join_at={"a_2": 1}))
    with pytest.raises(AssertionError, match=r"agents \['a_2'\].*dead_agents=\"zero\""):
        env.reset(seed=0)


def test_an_agent_that_joins_is_a_zero_row_until_it_appears():
    env = AgentsEnv(scripted(join_at={"a_2": 2}), dead_agents="zero")
    obs, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs["agent_mask"], [True, True, False])
    np.testing.assert_array_equal(obs["obs"][2], np.zeros(4))
    obs, *_ = env.step(np.zeros(3, np.int64))
    assert not obs["agent_mask"][2]
    obs, *_ = env.step(np.zeros(3, np.int64))
    assert obs["agent_mask"][2] and obs["obs"][2][0] == 2 and obs["reward"][2] == 0


def test_dead_agents_must_be_error_or_zero():
    with pytest.raises(ValueError, match="dead_agents must be one of"):
        AgentsEnv(scripted(), dead_agents="drop")
