# The MIT License
#
# Copyright (c) 2020 Farama Foundation
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in
# all copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
# THE SOFTWARE.
#
# Ported from SuperSuit 3.11.0 test/test_vector/test_pettingzoo_to_vec.py (commit 1312e6d, "Bump version to
# 3.11.0"). Adapted: only the construction. The SuperSuit calls are torchwm's (torchwm.multiagent;
# SuperSuit's black_death_v3 wrapper of the PettingZoo env is SuperSuit's own), PettingZoo 1.27 names
# knights-archers-zombies `_v11` (its `spawn_rate` became `spawn_delay`), and test_good_vecenv runs on the
# `num_cpus` parameter: 0 (sync, as in SuperSuit) and 2 (shmem).

import copy

import numpy as np
import pytest
from mpe2 import simple_spread_v3, simple_world_comm_v3
from pettingzoo.butterfly import knights_archers_zombies_v11 as knights_archers_zombies_v10
from supersuit import black_death_v3

from torchwm.integrations.supersuit import concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1


def test_good_env():
    env = simple_spread_v3.parallel_env()
    max_num_agents = len(env.possible_agents)
    env = pettingzoo_env_to_vec_env_v1(env)
    assert env.num_envs == max_num_agents

    obss, infos = env.reset()
    for i in range(55):
        actions = [env.action_space.sample() for i in range(env.num_envs)]

        # Check we're not passing a thing that gets mutated
        keep_obs = copy.deepcopy(obss)
        new_obss, rews, terms, truncs, infos = env.step(actions)

        assert hash(str(keep_obs)) == hash(str(obss))
        assert len(new_obss) == max_num_agents
        assert len(rews) == max_num_agents
        assert len(terms) == max_num_agents
        assert len(truncs) == max_num_agents
        assert len(infos) == max_num_agents
        # no agent death, only env death
        if any(terms):
            assert all(terms)
        if any(truncs):
            assert all(truncs)
        obss = new_obss


@pytest.mark.parametrize("num_cpus", [0, 2])
def test_good_vecenv(num_cpus):
    num_envs = 2
    env = simple_spread_v3.parallel_env()
    max_num_agents = len(env.possible_agents) * num_envs
    env = pettingzoo_env_to_vec_env_v1(env)
    env = concat_vec_envs_v1(env, num_envs, num_cpus=num_cpus)

    obss, infos = env.reset()
    for i in range(55):
        actions = [env.action_space.sample() for i in range(env.num_envs)]

        # Check we're not passing a thing that gets mutated
        keep_obs = copy.deepcopy(obss)
        new_obss, rews, terms, truncs, infos = env.step(actions)

        assert hash(str(keep_obs)) == hash(str(obss))
        assert len(new_obss) == max_num_agents
        assert len(rews) == max_num_agents
        assert len(terms) == max_num_agents
        assert len(truncs) == max_num_agents
        assert len(infos) == max_num_agents
        # no agent death, only env death
        if any(terms):
            assert all(terms)
        if any(truncs):
            assert all(truncs)
        obss = new_obss


def test_bad_action_spaces_env():
    env = simple_world_comm_v3.parallel_env()
    with pytest.raises(AssertionError):
        env = pettingzoo_env_to_vec_env_v1(env)


def test_env_black_death_assertion():
    env = knights_archers_zombies_v10.parallel_env(spawn_delay=50, max_cycles=2000)
    env = pettingzoo_env_to_vec_env_v1(env)
    with pytest.raises(AssertionError):
        for i in range(100):
            env.reset()
            for i in range(2000):
                actions = [env.action_space.sample() for i in range(env.num_envs)]
                obss, rews, terms, truncs, infos = env.step(actions)


def test_env_black_death_wrapper():
    env = knights_archers_zombies_v10.parallel_env(spawn_delay=50, max_cycles=300)
    env = black_death_v3(env)
    env = pettingzoo_env_to_vec_env_v1(env)
    env.reset()
    for i in range(300):
        actions = [env.action_space.sample() for i in range(env.num_envs)]
        obss, rews, terms, truncs, infos = env.step(actions)


def test_terminal_obs_are_returned():
    """
    If we reach (and pass) the end of the episode, the last observation is returned in the info dict.
    """
    max_cycles = 300
    env = knights_archers_zombies_v10.parallel_env(spawn_delay=50, max_cycles=300)
    env = black_death_v3(env)
    env = pettingzoo_env_to_vec_env_v1(env)
    env.reset(seed=42)

    # run past max_cycles or until terminated - causing the env to reset and continue
    for _ in range(0, max_cycles + 10):
        actions = [env.action_space.sample() for i in range(env.num_envs)]
        _, _, terms, truncs, infos = env.step(actions)

        env_done = (np.array(terms) | np.array(truncs)).all()

        if env_done:
            # check we have infos for all agents
            assert len(infos) == len(env.par_env.possible_agents)
            # check infos contain terminal_observation
            for info in infos:
                assert "terminal_observation" in info
