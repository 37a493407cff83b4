"""What of a `VecSpec` ALE's own vector env can run, and the arguments it takes for it.

`ale_vector_kwargs` translates a spec's wrapper stack into `ale_py.vector_env.AtariVectorEnv`'s
arguments, every one of them explicit (ALE's own defaults, reward clipping and FIRE on reset, are not
torchwm's); a stack ALE cannot express is refused with `UnsupportedStackError` before any thread starts.
The ``ale-native`` backend (`torchwm.vector.ale_native`) runs what it returns.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from torchwm.atari_vector_env import check_ale_vector_kwargs
from torchwm.errors import UnsupportedStackError
from torchwm.spec import VecSpec
from torchwm.vector.stepper import checked_batch_size
from torchwm.wrappers.atari_stack import parse_for

# "No frame limit" for ALE, whose own default is 108000 frames.
NO_FRAME_LIMIT = 2**31 - 1

# The ALE env keyword arguments this backend can express; the others have to be their "off" value.
SUPPORTED_ENV_KWARGS = {
    "game",
    "obs_type",
    "frameskip",
    "repeat_action_probability",
    "full_action_space",
    "max_num_frames_per_episode",
    "continuous",
    "continuous_action_threshold",
}
UNSET_ENV_KWARGS = {"mode": None, "difficulty": None, "render_mode": None}
# The backend options and their defaults (AleNativeVectorEnv's keywords), as `torchwm list` shows them.
BACKEND_OPTIONS = {"batch_size": None, "num_threads": 0, "thread_affinity_offset": -1}
INFO_KEYS = ("lives", "frame_number", "episode_frame_number")

SHMEM_HINT = 'use backend="shmem" (or "sync"), which runs any stack'


def unsupported_stack(spec: VecSpec, what: str) -> UnsupportedStackError:
    return UnsupportedStackError(f"backend 'ale-native' cannot run {spec.id!r}: {what}; {SHMEM_HINT}")


def _stack_kwargs(spec: VecSpec) -> dict[str, Any]:
    """The preprocessing arguments of AtariVectorEnv that the wrapper stack means."""
    if any(w.name == "record_video" for w in spec.wrappers):
        raise unsupported_stack(
            spec,
            "the wrapper 'record_video' needs each env's screen, and ALE's vector env returns "
            "only its preprocessed observations (it has no render)",
        )
    try:
        stack = parse_for(spec, "ale-native")
    except UnsupportedStackError as exc:
        raise unsupported_stack(spec, str(exc)) from None
    pre = stack.preprocessing
    frame_skip = pre["frame_skip"]
    width, height = stack.screen
    return {
        "noop_max": pre["noop_max"],
        "frameskip": frame_skip,
        # AtariPreprocessing max-pools the last two frames only when it skips frames.
        "maxpool": frame_skip > 1,
        "img_height": height,
        "img_width": width,
        "grayscale": pre["grayscale"],
        # AtariPreprocessing(terminal_on_life_loss) ends the episode at a lost life and its next
        # reset restarts the game: that is ALE's episodic_life (break out of the frame skip, reset).
        "episodic_life": pre["terminal_on_life_loss"],
        # episodic_life: a lost life ends the learner's episode and the game goes on (ALE's life_loss_info).
        "life_loss_info": stack.has("episodic_life"),
        "reward_clipping": stack.has("clip_reward"),
        "use_fire_reset": stack.has("fire_reset"),
        "stack_num": stack.frame_stack[0] if stack.frame_stack else 1,
    }


def _env_kwargs(spec: VecSpec) -> dict[str, Any]:
    """The emulator arguments of AtariVectorEnv that the spec's env kwargs mean."""
    env_kwargs = dict(spec.env_kwargs)
    for key, off in UNSET_ENV_KWARGS.items():
        if env_kwargs.get(key, off) != off:
            raise unsupported_stack(
                spec, f"env option {key}={env_kwargs[key]!r} (ALE's vector env has no {key})"
            )
    unknown = sorted(set(env_kwargs) - SUPPORTED_ENV_KWARGS - set(UNSET_ENV_KWARGS))
    if unknown:
        raise unsupported_stack(spec, f"env options {unknown} (it expresses {sorted(SUPPORTED_ENV_KWARGS)})")
    if env_kwargs.get("frameskip", 1) != 1:
        raise unsupported_stack(
            spec,
            f"env frameskip={env_kwargs['frameskip']!r}: under atari_preprocessing the emulator must not "
            f"skip frames (frame_skip is atari_preprocessing's option)",
        )
    limit = env_kwargs.get("max_num_frames_per_episode")
    gym_spec = gym.registry.get(spec.id)
    if spec.source == "gym" and gym_spec is not None and gym_spec.max_episode_steps is not None:
        # gymnasium.make's TimeLimit counts emulator steps, which are frames when frameskip=1.
        limit = min(limit or NO_FRAME_LIMIT, gym_spec.max_episode_steps)
    return {
        "game": env_kwargs["game"],
        "repeat_action_probability": float(env_kwargs.get("repeat_action_probability", 0.0)),
        "full_action_space": bool(env_kwargs.get("full_action_space", False)),
        "max_num_frames_per_episode": int(limit) if limit else NO_FRAME_LIMIT,
        "continuous": bool(env_kwargs.get("continuous", False)),
        "continuous_action_threshold": float(env_kwargs.get("continuous_action_threshold", 0.5)),
    }


def ale_vector_kwargs(
    spec: VecSpec,
    *,
    batch_size: int | None = None,
    num_threads: int = 0,
    thread_affinity_offset: int = -1,
) -> dict[str, Any]:
    """Every keyword argument of `ale_py.vector_env.AtariVectorEnv` that ``spec`` means.

    Raises `UnsupportedStackError` for a spec ALE cannot express. Builds nothing.

    Example:
        >>> from torchwm.factory import resolve_spec
        >>> kwargs = ale_vector_kwargs(resolve_spec("ALE/Pong-v5", 8, backend="ale-native"))
        >>> (
        ...     kwargs["game"],
        ...     kwargs["stack_num"],
        ...     kwargs["reward_clipping"],
        ...     kwargs["repeat_action_probability"],
        ... )
        ('pong', 4, False, 0.25)
    """
    n = spec.num_envs
    checked_batch_size(batch_size, n)
    for name, value in (("num_threads", num_threads), ("thread_affinity_offset", thread_affinity_offset)):
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < (0 if name == "num_threads" else -1)
        ):
            raise ValueError(f"{name} must be an int >= {0 if name == 'num_threads' else -1}, got {value!r}")
    mode = spec.autoreset
    kwargs = {
        **_stack_kwargs(spec),
        **_env_kwargs(spec),
        "batch_size": batch_size or 0,
        "num_threads": num_threads,
        "thread_affinity_offset": thread_affinity_offset,
        # "disabled" is kept in Python (see AleNativeVectorEnv): ALE itself knows only the other two.
        "autoreset_mode": AutoresetMode.SAME_STEP
        if mode is AutoresetMode.SAME_STEP
        else AutoresetMode.NEXT_STEP,
    }
    game = kwargs.pop("game")
    # What the stack maps to is checked as make_atari_vector_env checks it: some values make ALE hang.
    return {"game": game, "num_envs": n, **check_ale_vector_kwargs(n, kwargs)}
