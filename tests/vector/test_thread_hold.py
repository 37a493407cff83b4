"""The one-thread hold of a vector env (`torchwm.vector.thread_hold`): one call at a time, from any thread in
turn; a second thread's call meanwhile is refused in Gymnasium's type, naming the backend and the call, and
the hold is given back whatever the call did (returned, raised)."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.errors import AlreadyPendingCallError

DEADLINE = 30.0


class GatedEnv(gym.Env):
    """A reset that says it began (``entered``) and waits for ``gate``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    gate: threading.Event | None = None
    entered: threading.Event | None = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.entered is not None:
            self.entered.set()
            self.gate.wait(DEADLINE)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.ones(1, np.float32), 1.0, False, False, {}


def in_thread(call):
    """What ``call`` returned or raised in another thread."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except Exception as error:  # noqa: BLE001 - the caller checks it
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive()
    return outcome[0]


def test_threads_may_use_a_vector_env_one_after_another():
    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as vec:
        in_thread(lambda: vec.reset(seed=0))
        obs, *_ = in_thread(lambda: vec.step(np.ones(2, dtype=np.int64)))
        assert obs.shape == (2, 4)
        assert vec.step(np.ones(2, dtype=np.int64))[0].shape == (2, 4)


def test_the_hold_is_given_back_after_a_call_that_raised():
    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as vec:
        vec.reset(seed=0)
        with pytest.raises(AttributeError):
            vec.call("no_such_attribute")
        result = in_thread(lambda: vec.step(np.ones(2, dtype=np.int64)))
        assert not isinstance(result, Exception), result


def test_a_call_while_another_thread_holds_the_env_is_refused_naming_backend_and_call():
    gate, entered = threading.Event(), threading.Event()
    vec = torchwm.make_vec_from_fns([GatedEnv, GatedEnv], backend="sync")
    for env in vec.envs:
        env.unwrapped.gate, env.unwrapped.entered = gate, entered
    resetting = threading.Thread(target=vec.reset, kwargs={"seed": 0})
    resetting.start()
    try:
        assert entered.wait(DEADLINE)
        with pytest.raises(AlreadyPendingCallError, match=r"^sync: refused .*being used from another thread"):
            vec.call("observation_space")
        with pytest.raises(gym.error.AlreadyPendingCallError):
            vec.set_attr("x", [1, 2])
    finally:
        gate.set()
        resetting.join(DEADLINE)
    assert not resetting.is_alive()
    for env in vec.envs:
        env.unwrapped.entered = None
    vec.set_attr("x", [1, 2])  # the refused call changed nothing, and the hold is free again
    assert vec.get_attr("x") == (1, 2)
    vec.close()
