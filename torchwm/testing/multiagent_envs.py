"""The PettingZoo env the multi-agent conformance checks run on: `CountdownAgentsEnv`.

`CountdownEnv`'s multi-agent sibling (`torchwm.testing.envs`): a parallel env of three agents whose
episodes last 3 to 7 steps, drawn from the reset seed, that can be made slow or made to end its worker
process (``delay``, ``crash``, set with `arm`). It imports PettingZoo, so the checks import this module
only once they know PettingZoo is installed.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv


class CountdownAgentsEnv(ParallelEnv):
    """Agents ``a_0..a_{n-1}`` that end their episode together after 3 to 7 steps (even: terminated, odd:
    truncated). Agent ``k``'s observation is ``[k, steps left, a seeded draw, its last action]`` and its
    reward ``steps * (k + 1) + 0.5 * action``, so that a row out of place, an action given to the wrong
    agent or a reward made up changes the arrays."""

    metadata = {"name": "countdown_agents_v0", "render_modes": []}
    # Seconds each step sleeps (`arm`): a slow env among fast ones.
    delay = 0.0
    # A process id (`arm`): the next step ends the process it runs in (a worker's crash), unless that is
    # the checks' own process (where a backend of threads runs its envs).
    crash = 0

    def __init__(self, num_agents: int = 3) -> None:
        self.possible_agents = [f"a_{k}" for k in range(num_agents)]
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.length = self.steps = 0
        self.mark = 0.0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-np.inf, np.inf, (4,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _obs(self, k: int, action: int) -> np.ndarray:
        return np.array([k, self.length - self.steps, self.mark, action], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.length = int(self.rng.integers(3, 8))
        self.mark = float(self.rng.random())
        self.steps = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(k, -1) for k, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.delay:
            time.sleep(self.delay)
        if self.crash and self.crash != os.getpid():
            os._exit(3)
        self.steps += 1
        ended = self.steps >= self.length
        terminated = ended and self.length % 2 == 0
        obs, rewards, terminations, truncations, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            k = self.possible_agents.index(agent)
            action = int(actions[agent])
            obs[agent] = self._obs(k, action)
            rewards[agent] = float(self.steps * (k + 1) + 0.5 * action)
            terminations[agent] = terminated
            truncations[agent] = ended and not terminated
            infos[agent] = {"steps": self.steps}
        if ended:
            self.agents = []
        return obs, rewards, terminations, truncations, infos


def countdown_agents(num_agents: int = 3) -> Any:
    """A zero-argument factory of `CountdownAgentsEnv` (picklable, for every backend)."""
    return functools.partial(CountdownAgentsEnv, num_agents)


def arm(agents_env: Any, name: str, value: Any) -> None:
    """Set ``delay`` or ``crash`` on the PettingZoo env under a multi-agent env's `AgentsEnv` (run where
    the env lives, with the vector env's ``call``)."""
    setattr(agents_env.par_env, name, value)
