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
# Ported from SuperSuit 3.11.0 test/test_vector/test_gym_vector.py (commit 1312e6d, "Bump version to 3.11.0"):
# its PettingZoo case only, test_multiagent_mutliproc_single_proc_equivalency (the others vectorize
# single-agent Gymnasium envs). Adapted: only the construction. The SuperSuit calls are torchwm's
# (torchwm.multiagent); the test, skipped in SuperSuit (its multiprocessing vector env was deprecated,
# SuperSuit #188), compares sync (num_cpus=0) with shmem (num_cpus=4). Its reset line unpacks (obs, infos),
# as commented there.

import numpy as np
from mpe2 import simple_spread_v3

from torchwm.integrations.supersuit import concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1


def recursive_equal(info1, info2):
    try:
        if info1 == info2:
            return True
    except ValueError:
        if isinstance(info1, np.ndarray) and isinstance(info2, np.ndarray):
            return np.all(np.equal(info1, info2))
        elif isinstance(info1, dict) and isinstance(info2, dict):
            return all(
                (set(info1.keys()) == set(info2.keys()) and recursive_equal(info1[i], info2[i]))
                for i in info1.keys()
            )
        elif isinstance(info1, list) and isinstance(info2, list):
            return all(recursive_equal(i1, i2) for i1, i2 in zip(info1, info2))
    return False


def check_vec_env_equivalency(venv1, venv2, check_info=True):
    # assert venv1.observation_space == venv2.observation_space
    # assert venv1.action_space == venv2.action_space

    # SuperSuit's line was `obs1 = venv1.reset(seed=51)`, from before reset returned (obs, infos): it fails on
    # SuperSuit itself (two sync vector envs) with numpy's inhomogeneous-shape ValueError.
    obs1, _ = venv1.reset(seed=51)
    obs2, _ = venv2.reset(seed=51)

    for i in range(400):  # noqa: B007 - SuperSuit's loop, as written
        action = [venv1.action_space.sample() for env in range(venv1.num_envs)]
        assert np.all(np.equal(obs1, obs2))

        obs1, rew1, term1, trunc1, info1 = venv1.step(action)
        obs2, rew2, term2, trunc2, info2 = venv2.step(action)

        # uses close rather than equal due to inconsistency in reporting rewards as float32 or float64
        assert np.allclose(rew1, rew2)
        assert np.all(np.equal(term1, term2))
        assert np.all(np.equal(trunc1, trunc2))
        assert recursive_equal(info1, info2) or not check_info


def test_multiagent_mutliproc_single_proc_equivalency():
    env = simple_spread_v3.parallel_env(max_cycles=10)
    env = pettingzoo_env_to_vec_env_v1(env)
    num_envs = 3
    # uses single threaded vector environment
    venv1 = concat_vec_envs_v1(env, num_envs, num_cpus=0)
    # uses multiprocessing vector environment
    venv2 = concat_vec_envs_v1(env, num_envs, num_cpus=4)
    check_vec_env_equivalency(venv1, venv2)
