"""Seeded autoresets: every episode of every env starts from a seed of its own (``autoreset_seeds=True``).

Env ``i`` of a vector env seeded ``s`` starts its first episode with Gymnasium's seed ``s + i``; its
``k``-th episode after that (``k = 0, 1, ...``: autoresets, and resets without a seed) starts with
`episode_seed` ``(s, i, k)``: the first word of ``numpy.random.SeedSequence(s).spawn(num_envs)[i]``'s
``k``-th child, that is of ``SeedSequence(s, spawn_key=(i, k))``. So a run is reproducible from its
seed, no two episodes share a seed, and the seeds depend neither on the backend nor on how the envs are
split over workers. Each episode's seed is in the infos of the reset or step that starts it, under
`EPISODE_SEED` (``gym.make(id).reset(seed=...)`` with it starts the same episode).

The drawing is done by `EpisodeSeeds`, a wrapper around each env, put there by
`torchwm.building.spec_env_fns`: it is built with the env wherever a backend builds it (the caller's
process, a worker, a Ray actor, a restarted worker), so every backend that builds its envs from the
spec's factories seeds alike, and a vector env without the option has no wrapper and pays nothing.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

EPISODE_SEED = "episode_seed"

# SeedSequence takes entropy >= 0: an env seeded below its index (a list of seeds) wraps around.
_ENTROPY_MODULUS = 2**128


def episode_seed(seed: int, env_index: int, episode: int) -> int:
    """The seed of episode ``episode`` (0: the first after the seeded one) of env ``env_index`` of a vector
    env seeded ``seed``: ``SeedSequence(seed).spawn(n)[env_index].spawn(episode + 1)[episode]``'s first
    word, an int that ``env.reset(seed=...)`` takes."""
    sequence = np.random.SeedSequence(seed, spawn_key=(env_index, episode))
    return int(sequence.generate_state(1)[0])


class EpisodeSeeds(gym.Wrapper):
    """Resets its env with a seed drawn for each episode that brings none, and reports every episode's
    seed in the reset's info (`EPISODE_SEED`).

    Args:
        env: the env.
        env_index: its index in the vector env (the same on every backend and split).
    """

    def __init__(self, env: gym.Env, env_index: int) -> None:
        super().__init__(env)
        self.env_index = env_index
        self._root: int | None = None  # the vector env's seed the episodes are drawn from
        self._drawn = 0  # episodes drawn since the last seeded reset

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if seed is None:
            if self._root is None:
                # No seed yet: fresh entropy, still reported, so that each episode replays.
                self._root = int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
            seed = episode_seed(self._root, self.env_index, self._drawn)
            self._drawn += 1
        else:
            # A seeded reset (seed s + i under reset(seed=s)) restarts the sequence of seed s.
            self._root = (seed - self.env_index) % _ENTROPY_MODULUS
            self._drawn = 0
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, {**info, EPISODE_SEED: seed}
