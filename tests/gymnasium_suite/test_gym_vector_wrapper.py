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
# Ported from Gymnasium 1.4.0 tests/vector/test_vector_wrapper.py (commit 95a790e19, "Update to v1.4.0").
# Adapted: gymnasium.make_vec(...) is the suite's `make_vec` fixture, torchwm.make_vec on every backend
# (vectorization_mode is replaced by the backend; see adapter.py).

"""Tests the vector wrappers work as expected."""

from __future__ import annotations

from typing import Any

import numpy as np

from gymnasium.core import ObsType
from gymnasium.vector import VectorWrapper


class DummyVectorWrapper(VectorWrapper):
    """Dummy Vector wrapper that contains a counter function to logging the number of times that reset is
    called."""

    def __init__(self, env):
        """Initialises the wrapper with the environment creating a counter variable."""
        super().__init__(env)

        self.counter = 0

    def reset(
        self,
        *,
        seed: int | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[ObsType, dict[str, Any]]:
        """Updates the ``counter`` each time at ``reset`` is called."""
        self.counter += 1

        return super().reset(seed=seed, options=options)


def test_vector_env_wrapper_inheritance(make_vec):
    """Test vector environment wrapper inheritance."""
    env = make_vec("FrozenLake-v1", vectorization_mode="sync")
    wrapped = DummyVectorWrapper(env)
    wrapped.reset()
    assert wrapped.counter == 1

    env.close()


def test_vector_env_wrapper_attributes(make_vec):
    """Test if `set_attr`, `call` methods for VecEnvWrapper get correctly forwarded to the vector env it is
    wrapping."""
    env = make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    wrapped = DummyVectorWrapper(
        make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    )

    assert np.allclose(wrapped.env.call("gravity"), env.call("gravity"))
    env.set_attr("gravity", [20.0, 20.0, 20.0])
    wrapped.env.set_attr("gravity", [20.0, 20.0, 20.0])
    assert np.allclose(wrapped.env.get_attr("gravity"), env.get_attr("gravity"))

    env.close()


def test_vector_env_metadata(make_vec):
    """Test if `metadata` property for VectorWrapper correctly forwards to the vector env it is wrapping."""
    env = make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    wrapped = DummyVectorWrapper(
        make_vec("CartPole-v1", num_envs=3, vectorization_mode="sync")
    )

    assert env.metadata == wrapped.metadata
    env.metadata = {"render_modes": ["rgb_array"]}
    assert env.metadata != wrapped.metadata

    env.close()
