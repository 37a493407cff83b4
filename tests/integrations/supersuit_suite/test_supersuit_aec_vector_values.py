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
# Ported from SuperSuit 3.11.0 test/test_vector/test_aec_vector_values.py (commit 1312e6d, "Bump version to
# 3.11.0"). Adapted: only the construction. `vectorize_aec_env_v0` is torchwm's (torchwm.multiagent.aec),
# run on the `backend` parameter (SuperSuit's num_cpus 0 and 1 are both its sync vector env; shmem is its
# multiprocessing), and PettingZoo 1.27 names knights-archers-zombies `_v11`. As in SuperSuit, test_infos,
# test_seed and test_some_done are defined and not called.

import random

import numpy as np
import pytest
from mpe2 import simple_world_comm_v3
from pettingzoo.butterfly import knights_archers_zombies_v11 as knights_archers_zombies_v10
from pettingzoo.classic import rps_v2

from torchwm.integrations.supersuit import vectorize_aec_env_v0


@pytest.mark.parametrize("backend, num_cpus_list", [("sync", [0, 1]), ("shmem", [2])])
def test_all(backend, num_cpus_list):
    NUM_ENVS = 5

    def test_vec_env(vec_env):
        vec_env.reset()
        (
            obs,
            rew,
            agent_term,
            agent_trunc,
            env_term,
            env_trunc,
            agent_passes,
            infos,
        ) = vec_env.last()
        print(np.asarray(obs).shape)
        assert len(obs) == NUM_ENVS
        act_space = vec_env.action_space(vec_env.agent_selection)
        assert np.all(np.equal(obs, vec_env.observe(vec_env.agent_selection)))
        assert len(vec_env.observe(vec_env.agent_selection)) == NUM_ENVS
        vec_env.step([act_space.sample() for _ in range(NUM_ENVS)])
        (
            obs,
            rew,
            agent_term,
            agent_trunc,
            env_term,
            env_trunc,
            agent_passes,
            infos,
        ) = vec_env.last(observe=False)
        assert obs is None

    def test_infos(vec_env):
        vec_env.reset()
        infos = vec_env.infos[vec_env.agent_selection]
        assert infos[1]["legal_moves"]

    def test_seed(vec_env):
        vec_env.reset(seed=4)

    def test_some_done(vec_env):
        vec_env.reset()
        act_space = vec_env.action_space(vec_env.agent_selection)
        assert not any(done for dones in vec_env.dones.values() for done in dones)
        vec_env.step([act_space.sample() for _ in range(NUM_ENVS)])
        assert any(rew != 0 for rews in vec_env.rewards.values() for rew in rews)
        any_done_first = any(done for dones in vec_env.dones.values() for done in dones)
        vec_env.step([act_space.sample() for _ in range(NUM_ENVS)])
        any_done_second = any(done for dones in vec_env.dones.values() for done in dones)
        assert any_done_first and any_done_second

    def select_action(vec_env, passes, i):
        my_info = vec_env.infos[vec_env.agent_selection][i]
        if False and not passes[i] and "legal_moves" in my_info:
            return random.choice(my_info["legal_moves"])
        else:
            act_space = vec_env.action_space(vec_env.agent_selection)
            return act_space.sample()

    for num_cpus in num_cpus_list:
        test_vec_env(vectorize_aec_env_v0(rps_v2.env(), NUM_ENVS, num_cpus=num_cpus, backend=backend))
        test_vec_env(
            vectorize_aec_env_v0(
                knights_archers_zombies_v10.env(),
                NUM_ENVS,
                num_cpus=num_cpus,
                backend=backend,
            )
        )
        test_vec_env(
            vectorize_aec_env_v0(
                simple_world_comm_v3.env(),
                NUM_ENVS,
                num_cpus=num_cpus,
                backend=backend,
            )
        )
