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
# Ported from SuperSuit 3.11.0 test/test_vector/test_pettingzoo_to_vec_gymnasium_wrappers.py (commit 1312e6d,
# "Bump version to 3.11.0"). Adapted: only the construction. The SuperSuit calls are torchwm's
# (torchwm.multiagent), and the test runs on the `num_cpus` parameter: 0 (sync, as in SuperSuit) and 2
# (shmem).

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import NormalizeObservation
from pettingzoo.butterfly import pistonball_v6

import torchwm.integrations.supersuit as ss


@pytest.mark.parametrize("num_cpus", [0, 2])
@pytest.mark.parametrize("env_fn", [pistonball_v6])
def test_vec_env_normalize_obs(env_fn, num_cpus):
    env = env_fn.parallel_env()
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    env = ss.concat_vec_envs_v1(env, 10, num_cpus=num_cpus, base_class="gymnasium")
    obs, info = env.reset()

    # Create a "dummy" class that adds gym.Env as a base class of the env
    # to satisfy the assertion.
    class PatchedEnv(env.__class__, gym.Env):
        pass

    env.__class__ = PatchedEnv

    env = NormalizeObservation(env)
    normalized_obs, normalized_info = env.reset()

    obs_range = np.amax(obs) - np.amin(obs)
    normalized_obs_range = np.amax(normalized_obs) - np.amin(normalized_obs)
    assert obs_range > 1, "Regular observation space should be greater than 1."
    assert normalized_obs_range < 1.0e-4, "Normalized observation space should be smaller than 1.0e-4."
    assert obs_range > normalized_obs_range, (
        "Normalized observation space has more range than regular observation space."
    )
