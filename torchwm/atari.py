"""`make_atari_vector_env`: ALE's own C++ vector env, from any spelling of a game's name.

It returns `ale_py.vector_env.AtariVectorEnv` itself (ALE's object, with ALE's
defaults: reward clipping and FIRE on reset unless told otherwise), for code
written against ALE. It adds what ALE's constructor lacks: game names as
torchwm resolves them (``"pong"``, ``"Pong"``, ``"ALE/Pong-v5"``,
``"space_invaders"``), ``obs_type="rgb" | "grayscale"``, checked arguments, and
a ``seed`` used by the first `reset`. For torchwm's contract and wrapper
stacks on the same engine, use ``make_vec(..., backend="ale-native")``.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from torchwm import names

OBS_TYPES = ("rgb", "grayscale")


def _ale_vector_env_class() -> type:
    """`AtariVectorEnv` with a seed for its first reset (ALE's constructor takes no seed)."""
    from ale_py.vector_env import AtariVectorEnv

    class SeededAtariVectorEnv(AtariVectorEnv):
        """ALE's `AtariVectorEnv`; the first `reset` without a seed uses the one given at construction."""

        def __init__(self, *args: Any, seed: int | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._first_reset_seed = seed
            self.action_space.seed(seed)

        def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
            if seed is None:
                seed = self._first_reset_seed
            self._first_reset_seed = None
            return super().reset(seed=seed, options=options)

    return SeededAtariVectorEnv


def ale_game(game: str) -> str:
    """ALE's ROM id (``"pong"``, ``"space_invaders"``) of any name torchwm resolves."""
    if not isinstance(game, str) or not game:
        raise TypeError(f"game must be a game name such as 'pong' or 'ALE/Pong-v5', got {game!r}")
    resolved = names.resolve(game)
    if resolved.family != "atari":
        raise ValueError(f"game must be an Atari game (an ALE id or name), got {game!r}, which resolves to the "
                         f"non-Atari env {resolved.id!r}")
    return resolved.kwargs["game"]


def make_atari_vector_env(
    game: str,
    num_envs: int = 1,
    *,
    obs_type: str = "grayscale",
    frameskip: int = 4,
    repeat_action_probability: float = 0.0,
    full_action_space: bool = False,
    seed: int | None = None,
    **ale_kwargs: Any,
) -> Any:
    """ALE's `AtariVectorEnv` for ``game``, with ALE's own defaults for everything not given.

    Args:
        game: ``"pong"``, ``"Pong"``, ``"ALE/Pong-v5"``, ``"space_invaders"``, ``"SpaceInvaders"``...
        num_envs: how many games run side by side.
        obs_type: ``"grayscale"`` (frames ``(stack, h, w)``) or ``"rgb"`` (``(stack, h, w, 3)``).
        frameskip: emulator frames per step.
        repeat_action_probability: the sticky-action probability.
        full_action_space: all 18 actions instead of the game's minimal set.
        seed: the seed of the first `reset` (env ``i`` gets ``seed + i``) and of the action space.
        **ale_kwargs: any other `AtariVectorEnv` argument (``stack_num``, ``img_height``,
            ``noop_max``, ``reward_clipping``, ``use_fire_reset``, ``batch_size``, ...).

    Returns:
        an `ale_py.vector_env.AtariVectorEnv`.

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_atari_vector_env("pong", num_envs=2, obs_type="rgb", seed=0)
        >>> obs, infos = envs.reset()
        >>> obs.shape
        (2, 4, 84, 84, 3)
        >>> envs.close()
    """
    rom = ale_game(game)
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if obs_type not in OBS_TYPES:
        raise ValueError(f"obs_type must be one of {OBS_TYPES}, got {obs_type!r}")
    if isinstance(frameskip, bool) or not isinstance(frameskip, int) or frameskip < 1:
        raise ValueError(f"frameskip must be an int >= 1, got {frameskip!r}")
    if isinstance(repeat_action_probability, bool) or not isinstance(repeat_action_probability, (int, float)) \
            or not 0.0 <= repeat_action_probability <= 1.0:
        raise ValueError(f"repeat_action_probability must be a number in [0, 1], got {repeat_action_probability!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                             or not 0 <= seed <= 2**31 - 1 - num_envs):
        raise ValueError(f"seed must be None or an int in [0, 2**31 - 1 - num_envs] (ALE takes C ints), got {seed!r}")
    cls = _ale_vector_env_class()
    accepted = [p for p in inspect.signature(cls.__mro__[1].__init__).parameters if p not in ("self", "game", "num_envs")]
    if "grayscale" in ale_kwargs:
        raise TypeError("give obs_type='rgb' or 'grayscale', not grayscale=")
    unknown = sorted(set(ale_kwargs) - set(accepted))
    if unknown:
        raise TypeError(f"make_atari_vector_env has no option {', '.join(map(repr, unknown))}; AtariVectorEnv "
                        f"takes: {', '.join(accepted)}")
    return cls(
        rom, num_envs, seed=None if seed is None else int(seed), frameskip=frameskip,
        repeat_action_probability=float(repeat_action_probability), full_action_space=bool(full_action_space),
        grayscale=obs_type == "grayscale", **ale_kwargs,
    )
