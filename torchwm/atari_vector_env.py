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

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from torchwm import names
from torchwm.errors import InvalidOptionError, InvalidOptionTypeError

OBS_TYPES = ("rgb", "grayscale")
# ALE takes seeds as C ints and reads a negative one as "no seed", so a user's seed must be in this range.
ALE_MAX_SEED = 2**31 - 1
C_INT_MAX = 2**31 - 1


def check_ale_seeds(seeds: Sequence[Any], what: str) -> list[int | None]:
    """``seeds`` as ints (None stays None), or a clear error if ALE cannot take one of them.

    Raises:
        TypeError: a seed that is not an int (bools are not seeds).
        ValueError: a seed outside ``[0, 2**31 - 1]``, which ALE would refuse or, below 0, ignore.
    """
    checked: list[int | None] = []
    for seed in seeds:
        if seed is None:
            checked.append(None)
            continue
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"{what}: seeds must be ints in [0, {ALE_MAX_SEED}] or None, got {seed!r}")
        seed = int(seed)
        if not 0 <= seed <= ALE_MAX_SEED:
            raise ValueError(
                f"{what}: seeds must be ints in [0, {ALE_MAX_SEED}] (ALE takes C ints and ignores a "
                f"negative seed), got {seed}"
            )
        checked.append(seed)
    return checked


def check_first_seed(seed: Any, num_envs: int, what: str) -> int | None:
    """A seed ``s`` that gives env ``i`` the seed ``s + i``: all of them must fit ALE's range."""
    if seed is None:
        return None
    (first,) = check_ale_seeds([seed], what)
    assert first is not None
    if first + num_envs - 1 > ALE_MAX_SEED:
        raise ValueError(
            f"{what}: seed must be an int in [0, {ALE_MAX_SEED - num_envs + 1}] with {num_envs} envs "
            f"(env i gets seed + i, and ALE takes seeds in [0, {ALE_MAX_SEED}]), got {first}"
        )
    return first


def _int_in(low: int, high: int = C_INT_MAX) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise InvalidOptionTypeError(f"{name} must be an int, got {value!r}", name)
        if not low <= int(value) <= high:
            expected = f"an int >= {low}" if high == C_INT_MAX else f"an int in [{low}, {high}]"
            raise InvalidOptionError(f"{name} must be {expected}, got {value!r}", name)
        return int(value)

    return check


def _frameskip(name: str, value: Any) -> int:
    """``frameskip`` as ALE's `AtariVectorEnv` checks it, with ALE's sentence first (code and tests
    written against ALE match it), then torchwm's; numpy ints are taken too."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidOptionTypeError(
            f"Invalid frameskip type: {type(value)}. {name} must be an int, got {value!r}", name
        )
    if value <= 0:
        raise InvalidOptionError(
            f"Invalid frameskip of {value}, frameskip must be positive. {name} must be an int >= 1, "
            f"got {value!r}",
            name,
        )
    return _int_in(1)(name, value)


def _probability(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidOptionTypeError(f"{name} must be a number in [0, 1], got {value!r}", name)
    if math.isnan(value) or not 0.0 <= float(value) <= 1.0:
        raise InvalidOptionError(f"{name} must be a number in [0, 1], got {value!r}", name)
    return float(value)


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidOptionTypeError(f"{name} must be True or False, got {value!r}", name)
    return bool(value)


def _autoreset_mode(name: str, value: Any) -> Any:
    from gymnasium.vector import AutoresetMode

    allowed = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)  # ALE has no "disabled" mode
    if value not in allowed and value not in [mode.value for mode in allowed]:
        raise InvalidOptionError(
            f"{name} must be one of {[mode.value for mode in allowed]} (or the AutoresetMode), got {value!r}",
            name,
        )
    return AutoresetMode(value)


# How each argument of `ale_py.vector_env.AtariVectorEnv` (but game, num_envs and batch_size, which
# depend on num_envs) is checked. ALE checks almost none of them, and some bad values (stack_num=0,
# img_height=0, batch_size > num_envs) make its first reset wait for ever.
ALE_ARGUMENT_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "num_threads": _int_in(0),
    "thread_affinity_offset": _int_in(-1),
    "max_num_frames_per_episode": _int_in(1),
    "repeat_action_probability": _probability,
    "full_action_space": _flag,
    "continuous": _flag,
    "continuous_action_threshold": _probability,
    "autoreset_mode": _autoreset_mode,
    "img_height": _int_in(1),
    "img_width": _int_in(1),
    "grayscale": _flag,
    "stack_num": _int_in(1),
    "frameskip": _frameskip,
    "maxpool": _flag,
    "noop_max": _int_in(0),
    "episodic_life": _flag,
    "life_loss_info": _flag,
    "reward_clipping": _flag,
    "use_fire_reset": _flag,
}


def check_ale_vector_kwargs(num_envs: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` of `AtariVectorEnv` checked (before ALE sees them) and converted to plain types.

    ``num_envs`` must be an int >= 1 and ``batch_size`` (if given) 0 (every env) or 1..num_envs.

    Raises:
        InvalidOptionTypeError: an argument of the wrong type (a ``TypeError``).
        InvalidOptionError: an argument out of its range (a ``ValueError``); the message says the range.
        Both are ``gymnasium.error.Error``, as ALE's own check of ``frameskip`` raises.
    """
    n = _int_in(1)("num_envs", num_envs)
    checked = {}
    for name, value in kwargs.items():
        if name == "batch_size":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise InvalidOptionTypeError(f"batch_size must be an int, got {value!r}", name)
            if not 0 <= int(value) <= n:
                raise InvalidOptionError(
                    f"batch_size must be 0 (every env) or an int from 1 to num_envs={n}, got {value!r}", name
                )
            checked[name] = int(value)
        else:
            checked[name] = ALE_ARGUMENT_CHECKS[name](name, value)
    return checked


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
            # Checked before the pending first seed is used up: a refused reset changes nothing.
            if isinstance(seed, np.ndarray):
                check_ale_seeds(seed.tolist(), "reset")
            else:
                seed = check_first_seed(seed, self.num_envs, "reset")
            self._first_reset_seed = None
            return super().reset(seed=seed, options=options)

    return SeededAtariVectorEnv


def ale_game(game: str) -> str:
    """ALE's ROM id (``"pong"``, ``"space_invaders"``) of any name torchwm resolves."""
    if not isinstance(game, str) or not game:
        raise TypeError(f"game must be a game name such as 'pong' or 'ALE/Pong-v5', got {game!r}")
    resolved = names.resolve(game)
    if resolved.family != "atari":
        raise ValueError(
            f"game must be an Atari game (an ALE id or name), got {game!r}, which resolves to the "
            f"non-Atari env {resolved.id!r}"
        )
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
        seed: the seed of the first `reset` (env ``i`` gets ``seed + i``) and of the action space;
            every ``seed + i`` must be in ALE's range ``[0, 2**31 - 1]``.
        **ale_kwargs: any other `AtariVectorEnv` argument (``stack_num``, ``img_height``,
            ``noop_max``, ``reward_clipping``, ``use_fire_reset``, ``batch_size``, ...).

    Every argument is checked before ALE is called (see `ALE_ARGUMENT_CHECKS`): a wrong type is a
    `TypeError`, a value out of range (``stack_num=0``, ``img_height=0``, ``batch_size`` above
    ``num_envs``, a probability outside [0, 1]) a `ValueError` that says the range; both are also
    ``gymnasium.error.Error``, as ALE's check of ``frameskip`` raises, and name the option. The returned
    env's `reset` refuses seeds outside ALE's range the same way (ALE would ignore a negative one)
    and, when it does, keeps the constructor's seed for the next reset.

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
    if obs_type not in OBS_TYPES:
        raise ValueError(f"obs_type must be one of {OBS_TYPES}, got {obs_type!r}")
    if "grayscale" in ale_kwargs:
        raise TypeError("give obs_type='rgb' or 'grayscale', not grayscale=")
    accepted = ["batch_size", *(name for name in ALE_ARGUMENT_CHECKS if name != "grayscale")]
    unknown = sorted(set(ale_kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"make_atari_vector_env has no option {', '.join(map(repr, unknown))}; AtariVectorEnv "
            f"takes: {', '.join(accepted)}"
        )
    # Every argument is checked here: ALE checks few, and some bad values make its first reset wait for ever.
    kwargs = check_ale_vector_kwargs(
        num_envs,
        {
            "frameskip": frameskip,
            "repeat_action_probability": repeat_action_probability,
            "full_action_space": full_action_space,
            "grayscale": obs_type == "grayscale",
            **ale_kwargs,
        },
    )
    seed = check_first_seed(seed, int(num_envs), "make_atari_vector_env")
    return _ale_vector_env_class()(rom, int(num_envs), seed=seed, **kwargs)
