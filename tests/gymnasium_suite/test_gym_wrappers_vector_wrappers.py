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
# Ported from Gymnasium 1.4.0 tests/wrappers/vector/test_vector_wrappers.py (commit 95a790e19, "Update to
# v1.4.0"). Adapted: gymnasium.make_vec(...) is the suite's `make_vec` fixture, torchwm.make_vec on every
# backend (vectorization_mode is replaced by the backend; see adapter.py); the CarRacing-v3 cases are
# skipped without Box2D and run on sync only.

"""Tests that the vectorised wrappers operate identically in `VectorEnv(Wrapper)` and
`VectorWrapper(VectorEnv)`.

The exception is the data converter wrappers
 * Data conversion wrappers - `JaxToTorch`, `JaxToNumpy` and `NumpyToJax`
 * Normalizing wrappers - `NormalizeObservation` and `NormalizeReward`
 * Different implementations - `LambdaObservation`, `LambdaReward` and `LambdaAction`
 * Different random sources - `StickyAction`
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gymnasium as gym
from gymnasium import wrappers
from gymnasium.spaces import Box, Dict, Discrete
from gymnasium.utils.env_checker import data_equivalence
from gymnasium.vector import VectorEnv
from gymnasium.vector.vector_env import AutoresetMode
from gymnasium_suite.testing_env import GenericTestEnv


@pytest.fixture
def custom_environments():
    gym.register(
        "DictObsEnv-v0",
        lambda: GenericTestEnv(
            observation_space=Dict({"a": Box(0, 1), "b": Discrete(5)})
        ),
    )

    yield

    del gym.registry["DictObsEnv-v0"]


CASES = (
    ("DictObsEnv-v0", "FilterObservation", {"filter_keys": ["a"]}),
    ("CartPole-v1", "FlattenObservation", {}),
    ("CarRacing-v3", "GrayscaleObservation", {}),
    ("CarRacing-v3", "ResizeObservation", {"shape": (35, 45)}),
    ("CarRacing-v3", "ReshapeObservation", {"shape": (96, 48, 6)}),
    (
        "CartPole-v1",
        "RescaleObservation",
        {
            "min_obs": np.array([0, -np.inf, 0, -np.inf]),
            "max_obs": np.array([1, np.inf, 1, np.inf]),
        },
    ),
    ("CarRacing-v3", "DtypeObservation", {"dtype": np.int32}),
    # ("CartPole-v1", "RenderObservation", {}),  # not implemented
    # ("CartPole-v1", "TimeAwareObservation", {}),  # not implemented
    # ("CartPole-v1", "FrameStackObservation", {}),  # not implemented
    # ("CartPole-v1", "DelayObservation", {}),  # not implemented
    ("MountainCarContinuous-v0", "ClipAction", {}),
    (
        "MountainCarContinuous-v0",
        "RescaleAction",
        {"min_action": 1, "max_action": 2},
    ),
    ("CartPole-v1", "ClipReward", {"min_reward": -0.25, "max_reward": 0.75}),
)


@pytest.mark.parametrize(
    "autoreset_mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]
)
@pytest.mark.parametrize("num_envs", (1, 3))
# The vector wrappers act on the vector env's results and render(), not on how they travel: subproc's pipe is
# the rest of the suite's, and its pool is shmem's. CarRacing (most of this module's time, rendering its
# track) runs on sync only: its wrappers' arrays reach the parent as the other image envs' do (CI time).
@pytest.mark.parametrize(
    "backend, env_id, wrapper_name, kwargs",
    [
        (backend, *case)
        for case in CASES
        for backend in (("sync",) if case[0] == "CarRacing-v3" else ("sync", "shmem"))
    ],
)
def test_vector_wrapper_equivalence(
    make_vec,
    autoreset_mode: AutoresetMode,
    num_envs: int,
    env_id: str,
    wrapper_name: str,
    kwargs: dict[str, Any],
    custom_environments,  # pytest fixture
    vectorization_mode: str = "sync",
    num_steps: int = 50,
):
    if env_id == "CarRacing-v3":
        pytest.importorskip("Box2D",
                            reason="CarRacing-v3 needs box2d (gymnasium[box2d]), an optional dependency")
    vector_wrapper = getattr(wrappers.vector, wrapper_name)
    wrapper_vector_env: VectorEnv = vector_wrapper(
        make_vec(
            id=env_id, num_envs=num_envs, vectorization_mode=vectorization_mode
        ),
        **kwargs,
    )
    env_wrapper = getattr(wrappers, wrapper_name)
    vector_wrapper_env = make_vec(
        id=env_id,
        num_envs=num_envs,
        vectorization_mode=vectorization_mode,
        wrappers=(lambda env: env_wrapper(env, **kwargs),),
    )

    assert wrapper_vector_env.action_space == vector_wrapper_env.action_space
    assert wrapper_vector_env.observation_space == vector_wrapper_env.observation_space
    assert (
        wrapper_vector_env.single_action_space == vector_wrapper_env.single_action_space
    )
    assert (
        wrapper_vector_env.single_observation_space
        == vector_wrapper_env.single_observation_space
    )

    assert wrapper_vector_env.num_envs == vector_wrapper_env.num_envs

    wrapper_vector_obs, wrapper_vector_info = wrapper_vector_env.reset(seed=123)
    vector_wrapper_obs, vector_wrapper_info = vector_wrapper_env.reset(seed=123)

    assert data_equivalence(wrapper_vector_obs, vector_wrapper_obs)
    assert data_equivalence(wrapper_vector_info, vector_wrapper_info)

    for _ in range(num_steps):
        action = wrapper_vector_env.action_space.sample()
        wrapper_vector_step_returns = wrapper_vector_env.step(action)
        vector_wrapper_step_returns = vector_wrapper_env.step(action)

        for wrapper_vector_return, vector_wrapper_return in zip(
            wrapper_vector_step_returns, vector_wrapper_step_returns, strict=True
        ):
            assert data_equivalence(wrapper_vector_return, vector_wrapper_return)

    wrapper_vector_env.close()
    vector_wrapper_env.close()
