"""The ``sync`` backend (`torchwm.vector.sync`): every env in the calling process, held by one thread at a
time as the pool backends hold theirs."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest

import torchwm

DEADLINE = 30.0  # seconds within which the other thread's step must end


class GatedEnv(gym.Env):
    """A step that says it began (``entered``) and waits for ``gate`` (threading.Events), so that a test
    holds a step under way."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    gate: threading.Event | None = None
    entered: threading.Event | None = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if self.entered is not None:
            self.entered.set()
        if self.gate is not None:
            self.gate.wait(DEADLINE)
        return np.ones(1, np.float32), 1.0, False, False, {}


def test_sync_refuses_a_second_thread_while_a_call_is_under_way():
    """`sync` holds the vector env for each call as the pool backends do: a second thread's call is refused
    with AlreadyPendingCallError and changes nothing (before, it ran the envs from two threads at once)."""
    gate, entered = threading.Event(), threading.Event()
    vec = torchwm.make_vec_from_fns([GatedEnv, GatedEnv], backend="sync")
    vec.reset(seed=0)
    for env in vec.envs:
        env.unwrapped.gate, env.unwrapped.entered = gate, entered
    stepping = threading.Thread(target=vec.step, args=(np.zeros(2, dtype=np.int64),))
    stepping.start()
    try:
        assert entered.wait(DEADLINE)  # the other thread's step is under way
        for call in (lambda: vec.step(np.zeros(2, dtype=np.int64)), lambda: vec.reset(seed=0), vec.render):
            with pytest.raises(gym.error.AlreadyPendingCallError, match="being used from another thread"):
                call()
    finally:
        gate.set()
        stepping.join(DEADLINE)
    assert not stepping.is_alive()
    obs, rewards, *_ = vec.step(np.zeros(2, dtype=np.int64))  # usable: nothing was left in flight
    assert rewards.tolist() == [1.0, 1.0] and obs.tolist() == [[1.0], [1.0]]
    vec.close()


class RaisesOnAction(gym.Env):
    """Raises ``ValueError`` on action 1; action 0 counts the step in its observation."""

    observation_space = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if action == 1:
            raise ValueError("the env broke on purpose")
        self.t += 1
        return np.full(1, self.t, np.float32), 0.0, False, False, {}


def test_an_env_error_names_the_envs_whose_results_the_step_dropped():
    with torchwm.make_vec_from_fns([RaisesOnAction] * 3, backend="sync") as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="on purpose") as caught:
            envs.step(np.array([0, 1, 0]))
        # The env's own exception (as Gymnasium's SyncVectorEnv raises it), naming the envs of the send:
        # env 0 took the step, its rows never came back.
        assert caught.value.dropped_env_ids == (0, 1, 2)
        assert envs.get_attr("t") == (1, 0, 0)
        with pytest.raises(ValueError) as caught:
            envs.step(np.array([1, 0]), env_ids=[2, 0])
        assert caught.value.dropped_env_ids == (0, 2)
