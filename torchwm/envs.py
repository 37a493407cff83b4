"""Envs torchwm ships for benchmarks: ``torchwm/Synthetic-v0``, a CPU-bound env of known cost.

``SyntheticEnv`` burns a fixed amount of CPU per step (a busy loop on
`time.process_time`, not a sleep, so that it competes for cores like a real
simulator and costs the same CPU on a busy machine) and returns a 4x84x84 uint8 observation,
the shape of a stacked Atari frame. It is registered with Gymnasium when this module is imported
(``import torchwm`` does), by an entry-point string, so workers started by
spawn or forkserver can build it too.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

SYNTHETIC_ID = "torchwm/Synthetic-v0"


class SyntheticEnv(gym.Env):
    """Costs ``step_seconds`` of CPU per step; episodes last ``episode_length`` steps (then truncate).

    Example:
        >>> import gymnasium as gym, torchwm
        >>> env = gym.make("torchwm/Synthetic-v0", step_seconds=0.0001)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((4, 84, 84), dtype('uint8'))
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        step_seconds: float = 0.0004,
        episode_length: int = 1000,
        obs_shape: tuple[int, ...] = (4, 84, 84),
    ) -> None:
        self.step_seconds = step_seconds
        self.episode_length = episode_length
        self.observation_space = spaces.Box(0, 255, obs_shape, np.uint8)
        self.action_space = spaces.Discrete(4)
        self._obs = np.zeros(obs_shape, np.uint8)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._obs[:] = self.np_random.integers(0, 256)
        return self._obs.copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        # CPU time, not wall time: a step costs the same CPU however busy the machine is.
        end = time.process_time() + self.step_seconds
        while time.process_time() < end:
            pass
        self._t += 1
        self._obs[0, 0, 0] = (int(action) + self._t) % 256
        return self._obs.copy(), 1.0, False, self._t >= self.episode_length, {}


if SYNTHETIC_ID not in gym.registry:
    gym.register(SYNTHETIC_ID, entry_point="torchwm.envs:SyntheticEnv")
