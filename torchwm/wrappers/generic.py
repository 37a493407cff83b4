"""Wrappers for any env, each a thin, named front to a Gymnasium wrapper class.

``frame_stack`` is `FrameStackObservation`, ``clip_reward`` is `ClipReward`,
``resize`` is `ResizeObservation` and ``pixels`` is `AddRenderObservation`.
torchwm only gives them stable names and option names that a config file can
set; the behaviour is Gymnasium's, so stacks built from names give the same
arrays as the same classes put together by hand.
"""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
from gymnasium.wrappers import AddRenderObservation, ClipReward, FrameStackObservation, ResizeObservation


def frame_stack(env: gym.Env, stack_size: int = 4, padding: Literal["zero", "reset"] = "zero") -> gym.Env:
    """Gymnasium's `FrameStackObservation`: the last ``stack_size`` observations, oldest first.

    Args:
        env: any env.
        stack_size: how many observations to stack.
        padding: what fills the stack after a reset: zeros, or copies of the reset observation.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "frame_stack", "stack_size": 3}])
        >>> env.observation_space.shape
        (3, 4)
    """
    return FrameStackObservation(env, stack_size, padding_type=padding)


def check_clip_bounds(min_reward: float, max_reward: float) -> None:
    if min_reward > max_reward:
        raise ValueError(
            f"wrapper 'clip_reward': min_reward must be <= max_reward, got min_reward={min_reward} "
            f"and max_reward={max_reward}"
        )


def clip_reward(env: gym.Env, min_reward: float = -1.0, max_reward: float = 1.0) -> gym.Env:
    """Gymnasium's `ClipReward`: rewards clipped to ``[min_reward, max_reward]``.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "clip_reward", "max_reward": 0.5}])
        >>> _ = env.reset(seed=0)
        >>> float(env.step(0)[1])
        0.5
    """
    check_clip_bounds(min_reward, max_reward)
    return ClipReward(env, min_reward, max_reward)


def check_size(wrapper: str, width: int | None, height: int | None, optional: bool) -> None:
    if optional and width is None and height is None:
        return
    if width is None or height is None or width <= 0 or height <= 0:
        wanted = "both width and height (positive ints) or neither" if optional else "width and height as positive ints"
        raise ValueError(f"wrapper {wrapper!r} needs {wanted}, got width={width!r}, height={height!r}")


def resize(env: gym.Env, width: int, height: int) -> gym.Env:
    """Gymnasium's `ResizeObservation` to ``width`` x ``height`` (an image observation of rank 2 or 3).

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", size=(64, 64), wrappers=[{"name": "resize", "width": 32, "height": 16}])
        >>> env.observation_space.shape
        (16, 32, 3)
    """
    check_size("resize", width, height, optional=False)
    return ResizeObservation(env, (height, width))


def pixels(env: gym.Env, width: int | None = None, height: int | None = None) -> gym.Env:
    """Observations become the env's rendered RGB frames (`AddRenderObservation`), resized if asked.

    The env is made with ``render_mode="rgb_array"``. ``make_env(id, size=(w, h))`` puts this
    wrapper first in the stack.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "pixels", "width": 64, "height": 48}])
        >>> env.observation_space.shape
        (48, 64, 3)
    """
    check_size("pixels", width, height, optional=True)
    env = AddRenderObservation(env, render_only=True)
    if width is not None and height is not None:
        env = ResizeObservation(env, (height, width))
    return env
