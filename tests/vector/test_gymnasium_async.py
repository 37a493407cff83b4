"""torchwm.vector.gymnasium_async: Gymnasium's asynchronous names over a vector env's reset, send and
recv, compared with Gymnasium's own AsyncVectorEnv where it defines the behaviour."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import torchwm


@pytest.fixture
def envs():
    with torchwm.make_vec("CartPole-v1", 2, backend="sync", seed=0) as vec:
        yield vec


def test_reset_async_then_reset_wait_is_reset(envs):
    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as other:
        expected, _ = other.reset(seed=5)
    envs.reset_async(seed=5)
    obs, _ = envs.reset_wait()
    np.testing.assert_array_equal(obs, expected)


def test_a_held_reset_refuses_steps_until_reset_wait(envs):
    envs.reset_async(seed=1)
    with pytest.raises(AlreadyPendingCallError):
        envs.step(np.zeros(2, dtype=np.int64))
    envs.reset_wait()
    envs.step(np.zeros(2, dtype=np.int64))


def test_reset_wait_without_reset_async_is_gymnasiums_error(envs):
    with pytest.raises(NoAsyncCallError, match="without any prior call to `reset_async`"):
        envs.reset_wait()


def test_reset_async_checks_its_arguments_at_once(envs):
    with pytest.raises(TypeError, match="seed must be an int"):
        envs.reset_async(seed="1")
    with pytest.raises(NoAsyncCallError):
        envs.reset_wait()


def test_reset_wait_keeps_its_timeout_to_its_own_call(envs):
    before = envs.timeout
    envs.reset_async(seed=0)
    envs.reset_wait(timeout=7.0)
    assert envs.timeout == before


def test_step_async_and_step_wait_are_send_and_recv(envs):
    envs.reset(seed=3)
    envs.step_async(np.ones(2, dtype=np.int64))
    assert envs.in_flight_ids == [0, 1]
    obs, rewards, _, _, _ = envs.step_wait()
    assert obs.shape == (2, 4) and rewards.tolist() == [1.0, 1.0]
    assert envs.in_flight_ids == []
