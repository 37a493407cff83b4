"""`torchwm.testing.multiagent_envs`: ``CountdownAgentsEnv``, the PettingZoo env of the multi-agent checks,
whose agents' rows and rewards differ so that a row out of place shows."""

from __future__ import annotations

import pickle

import numpy as np

from torchwm.testing.multiagent_envs import countdown_agents


def test_each_agents_row_and_reward_names_the_agent_and_episodes_end_together():
    env = countdown_agents(2)()
    obs, _ = env.reset(seed=1)
    assert [obs[agent][0] for agent in env.possible_agents] == [0.0, 1.0]
    length = int(obs["a_0"][1])
    for step in range(1, length + 1):
        obs, rewards, terminations, truncations, _ = env.step({"a_0": 1, "a_1": 2})
        assert rewards == {"a_0": step + 0.5, "a_1": 2 * step + 1.0}
        assert obs["a_1"][3] == 2.0  # its own last action
    assert all(terminations.values()) == (length % 2 == 0) and all(truncations.values()) == (length % 2 == 1)
    assert env.agents == []


def test_its_factory_pickles_and_builds_the_same_env_for_a_seed():
    factory = pickle.loads(pickle.dumps(countdown_agents(3)))
    assert np.array_equal(factory().reset(seed=2)[0]["a_2"], countdown_agents(3)().reset(seed=2)[0]["a_2"])
