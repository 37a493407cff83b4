"""`torchwm.testing.target`: what a check is given (`BackendUnderTest`: the backend's options, skips and
envs, and Gymnasium's reference) and the comparisons the checks share, whose messages say what differs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from torchwm.testing.target import (
    BackendUnderTest,
    assert_same,
    assert_same_info,
    env_info,
    raises,
    random_actions,
)


def test_a_backend_under_test_makes_its_envs_and_gymnasiums_reference_of_the_same_env():
    target = BackendUnderTest("sync")
    envs = target.make(3)
    reference = target.reference(3, "next_step")
    try:
        assert isinstance(reference, gym.vector.SyncVectorEnv) and envs.num_envs == reference.num_envs == 3
        assert envs.single_observation_space == reference.single_observation_space
        assert np.array_equal(envs.reset(seed=4)[0], reference.reset(seed=4)[0])
    finally:
        envs.close()
        reference.close()
    assert target.family == "generic" and target.skips == {}


def test_the_comparisons_name_what_differs_and_where():
    assert_same("observations", 2, np.zeros(2), np.zeros(2))
    with pytest.raises(AssertionError, match=r"rewards differ at step 3:\nexpected array\(\[1, 2\]\)"):
        assert_same("rewards", 3, np.array([1, 2]), np.array([1, 3]))
    with pytest.raises(AssertionError, match=r"infos differ at step 0: expected keys \['a'\], got \['b'\]"):
        assert_same_info("infos", 0, {"a": 1}, {"b": 1})


def test_one_rows_infos_are_read_back_by_their_masks():
    infos = {"a": np.array([1, 2]), "_a": np.array([False, True]), "env_id": np.array([0, 1])}
    assert env_info(infos, 0) == {} and env_info(infos, 1) == {"a": 2}


def test_random_actions_repeat_for_a_seed_and_raises_returns_the_error():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    first, again = random_actions(envs, 4, seed=1), random_actions(envs, 4, seed=1)
    assert len(first) == 4 and all(np.array_equal(a, b) and a.shape == (2,) for a, b in zip(first, again))
    error = raises(lambda: 1 / 0)
    assert isinstance(error, ZeroDivisionError) and raises(lambda: None) is None
    envs.close()
