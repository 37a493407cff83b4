"""`episode_statistics`: each episode's return, length and time in ``infos["episode"]``, as Gymnasium
logs them.

The factory is Gymnasium's `RecordEpisodeStatistics`, so the numbers and the format
(``info["episode"] = {"r": return, "l": length, "t": seconds}``, and on a vector env
``infos["episode"]`` with its ``infos["_episode"]`` mask) are Gymnasium's. What torchwm
adds is where it goes: `torchwm.spec.resolve_wrappers` puts it directly on the env the
source makes, wherever the stack names it. So it measures the game, not the learner's
episode: on Atari with ``episodic_life`` a whole game across lives, with ``clip_reward``
the raw score, and lengths in the frames the base env steps, as CleanRL's and SB3's
Atari setups record them (`RecordEpisodeStatistics` right after ``gym.make``). The fused
Atari env records the same numbers itself (`torchwm.wrappers.atari_fused`).
"""

from __future__ import annotations

import gymnasium as gym
from gymnasium.wrappers import RecordEpisodeStatistics


def episode_statistics(env: gym.Env, buffer_length: int = 100) -> gym.Env:
    """Gymnasium's `RecordEpisodeStatistics`, placed on the env the source makes (see the module docstring).

    Args:
        env: any env.
        buffer_length: how many of the last episodes ``return_queue``, ``length_queue`` and
            ``time_queue`` keep (Gymnasium's option and default).

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", wrappers=["episode_statistics"])
        >>> _ = env.reset(seed=0)
        >>> while True:
        ...     _, _, terminated, truncated, info = env.step(0)
        ...     if terminated or truncated:
        ...         break
        >>> info["episode"]["l"] == info["episode"]["r"]  # CartPole: a reward of 1 each step
        True
    """
    return RecordEpisodeStatistics(env, buffer_length=buffer_length)
