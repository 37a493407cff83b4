"""torchwm.vector.gymnasium_async: Gymnasium's asynchronous names over a vector env's reset, send and
recv, compared with Gymnasium's own AsyncVectorEnv where it defines the behaviour; and `PendingCalls` on its
own, which says what is pending in Gymnasium's words."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.error import AlreadyPendingCallError, NoAsyncCallError

import torchwm
from torchwm.vector.gymnasium_async import PendingCalls
from torchwm.vector.step_state import StepState


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


def test_pending_calls_name_the_held_reset_then_the_envs_in_flight():
    state = StepState(3, 3)
    pending = PendingCalls(state)
    assert pending.pending() is None
    options = {"difficulty": 1}
    pending.hold_reset(5, options)
    options["difficulty"] = 2  # the caller's dict, changed after reset_async
    with pytest.raises(
        AlreadyPendingCallError,
        match=r"^Calling `call_async` while waiting for a pending call to `reset` to complete "
        r"\(reset_async\(\) was called: reset_wait\(\) first\)\.$",
    ):
        pending.check_nothing_pending("call_async")
    assert pending.take_reset() == (5, {"difficulty": 1})
    with pytest.raises(NoAsyncCallError, match="without any prior call to `reset_async`"):
        pending.take_reset()
    state.was_reset(np.arange(3))
    state.sent(np.array([2, 0]), np.array([2, 0]), False)
    assert pending.pending() == "step"
    with pytest.raises(AlreadyPendingCallError, match=r"pending call to `step` .*envs \[0, 2\] have actions"):
        pending.check_nothing_pending("set_attr")
    pending.check_can_reset(np.array([1]), resets_while_stepping=True)  # env 1 is not in flight
    with pytest.raises(AlreadyPendingCallError, match="envs \\[0, 2\\] have actions in flight"):
        pending.check_can_reset(np.array([1]), resets_while_stepping=False)
