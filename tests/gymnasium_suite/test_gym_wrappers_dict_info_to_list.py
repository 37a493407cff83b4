# The MIT License
#
# Copyright (c) 2016 OpenAI
# Copyright (c) 2022 Farama Foundation
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
# Ported from Gymnasium 1.4.0 tests/wrappers/vector/test_dict_info_to_list.py (commit 95a790e19, "Update to
# v1.4.0"). Adapted: gymnasium.make_vec(...) is the suite's `make_vec` fixture, torchwm.make_vec on every
# backend (see adapter.py); test_update_info and test_errors are left out (unit tests of DictInfoToList on a
# bare VectorEnv).

"""Test suite for DictInfoTolist wrapper."""

from __future__ import annotations

import pytest

import gymnasium as gym
from gymnasium.wrappers.vector import DictInfoToList


def test_usage_in_vector_env(make_vec, env_id: str = "CartPole-v1", num_envs: int = 3):
    env = gym.make(env_id, disable_env_checker=True)
    vector_env = make_vec(env_id, num_envs=num_envs)

    DictInfoToList(vector_env)

    with pytest.raises(TypeError):
        DictInfoToList(env)


# ResetOptionAsInfo, test_update_info and test_errors are not ported: they unit-test DictInfoToList
# on a bare VectorEnv subclass that returns its reset options as infos, and build no vector env;
# see README.md.
