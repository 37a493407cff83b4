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
# Ported from SuperSuit 3.11.0 test/test_vector/test_env_is_wrapped.py (commit 1312e6d, "Bump version to
# 3.11.0"): its PettingZoo case only (the others wrap single-agent Gymnasium envs, which torchwm vectorizes
# with torchwm.make_vec_from_fns). Adapted: only the construction. The SuperSuit calls are torchwm's
# (torchwm.multiagent), and the test runs on the `num_cpus` parameter: 0 (sync, as in SuperSuit) and 2
# (shmem).

import pytest
from mpe2 import simple_spread_v3
from supersuit.generic_wrappers.frame_skip import frame_skip_gym

from torchwm.integrations.supersuit import concat_vec_envs_v1, pettingzoo_env_to_vec_env_v1


@pytest.mark.parametrize("num_cpus", [0, 2])
def test_env_is_wrapped_pettingzoo(num_cpus):
    env = simple_spread_v3.parallel_env()
    venv1 = pettingzoo_env_to_vec_env_v1(env)
    num_envs = 3
    venv1 = concat_vec_envs_v1(venv1, num_envs, num_cpus=num_cpus)
    assert venv1.env_is_wrapped(frame_skip_gym) == [False] * 9
