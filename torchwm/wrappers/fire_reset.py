"""The ``fire_reset`` wrapper: press FIRE after each reset, for games that wait for it.

Breakout and similar games do nothing until FIRE is pressed, so an agent can
stall at the start of an episode. ALE's ``AtariVectorEnv(use_fire_reset=True)``
presses FIRE once during reset and nothing else; stable-baselines3's
``FireResetEnv`` presses FIRE (action 1) and then action 2. torchwm follows
ALE, the behaviour the ``ale-native`` backend has: one FIRE, no action 2. The
press is one step of the env below (``frame_skip`` frames under
``atari_preprocessing``; ALE presses for one frame inside its no-op budget),
its reward is dropped, and if that step ends the episode the env is reset
again. Placed above ``episodic_life``, FIRE is also pressed after each lost
life, since that wrapper's ``reset()`` is what starts the next life (as in
stable-baselines3, and as ALE's ``episodic_life=True``, which restarts with FIRE).

A game without FIRE (Freeway) raises `ValueError` at construction: a wrapper
that silently did nothing would hide a wrong stack.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from torchwm.wrappers.atari import action_meanings, game_name


def fire_action(env: gym.Env) -> int:
    """The index of FIRE in ``env``'s actions, or a `ValueError` for a game without it."""
    meanings = action_meanings(env)
    if "FIRE" not in meanings:
        raise ValueError(
            f"wrapper 'fire_reset' needs a game with a FIRE action, and {game_name(env)!r} has none "
            f"(its actions: {', '.join(meanings)}); remove fire_reset from the stack"
        )
    return meanings.index("FIRE")


class FireResetEnv(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Press FIRE once after every reset.

    Args:
        env: an ALE env whose actions include FIRE.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("ALE/Breakout-v5", wrappers=["atari_preprocessing", "fire_reset"])
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape
        (84, 84)
    """

    def __init__(self, env: gym.Env) -> None:
        if not hasattr(env.unwrapped, "get_action_meanings"):
            raise ValueError(
                f"wrapper 'fire_reset' needs an ALE env (one with get_action_meanings), "
                f"got {type(env.unwrapped).__name__}"
            )
        self.fire_action = fire_action(env)
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        _, reset_info = self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, step_info = self.env.step(self.fire_action)
        if terminated or truncated:
            return self.env.reset(seed=seed, options=options)
        # Keep the reset's own keys (``seeds``) with the counters as they are after FIRE.
        return obs, {**reset_info, **step_info}

    # Its state for clone_state (torchwm.plugin_api.StatefulLayer): none, its FIRE action is configuration.
    def get_torchwm_state(self) -> None:
        return None

    def set_torchwm_state(self, state: None) -> None:
        pass

    @staticmethod
    def check_torchwm_state(state: Any) -> None:
        if state is not None:
            raise TypeError(f"the state of FireResetEnv is None (it holds none), got {type(state).__name__}")


def fire_reset(env: gym.Env) -> gym.Env:
    """`FireResetEnv`: press FIRE once after every reset (ValueError on a game without FIRE)."""
    return FireResetEnv(env)
