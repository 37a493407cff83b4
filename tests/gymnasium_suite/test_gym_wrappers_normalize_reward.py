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
# Ported from Gymnasium 1.4.0 tests/wrappers/vector/test_normalize_reward.py (commit 95a790e19, "Update to
# v1.4.0"). Adapted: SyncVectorEnv(...) is the suite's `vectoriser` fixture, run on every torchwm backend
# (see adapter.py); in test_equivalence_with_wrapper the per-env reference reads SyncVectorEnv.envs and
# stays on `sync`.

"""Test suite for vector NormalizeReward wrapper."""

import numpy as np

from gymnasium import wrappers
from gymnasium.core import ActType
from gymnasium_suite.adapter import make_vector_env
from gymnasium_suite.testing_env import GenericTestEnv


def reset_func(self, seed: int | None = None, options: dict | None = None):
    self.step_id = 0
    return self.observation_space.sample(), {}


def step_func(self, action: ActType):
    self.step_id += 1
    terminated = self.step_id == 10
    return self.observation_space.sample(), float(terminated), terminated, False, {}


def thunk():
    return GenericTestEnv(step_func=step_func, reset_func=reset_func)


def test_functionality(
    vectoriser,
    n_envs=3,
    n_steps=100,
):
    env = vectoriser([thunk for _ in range(n_envs)])
    env = wrappers.vector.NormalizeReward(env)

    env.reset()
    for _ in range(n_steps):
        action = env.action_space.sample()
        env.step(action)

    env.reset()
    forward_rets = []
    accumulated_rew = 0
    for _ in range(n_steps):
        action = env.action_space.sample()
        _, reward, terminated, truncated, _ = env.step(action)
        dones = np.logical_or(terminated, truncated)
        accumulated_rew = accumulated_rew * 0.9 * dones + reward
        forward_rets.append(accumulated_rew)

    env.close()

    forward_rets = np.asarray(forward_rets)
    assert np.allclose(np.std(forward_rets, axis=0), 0.89, atol=0.1)


def test_against_wrapper(vectoriser, n_envs=3, n_steps=100, rtol=0.1, atol=0):
    vec_env = vectoriser([thunk for _ in range(n_envs)])
    vec_env = wrappers.vector.NormalizeReward(vec_env)
    vec_env.reset()
    for _ in range(n_steps):
        action = vec_env.action_space.sample()
        vec_env.step(action)

    env = wrappers.Autoreset(thunk())
    env = wrappers.NormalizeReward(env)
    env.reset()
    for _ in range(n_steps):
        action = env.action_space.sample()
        env.step(action)

    assert np.allclose(env.return_rms.var, vec_env.return_rms.var, rtol=rtol, atol=atol)


def test_equivalence_with_wrapper(vectoriser, n_steps=50):
    def thunk_with_normalize():
        return wrappers.NormalizeReward(thunk())

    per_env = make_vector_env([thunk_with_normalize], backend="sync")  # ported: reads .envs, `sync` only
    per_env.reset(seed=42)
    for _ in range(n_steps):
        per_env.step(per_env.action_space.sample())

    vec_env = vectoriser([thunk])
    vec_env = wrappers.vector.NormalizeReward(vec_env)
    vec_env.reset(seed=42)
    for _ in range(n_steps):
        vec_env.step(vec_env.action_space.sample())

    assert vec_env.return_rms.count == per_env.envs[0].return_rms.count
    assert np.allclose(
        vec_env.return_rms.mean, per_env.envs[0].return_rms.mean, rtol=1e-4
    )
    assert np.allclose(
        vec_env.return_rms.var, per_env.envs[0].return_rms.var, rtol=1e-4
    )
    per_env.close()
    vec_env.close()
