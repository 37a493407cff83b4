"""`torchwm.spaces`: the spaces batched as plain arrays (one NumPy array with a leading env dimension) and
those that take the general path, as Gymnasium's own batching makes them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array

from torchwm.spaces import ARRAY_SPACES

ARRAYS = [
    gym.spaces.Box(0, 1, (2, 3)),
    gym.spaces.Discrete(5),
    gym.spaces.MultiDiscrete([2, 3]),
    gym.spaces.MultiBinary(4),
]
GENERAL = [
    gym.spaces.Dict({"a": gym.spaces.Discrete(2)}),
    gym.spaces.Tuple([gym.spaces.Discrete(2)]),
    gym.spaces.Text(4),
]


def test_the_array_spaces_batch_into_one_array_with_a_leading_env_dimension():
    for space in ARRAYS:
        assert isinstance(space, ARRAY_SPACES)
        batch = create_empty_array(space, n=3)
        assert isinstance(batch, np.ndarray) and batch.shape == (3, *space.shape), space
        assert batch_space(space, 3).shape == batch.shape


def test_every_other_space_is_not_an_array_space():
    for space in GENERAL:
        assert not isinstance(space, ARRAY_SPACES)
        assert not isinstance(create_empty_array(space, n=3), np.ndarray), space
