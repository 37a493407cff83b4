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
# Ported from SuperSuit 3.11.0 test/test_vector/test_aec_vector_identity_env.py (commit 1312e6d, "Bump
# version to 3.11.0"). Adapted: only the construction. `vectorize_aec_env_v0` is torchwm's
# (torchwm.multiagent.aec), the second vector env runs on the `backend` parameter (SuperSuit's num_cpus=1 is
# its sync vector env too; shmem gets num_cpus=2, its multiprocessing), and PettingZoo 1.27 names
# knights-archers-zombies `_v11`. SuperSuit's env_term/env_trunc stay zero, so its loop ran all 200000
# iterations; torchwm's say when an env's agents are all done, so the test ends after its n_envs + 1
# episodes, as it was written to.

import numpy as np
import pytest
from pettingzoo.butterfly import knights_archers_zombies_v11 as knights_archers_zombies_v10

from torchwm.integrations.supersuit import vectorize_aec_env_v0


def recursive_equal(info1, info2):
    if info1 == info2:
        return True
    return False


@pytest.mark.parametrize("backend, num_cpus", [("sync", 1), ("shmem", 2)])
def test_identical(backend, num_cpus):
    def env_fn():
        return knights_archers_zombies_v10.env()  # ,20)

    n_envs = 2
    # single threaded
    env1 = vectorize_aec_env_v0(knights_archers_zombies_v10.env(), n_envs)
    env2 = vectorize_aec_env_v0(knights_archers_zombies_v10.env(), n_envs, num_cpus=num_cpus, backend=backend)
    env1.reset(seed=42)
    env2.reset(seed=42)

    def policy(obs, agent):
        return [env1.action_space(agent).sample() for i in range(env1.num_envs)]

    envs_done = 0
    for agent in env1.agent_iter(200000):
        assert env1.agent_selection == env2.agent_selection
        agent = env1.agent_selection
        (
            obs1,
            rew1,
            agent_term1,
            agent_trunc1,
            env_term1,
            env_trunc1,
            agent_passes1,
            infos1,
        ) = env1.last()
        (
            obs2,
            rew2,
            agent_term2,
            agent_trunc2,
            env_term2,
            env_trunc2,
            agent_passes2,
            infos2,
        ) = env2.last()
        assert np.all(np.equal(obs1, obs2))
        assert np.all(np.equal(agent_term1, agent_term2))
        assert np.all(np.equal(agent_trunc1, agent_trunc2))
        assert np.all(np.equal(agent_passes1, agent_passes2))
        assert np.all(np.equal(env_term1, env_term2))
        assert np.all(np.equal(env_trunc1, env_trunc2))
        assert np.all(np.equal(obs1, obs2))
        assert all(np.all(np.equal(r1, r2)) for r1, r2 in zip(env1.rewards.values(), env2.rewards.values()))
        assert recursive_equal(infos1, infos2)
        actions = policy(obs1, agent)
        env1.step(actions)
        env2.step(actions)
        # env.envs[0].render()
        for j in range(2):
            # if agent_passes[j]:
            #     print("pass")
            if rew1[j] != 0:
                print(j, agent, rew1, agent_term1[j], agent_trunc1[j])
            if env_term1[j] or env_trunc1[j]:
                print(j, "done")
                envs_done += 1
                if envs_done == n_envs + 1:
                    print("test passed")
                    return
