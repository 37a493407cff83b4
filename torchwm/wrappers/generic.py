"""Wrappers for any env, each a thin, named front to a Gymnasium wrapper class.

``frame_stack`` is `FrameStackObservation`, ``clip_reward`` is `ClipReward`,
``resize`` is `ResizeObservation` and ``pixels`` is `AddRenderObservation`.
torchwm only gives them stable names and option names that a config file can
set; the behaviour is Gymnasium's, so stacks built from names give the same
arrays as the same classes put together by hand.

One addition: ``frame_stack`` refuses a stack the machine's memory cannot hold
with a `MemoryError` (numpy's words, so that ``torchwm run`` names the option),
before Gymnasium fills its arrays; filling them would end in the kernel's
out-of-memory kill instead, where the kernel lets a process ask for more than it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import (
    AddRenderObservation,
    ClipReward,
    FrameStackObservation,
    ResizeObservation,
    TransformObservation,
)

from torchwm.spaces import ARRAY_SPACES


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
    if np.issubdtype(type(stack_size), np.integer) and stack_size > 0:  # else Gymnasium's own error
        _check_stack_fits(env.observation_space, int(stack_size))
    return FrameStackObservation(env, stack_size, padding_type=padding)


def _space_nbytes(space: gym.Space) -> int:
    """Bytes of one observation of ``space`` as Gymnasium batches it (0 for spaces it cannot say)."""
    if isinstance(space, ARRAY_SPACES):
        return int(np.prod(space.shape or (), dtype=np.float64)) * np.dtype(space.dtype).itemsize
    if isinstance(space, spaces.Dict | spaces.Tuple):
        subspaces = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return sum(_space_nbytes(subspace) for subspace in subspaces)
    return 0


def _available_memory() -> int | None:
    """Bytes of memory and swap this machine can still give (Linux's ``/proc/meminfo``), None elsewhere."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in meminfo if "kB" in line}
    except OSError:
        return None
    return fields.get("MemAvailable", 0) + fields.get("SwapFree", 0)


def _check_stack_fits(space: gym.Space, stack_size: int) -> None:
    # FrameStackObservation holds three arrays of stack_size observations (the stacked space's low and
    # high, and the stack itself) and a deque and a list of stack_size references.
    row = _space_nbytes(space)
    needed = stack_size * (3 * row + 16)
    available = _available_memory()
    if available is None or needed <= available:
        return
    shape = ", ".join(str(side) for side in (stack_size, *(space.shape or ())))
    dtype = space.dtype if isinstance(space, spaces.Box) else "of the space's dtypes"
    raise MemoryError(
        f"Unable to allocate {stack_size * row / 2**30:.3g} GiB for an array with shape ({shape}) and data "
        f"type {dtype}: FrameStackObservation keeps three such arrays and {stack_size} references, "
        f"{needed / 2**30:.3g} GiB in all, and this machine has {available / 2**30:.3g} GiB of memory and "
        "swap available"
    )


def _bounds_tuple(value: Any) -> tuple[float, ...]:
    array = np.asarray(value, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"expected a number or a 1-d array of numbers, got an array of shape {array.shape}")
    return tuple(array.tolist())


if TYPE_CHECKING:
    RewardArray = Sequence[float] | np.ndarray
else:

    class RewardArray:
        """Elementwise reward bounds, as Gymnasium's ClipReward takes them: a 1-d array or a list of numbers.

        `torchwm.spec` keeps them as a tuple of floats (a spec compares and dumps to a config file as
        any other option); `clip_reward` gives Gymnasium's wrapper the array.
        """

        @classmethod
        def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
            from pydantic_core import core_schema

            from_array = core_schema.no_info_after_validator_function(
                _bounds_tuple, core_schema.is_instance_schema(np.ndarray)
            )
            return core_schema.union_schema(
                [from_array, core_schema.tuple_variable_schema(core_schema.float_schema())]
            )


def _bound(value: Any) -> Any:
    """A bound as ClipReward computes with it: a number, None, or an array (from a tuple or list)."""
    return np.asarray(value, dtype=np.float64) if isinstance(value, (tuple, list)) else value


def clip_reward(
    env: gym.Env, min_reward: float | RewardArray | None = -1.0, max_reward: float | RewardArray | None = 1.0
) -> gym.Env:
    """Gymnasium's `ClipReward`: rewards clipped to ``[min_reward, max_reward]``.

    Either bound may be None (no bound on that side) or an array (elementwise bounds), as in
    Gymnasium; bounds it refuses (both None, ``min_reward > max_reward``) raise its
    ``gymnasium.error.InvalidBound``. The defaults are the Atari clip, ``[-1, 1]``.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "clip_reward", "max_reward": 0.5}])
        >>> _ = env.reset(seed=0)
        >>> float(env.step(0)[1])
        0.5
    """
    return ClipReward(env, _bound(min_reward), _bound(max_reward))


def check_size(wrapper: str, width: int | None, height: int | None, optional: bool) -> None:
    if optional and width is None and height is None:
        return
    if width is None or height is None or width <= 0 or height <= 0:
        wanted = (
            "both width and height (positive ints) or neither"
            if optional
            else "width and height as positive ints"
        )
        raise ValueError(f"wrapper {wrapper!r} needs {wanted}, got width={width!r}, height={height!r}")


def resize(env: gym.Env, width: int, height: int) -> gym.Env:
    """Gymnasium's `ResizeObservation` to ``width`` x ``height`` (an image observation of rank 2 or 3).

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env(
        ...     "CartPole-v1", size=(64, 64), wrappers=[{"name": "resize", "width": 32, "height": 16}]
        ... )
        >>> env.observation_space.shape
        (16, 32, 3)
    """
    check_size("resize", width, height, optional=False)
    return ResizeObservation(env, (height, width))


def pixels(
    env: gym.Env,
    width: int | None = None,
    height: int | None = None,
    render_only: bool = True,
    render_key: str = "pixels",
    obs_key: str = "state",
) -> gym.Env:
    """Observations become the env's rendered RGB frames (`AddRenderObservation`), resized if asked.

    The env is made with ``render_mode="rgb_array"``. ``make_env(id, size=(w, h))`` puts this
    wrapper first in the stack. ``render_only``, ``render_key`` and ``obs_key`` are
    `AddRenderObservation`'s, with its defaults: ``render_only=False`` gives a dict of the env's own
    observation (under ``obs_key``) and the frame (under ``render_key``); a size resizes the frame only.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "pixels", "width": 64, "height": 48}])
        >>> env.observation_space.shape
        (48, 64, 3)
    """
    check_size("pixels", width, height, optional=True)
    env = AddRenderObservation(env, render_only=render_only, render_key=render_key, obs_key=obs_key)
    if width is None or height is None:
        return env
    if render_only:
        return ResizeObservation(env, (height, width))
    return _resize_key(env, render_key, width, height)


def _resize_key(env: gym.Env, key: str, width: int, height: int) -> gym.Env:
    """The frame under ``key`` of a dict observation resized as `ResizeObservation` resizes
    (cv2, INTER_AREA)."""
    import cv2

    space = env.observation_space
    assert isinstance(space, spaces.Dict)
    frame_space = space[key]
    assert frame_space.shape is not None  # AddRenderObservation's Box
    new_space = spaces.Dict(
        {**space.spaces, key: spaces.Box(0, 255, (height, width, *frame_space.shape[2:]), dtype=np.uint8)}
    )

    def resize_frame(obs: dict[str, Any]) -> dict[str, Any]:
        frame = cv2.resize(obs[key], (width, height), interpolation=cv2.INTER_AREA)
        return {**obs, key: frame.reshape(new_space[key].shape)}

    return TransformObservation(env, resize_frame, new_space)
