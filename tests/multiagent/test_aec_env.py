"""`torchwm.multiagent.aec_env.AECGymEnv`: one PettingZoo AEC env as one Gymnasium env of fixed-shape
arrays."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from pettingzoo.classic import rps_v2, tictactoe_v3
from pettingzoo.utils.conversions import aec_to_parallel

from multiagent.aec_envs import RelayEnv
from torchwm.multiagent.aec_env import AECGymEnv

AGENTS = ["a_0", "a_1", "a_2"]


def test_observation_carries_every_agent_and_what_last_reads():
    env = AECGymEnv(RelayEnv, AGENTS)
    hand = RelayEnv()
    obs, info = env.reset(seed=5)
    hand.reset(seed=5)
    assert env.observation_space.contains(obs)
    for agent in AGENTS:
        np.testing.assert_array_equal(obs["observations"][agent], hand.observe(agent))
    assert obs["agent_selection"] == 0
    assert info == {"agent_infos": {agent: hand.infos[agent] for agent in AGENTS}}
    obs, reward, terminated, truncated, info = env.step({"a_0": 2, "a_1": 0, "a_2": 0})
    hand.step(2)
    assert reward == 1.0 and not terminated and not truncated  # the agents' rewards of the step, summed
    assert obs["rewards"].tolist() == [hand.rewards[a] for a in AGENTS]
    assert obs["cumulative_rewards"].tolist() == [hand._cumulative_rewards[a] for a in AGENTS]
    assert obs["agent_selection"] == AGENTS.index(hand.agent_selection)
    assert info["agent_infos"]["a_0"] == {"lives": hand.lives["a_0"], "turn": 1}


def test_a_dead_agent_steps_with_none_and_a_removed_one_is_zeros():
    env = AECGymEnv(RelayEnv, AGENTS)
    env.reset(seed=0)
    env.aec_env.lives["a_0"] = 1  # a_0 dies at its first turn
    obs, *_ = env.step({"a_0": 1, "a_1": 1, "a_2": 1})
    assert obs["agent_selection"] == 0 and obs["terminations"].tolist() == [1, 0, 0]
    # a_0's dead step: the action given is not used (RelayEnv's dead step raises for one that is not None).
    obs, *_ = env.step({"a_0": 2, "a_1": 1, "a_2": 1})
    assert "a_0" not in env.aec_env.agents
    assert obs["observations"]["a_0"].tolist() == [0, 0, 0]
    assert obs["terminations"].tolist() == [1, 0, 0] and obs["truncations"].tolist() == [1, 0, 0]
    assert obs["agent_selection"] == 1


def test_terminated_when_every_agent_terminated_truncated_otherwise():
    env = AECGymEnv(RelayEnv, AGENTS)
    env.reset(seed=0)
    env.aec_env.lives.update(a_0=1, a_1=1, a_2=1)
    # Each agent's live step ends its life, then its dead step removes it: the last one left ends the env.
    ends = [env.step(dict.fromkeys(AGENTS, 1))[2:4] for _ in range(5)]
    assert ends == [(False, False)] * 4 + [(True, False)]
    # An env that is done is not stepped again (the vector env resets it).
    assert env.step(dict.fromkeys(AGENTS, 1))[2:4] == (True, False)

    env = AECGymEnv(functools.partial(RelayEnv, max_turns=2), AGENTS)
    env.reset(seed=0)
    env.aec_env.lives.update(a_0=9, a_1=9, a_2=9)
    ends = [env.step(dict.fromkeys(AGENTS, 1))[2:4] for _ in range(2)]
    assert ends == [(False, False), (False, True)]


def test_spaces_are_per_agent_and_pass_gymnasiums_checker():
    env = AECGymEnv(tictactoe_v3.env, ["player_1", "player_2"])
    assert env.action_space["player_1"].n == 9
    assert env.observation_space["observations"]["player_2"]["action_mask"].shape == (9,)
    check_env(env, skip_render_check=True)


def test_refuses_what_is_no_aec_env_of_the_first_envs_agents():
    with pytest.raises(TypeError, match="ParallelEnv"):
        AECGymEnv(lambda: aec_to_parallel(rps_v2.env()), ["player_0", "player_1"])
    with pytest.raises(ValueError, match=r"possible_agents of the first, \['player_1', 'player_0'\]"):
        AECGymEnv(rps_v2.env, ["player_1", "player_0"])
