"""`FirstResetSeed`: ``make_env(seed=...)``'s seed, given to the env's first reset.

A Gymnasium env takes its seed in ``reset(seed=...)``, and some (ALE's emulator) are seeded nowhere else, so
the one env `torchwm.make_env` returns seeds its first reset through this thin wrapper: that reset uses the
seed unless it brings one of its own, and the action space is seeded with it at once. Not a registered
wrapper: no stack or config names it; vector envs seed their resets themselves
(`torchwm.vector.base.VectorEnv.reset`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class FirstResetSeed(gym.Wrapper):
    """Seeds the first reset with ``seed`` unless that reset brings its own seed; seeds the action space.

    Args:
        env: the env.
        seed: the seed of its first reset (an int >= 0, checked by the caller).
    """

    def __init__(self, env: gym.Env, seed: int) -> None:
        super().__init__(env)
        self._pending_seed: int | None = seed
        env.action_space.seed(seed)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)
