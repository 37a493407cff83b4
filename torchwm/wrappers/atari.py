"""Glue between torchwm's Atari wrapper names and Gymnasium's `AtariPreprocessing`.

`atari_preprocessing` is registered with ``family="atari"`` and asks for an
env made with ``frameskip=1``, because AtariPreprocessing repeats each action
itself and max-pools the last two frames. The helpers here find the ALE
interface and the action meanings under any stack of wrappers, which
`episodic_life`, `fire_reset` and the fused env share.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.wrappers import AtariPreprocessing

from torchwm.errors import InvalidOptionError


def atari_preprocessing(
    env: gym.Env,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int | tuple[int, int] = 84,
    grayscale: bool = True,
    terminal_on_life_loss: bool = False,
    scale_obs: bool = False,
    grayscale_newaxis: bool = False,
) -> gym.Env:
    """Gymnasium's `AtariPreprocessing` (no-op reset, frame skip with max-pool, resize, grayscale).

    Args:
        env: an ALE env made with ``frameskip=1``.
        noop_max: at most this many no-ops after each reset (1 to ``noop_max``, drawn from the
            env's ``np_random``); 0 turns them off.
        frame_skip: frames each action is repeated for; the last two are max-pooled.
        screen_size: an int for square frames, or ``(width, height)`` as Gymnasium takes it: frames are
            then ``height`` rows of ``width`` pixels.
        grayscale: grayscale ``(h, w)`` frames, else RGB ``(h, w, 3)``.
        terminal_on_life_loss: a lost life ends the episode *and* the next reset restarts the game
            (Gymnasium's meaning; `episodic_life` is the DeepMind variant that keeps the game going).
        scale_obs: float32 observations in ``[0, 1]`` instead of uint8.
        grayscale_newaxis: grayscale frames get a channel axis, ``(h, w, 1)``.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("ALE/Pong-v5", wrappers=["atari_preprocessing"], fused=False)
        >>> env.observation_space.shape
        (84, 84)
        >>> env = torchwm.make_env(
        ...     "ALE/Pong-v5",
        ...     wrappers=[{"name": "atari_preprocessing", "screen_size": (64, 96)}],
        ...     fused=False,
        ... )
        >>> env.observation_space.shape
        (96, 64)
    """
    return AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        grayscale_obs=grayscale,
        terminal_on_life_loss=terminal_on_life_loss,
        scale_obs=scale_obs,
        grayscale_newaxis=grayscale_newaxis,
    )


def check_preprocessing_options(options: dict[str, Any]) -> None:
    """Refuse the `atari_preprocessing` options Gymnasium's `AtariPreprocessing` refuses once it is built
    (``frame_skip`` < 1, a ``screen_size`` that is not positive, ``noop_max`` < 0, checked in its order),
    before any env is.

    Raises:
        InvalidOptionError: the ``ValueError`` Gymnasium raises (also ``gymnasium.error.Error``), naming
            the option. The message holds Gymnasium's own sentence, which code and tests written against
            Gymnasium match, then torchwm's.
    """
    frame_skip = options.get("frame_skip", 1)
    if frame_skip < 1:
        raise InvalidOptionError(
            f"atari_preprocessing(frame_skip={frame_skip!r}): Expect the `frame_skip` to be positive, "
            f"actually: {frame_skip} (frame_skip must be >= 1; ALE's vector env calls it frameskip)",
            "frame_skip",
        )
    screen_size = options.get("screen_size", 84)
    if min(screen_dims(screen_size)) < 1:
        raise InvalidOptionError(
            f"atari_preprocessing(screen_size={screen_size!r}): Expect the `screen_size` to be positive, "
            f"actually: {screen_size} (screen_size must be a positive int or (width, height) of positive "
            f"ints)",
            "screen_size",
        )
    noop_max = options.get("noop_max", 0)
    if noop_max < 0:
        raise InvalidOptionError(
            f"atari_preprocessing(noop_max={noop_max!r}): Expect the `noop_max` to be non-negative, "
            f"actually: {noop_max} (noop_max must be >= 0)",
            "noop_max",
        )


def screen_dims(screen_size: int | tuple[int, int]) -> tuple[int, int]:
    """``(width, height)`` of `atari_preprocessing`'s ``screen_size`` (an int is a square), as Gymnasium
    reads it."""
    if isinstance(screen_size, tuple):
        return screen_size
    return screen_size, screen_size


def ale_of(env: gym.Env, wrapper: str) -> Any:
    """The ``ale_py.ALEInterface`` under ``env``, or a `ValueError` naming ``wrapper``."""
    ale = getattr(env.unwrapped, "ale", None)
    if ale is None:
        raise ValueError(
            f"wrapper {wrapper!r} needs an ALE env (one with .unwrapped.ale), "
            f"got {type(env.unwrapped).__name__}"
        )
    return ale


def action_meanings(env: gym.Env) -> list[str]:
    """The meanings of the env's actions (``["NOOP", "FIRE", ...]``), as ALE names them."""
    ale_env: Any = env.unwrapped  # an AtariEnv, or another env that names its actions
    return list(ale_env.get_action_meanings())


def game_name(env: gym.Env) -> str:
    """The ALE game of ``env`` (``"breakout"``), for error messages."""
    return str(getattr(env.unwrapped, "_game", type(env.unwrapped).__name__))
