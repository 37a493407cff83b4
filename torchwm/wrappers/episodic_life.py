"""The ``episodic_life`` wrapper: a lost life ends the learner's episode, not the game.

These are the DeepMind semantics (Mnih et al. 2015) as stable-baselines3's
``EpisodicLifeEnv`` implements them. A step that loses a life (and leaves at
least one) returns ``terminated=True``; the next ``reset()`` does not restart
the emulator but takes one no-op step and returns its observation, so the
game goes on with one life less. Only a real game over (or a truncation)
makes ``reset()`` restart the game. A reset given a ``seed`` always
restarts, so that seeding gives the same start as Gymnasium's.

Games without lives (Pong: ``ale.lives()`` is always 0) never lose one, and
the wrapper changes nothing there.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from torchwm.env_state import check_state_keys
from torchwm.wrappers.atari import ale_of


class EpisodicLifeEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """End the episode on a life loss; restart the game only at game over.

    Args:
        env: an ALE env, usually under ``atari_preprocessing``.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("ALE/Breakout-v5", wrappers=["atari_preprocessing", "episodic_life"])
        >>> obs, info = env.reset(seed=0)
        >>> info["lives"]
        5
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        self._ale = ale_of(env, "episodic_life")
        self.lives = 0
        self.was_real_done = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.was_real_done = terminated or truncated
        lives = self._ale.lives()
        # lives == 0 after a loss is the game over itself, which `terminated` already says.
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self.was_real_done or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            # A no-op step moves on from the lost life; it may itself end the game.
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.lives = self._ale.lives()
        return obs, info

    # Its state for clone_state (torchwm.plugin_api.StatefulLayer): the lives it counts and whether the
    # last end was the game's.
    def get_torchwm_state(self) -> dict[str, Any]:
        return {"lives": self.lives, "was_real_done": self.was_real_done}

    def set_torchwm_state(self, state: dict[str, Any]) -> None:
        self.lives = state["lives"]
        self.was_real_done = state["was_real_done"]

    @staticmethod
    def check_torchwm_state(state: Any) -> None:
        check_state_keys("EpisodicLifeEnv", state, ("lives", "was_real_done"))


def episodic_life(env: gym.Env) -> gym.Env:
    """`EpisodicLifeEnv`: a lost life ends the learner's episode while the game goes on."""
    return EpisodicLifeEnv(env)
