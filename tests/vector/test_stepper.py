"""What every backend's stepper checks (`torchwm.vector.stepper`): the ``batch_size`` option, Gymnasium's
``observation_mode`` with its own words, and every env's spaces against env 0's, with Gymnasium's
error types and sentences."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from torchwm.vector.stepper import check_observation_mode, checked_batch_size, resolve_spaces

BOX = spaces.Box(-1, 1, (3,), np.float32)


@pytest.mark.parametrize("batch_size, expected", [(None, None), (1, 1), (4, 4), (np.int64(2), 2)])
def test_a_batch_size_from_1_to_num_envs_is_taken(batch_size, expected):
    assert checked_batch_size(batch_size, 4) == expected


@pytest.mark.parametrize(
    "batch_size, error, words",
    [
        (5, ValueError, "shmem: batch_size must be an int from 1 to num_envs=4, got 5"),
        (0, ValueError, "shmem: batch_size"),
        (2.5, TypeError, "shmem: batch_size"),
        (True, TypeError, "shmem: batch_size"),
    ],
)
def test_a_bad_batch_size_is_refused_naming_the_backend(batch_size, error, words):
    with pytest.raises(error, match=words):
        checked_batch_size(batch_size, 4, owner="shmem: ")


@pytest.mark.parametrize("mode", ["same", "different", (spaces.Box(-1, 1, (2, 3)), BOX)])
def test_gymnasiums_observation_modes_are_taken(mode):
    assert check_observation_mode(mode) is mode


def test_a_bad_observation_mode_is_refused_as_gymnasium_refuses_it():
    with pytest.raises(ValueError, match="Invalid `observation_mode`, expected: 'same' or 'different'"):
        check_observation_mode("similar")
    with pytest.raises(TypeError, match="Expected both elements of observation_mode to be Spaces"):
        check_observation_mode((BOX, "not a space"))
    # Gymnasium's own vector env refuses the same value with the same type.
    with pytest.raises(ValueError):
        gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")], observation_mode="similar")


def test_same_spaces_give_the_single_and_batched_spaces():
    single, batched, action = resolve_spaces("SyncVectorEnv", "same", [BOX] * 3, [spaces.Discrete(2)] * 3)
    assert single == BOX and action == spaces.Discrete(2)
    assert batched == gym.vector.utils.batch_space(BOX, 3)


def test_an_env_with_another_observation_space_is_named():
    other = spaces.Box(-2, 2, (3,), np.float32)
    with pytest.raises(
        RuntimeError, match=r"observation_mode='same'\) however .*env 2 has observation space"
    ):
        resolve_spaces("SyncVectorEnv", "same", [BOX, BOX, other], [spaces.Discrete(2)] * 3)
    # Under "different" the bounds may differ, the shape and dtype not.
    _, batched, _ = resolve_spaces("SyncVectorEnv", "different", [BOX, other], [spaces.Discrete(2)] * 2)
    assert batched.shape == (2, 3) and batched.low[1].tolist() == [-2, -2, -2]
    with pytest.raises(RuntimeError, match="do not share a common shape and dtype: env 1"):
        resolve_spaces("SyncVectorEnv", "different", [BOX, spaces.Box(-1, 1, (4,))], [spaces.Discrete(2)] * 2)


def test_an_env_with_another_action_space_is_named():
    with pytest.raises(RuntimeError, match=r"doesn't make the `single_action_space`: env 1 has action space"):
        resolve_spaces("SyncVectorEnv", "same", [BOX] * 2, [spaces.Discrete(2), spaces.Discrete(3)])
