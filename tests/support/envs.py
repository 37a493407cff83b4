"""Envs torchwm's own tests register and step (the conformance kit's envs are `torchwm.testing.envs`)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class SlowOnOneEnv(gym.Env):
    """Action 1 sleeps ``delay`` seconds in step; action 0 returns at once. The tests register it at run
    time, each under an id of its own."""

    def __init__(self, delay: float = 0.3) -> None:
        self.delay = delay
        self.observation_space = spaces.Box(0, 100, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t, self.np_random.integers(100)], np.float32), {}

    def step(self, action):
        if action == 1:
            time.sleep(self.delay)
        self.t += 1
        return np.array([self.t, action], np.float32), float(action), False, False, {}
