"""The envs the conformance checks run on: `CountdownEnv` for generic backends, Pong for Atari ones.

`CountdownEnv` is registered in Gymnasium's registry as ``torchwm/Countdown-v0`` (`COUNTDOWN_ID`) when
this module is imported, by path, so that a worker process started with ``spawn`` can make it too.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
from gymnasium import spaces

COUNTDOWN_ID = "torchwm/Countdown-v0"
ATARI_ID = "ALE/Pong-v5"
ATARI_FRAME_LIMIT = 400  # frames; with frame_skip 4, about 100 steps an episode


class CountdownEnv(gym.Env):
    """An env whose episodes last 3 to 7 steps, drawn from the reset seed.

    The observation holds the steps left, a number drawn from the env's RNG at
    reset (so envs with different seeds differ), the last action and the step
    count; the reward depends on the action. An episode of even length ends by
    termination, of odd length by truncation, so both flags are exercised.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    # Seconds each step sleeps (set per env with set_attr): a slow env among fast ones.
    delay = 0.0
    # Set True (set_attr) to make the next steps raise: one env's error among envs that step on.
    broken = False
    # A process id (set_attr): the next step ends the process it runs in (a worker's crash), unless that is
    # this process (the checks' own, where a backend of threads runs its envs).
    crash = 0
    # Seconds close() sleeps (set_attr): an env slow to close.
    close_delay = 0.0

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.render_mode = render_mode
        self.length = 0
        self.steps = 0
        self.mark = 0.0

    def _obs(self, action: int) -> np.ndarray:
        return np.array([self.length - self.steps, self.mark, action, self.steps], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.length = int(self.np_random.integers(3, 8))
        self.mark = float(self.np_random.random())
        self.steps = 0
        return self._obs(-1), {"length": self.length}

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        if self.broken:
            raise RuntimeError("CountdownEnv broke on purpose")
        if self.crash and self.crash != os.getpid():
            os._exit(3)
        self.steps += 1
        reward = float(self.steps + 0.5 * int(action))
        ended = self.steps >= self.length
        terminated = ended and self.length % 2 == 0
        truncated = ended and not terminated
        return self._obs(int(action)), reward, terminated, truncated, {"steps": self.steps}

    def close(self) -> None:
        if self.close_delay:
            time.sleep(self.close_delay)

    def render(self) -> np.ndarray:
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[: self.steps] = 255
        return frame


if COUNTDOWN_ID not in gym.registry:
    gym.register(COUNTDOWN_ID, entry_point="torchwm.testing.envs:CountdownEnv")
