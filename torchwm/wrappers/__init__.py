"""Built-in wrappers, registered under their names (a placeholder set; see issue 2 item 5)."""

from __future__ import annotations

from typing import Literal

import gymnasium as gym
from gymnasium.wrappers import AddRenderObservation, AtariPreprocessing, FrameStackObservation, ResizeObservation

from torchwm.hookspecs import hookimpl


def atari_preprocessing(env: gym.Env, noop_max: int = 30, frame_skip: int = 4, screen_size: int = 84,
                        grayscale: bool = True, terminal_on_life_loss: bool = False, scale_obs: bool = False) -> gym.Env:
    return AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
                              grayscale_obs=grayscale, terminal_on_life_loss=terminal_on_life_loss, scale_obs=scale_obs)


def frame_stack(env: gym.Env, stack_size: int = 4, padding: Literal["zero", "reset"] = "zero") -> gym.Env:
    return FrameStackObservation(env, stack_size, padding_type=padding)


def pixels(env: gym.Env, width: int | None = None, height: int | None = None) -> gym.Env:
    env = AddRenderObservation(env, render_only=True)
    if width is not None and height is not None:
        env = ResizeObservation(env, (height, width))
    return env


@hookimpl
def register_wrappers(register):
    register("atari_preprocessing", atari_preprocessing, family="atari", env_kwargs={"frameskip": 1})
    register("frame_stack", frame_stack)
    register("pixels", pixels, env_kwargs={"render_mode": "rgb_array"})
