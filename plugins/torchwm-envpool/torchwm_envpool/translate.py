"""A `VecSpec` in EnvPool's words: the task id and every keyword of `envpool.make_gymnasium`.

EnvPool runs a fixed pipeline in C++ (its own Atari preprocessing, frame stack,
life and reward handling), so only stacks that map onto its options can run on
it. `translate` maps the ones that do and refuses the rest with
`UnsupportedStackError`, naming the part it cannot express, before any pool is
made. Every option is passed, defaults included, because EnvPool's defaults are
not torchwm's (it presses FIRE at reset and repeats the first frame in the
stack unless told otherwise).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym

from torchwm.errors import UnsupportedStackError
from torchwm.plugin_api import VecSpec, parse_for

# The env kwargs of an ALE id that EnvPool can express (the rest of what names.resolve gives).
ATARI_ENV_KWARGS = {
    "game",
    "frameskip",
    "repeat_action_probability",
    "full_action_space",
    "max_num_frames_per_episode",
    "mode",
    "difficulty",
}
SUGGESTION = "use a Python backend instead (backend='shmem', 'subproc' or 'sync'), which runs any stack"


@dataclasses.dataclass(frozen=True)
class EnvPoolPlan:
    """What to ask EnvPool for, and what torchwm does on top of it.

    Attributes:
        task_id: EnvPool's id (``"Pong-v5"``, ``"CartPole-v1"``).
        kwargs: every keyword of `envpool.make_gymnasium` but ``num_envs``, ``batch_size``, seeds.
        stack_size: frames stacked (Atari), 0 when the env has no frame stack.
        zero_padding: blank the frames before an episode's first, as torchwm's
            ``frame_stack(padding="zero")`` does; EnvPool repeats the first frame.
        squeeze_stack: EnvPool always stacks (``stack_num=1`` without frame_stack); drop that axis.
    """

    task_id: str
    kwargs: dict[str, Any]
    stack_size: int = 0
    zero_padding: bool = False
    squeeze_stack: bool = False


def _refuse(spec: VecSpec, part: str) -> UnsupportedStackError:
    return UnsupportedStackError(f"the envpool backend cannot run {spec.id!r}: {part}; {SUGGESTION}")


def envpool_tasks() -> set[str]:
    import envpool

    return set(envpool.list_all_envs())


def translate(spec: VecSpec, tasks: set[str] | None = None) -> EnvPoolPlan:
    """The EnvPool plan of ``spec``, or `UnsupportedStackError` naming what EnvPool cannot express.

    Example:
        >>> from torchwm.plugin_api import resolve_spec
        >>> plan = translate(resolve_spec("ALE/Pong-v5", 4, backend="sync"))   # doctest: +SKIP
        >>> plan.task_id, plan.kwargs["repeat_action_probability"], plan.kwargs["stack_num"]  # doctest: +SKIP
        ('Pong-v5', 0.25, 4)
    """
    tasks = envpool_tasks() if tasks is None else tasks
    if spec.autoreset_mode != "next_step":
        raise _refuse(
            spec,
            f"autoreset_mode={spec.autoreset_mode!r} (EnvPool resets an ended env on its next "
            f"step only: autoreset_mode='next_step')",
        )
    callables = [w.name for w in spec.wrappers if w.fn is not None]
    if callables:
        raise _refuse(spec, f"the wrappers {callables} are Python callables, and EnvPool's pipeline is C++")
    if spec.source not in ("gym", "ale"):
        raise _refuse(
            spec, f"source={spec.source!r} (EnvPool makes its own envs, as the 'gym' or 'ale' source would)"
        )
    if spec.family == "atari":
        return _translate_atari(spec, tasks)
    return _translate_generic(spec, tasks)


def _translate_generic(spec: VecSpec, tasks: set[str]) -> EnvPoolPlan:
    if spec.id not in tasks:
        raise _refuse(spec, "EnvPool has no task of that id (envpool.list_all_envs() lists them)")
    if spec.wrappers:
        raise _refuse(spec, f"the wrappers {[w.name for w in spec.wrappers]} (EnvPool's {spec.id} runs bare)")
    if spec.env_kwargs:
        raise _refuse(spec, f"the env options {sorted(spec.env_kwargs)}")
    gym_spec = gym.spec(spec.id)
    # Gymnasium's time limit of the id, made explicit: EnvPool has its own default.
    kwargs: dict[str, Any] = {"max_episode_steps": gym_spec.max_episode_steps}
    return EnvPoolPlan(spec.id, kwargs)


def _translate_atari(spec: VecSpec, tasks: set[str]) -> EnvPoolPlan:
    env_kwargs = dict(spec.env_kwargs)
    unknown = sorted(set(env_kwargs) - ATARI_ENV_KWARGS)
    if unknown:
        raise _refuse(
            spec, f"the env options {unknown} (EnvPool takes {sorted(ATARI_ENV_KWARGS - {'game'})})"
        )
    game = env_kwargs["game"]
    task_id = "".join(part.capitalize() for part in game.split("_")) + "-v5"
    if task_id not in tasks:
        raise _refuse(spec, f"EnvPool has no Atari task {task_id!r} for the game {game!r}")

    try:
        stack = parse_for(spec, "envpool")
    except UnsupportedStackError as exc:
        raise _refuse(spec, str(exc)) from None
    if env_kwargs.get("frameskip", 1) != 1:
        raise _refuse(
            spec, f"frameskip={env_kwargs['frameskip']} under atari_preprocessing (it skips frames itself)"
        )
    options = stack.preprocessing
    width, height = stack.screen  # EnvPool takes any frame size, square or not
    stack_size, padding = stack.frame_stack or (0, "zero")
    flags = {
        "episodic_life": stack.has("episodic_life"),
        "use_fire_reset": stack.has("fire_reset"),
        "reward_clip": stack.has("clip_reward"),
    }

    frame_skip = options["frame_skip"]
    kwargs: dict[str, Any] = {
        "frame_skip": frame_skip,
        "noop_max": options["noop_max"],
        "img_height": height,
        "img_width": width,
        "gray_scale": True,
        # Gymnasium's AtariPreprocessing resizes with cv2.INTER_AREA.
        "use_inter_area_resize": True,
        "stack_num": stack_size or 1,
        "repeat_action_probability": float(env_kwargs.get("repeat_action_probability", 0.0)),
        "full_action_space": bool(env_kwargs.get("full_action_space", False)),
        # ALE counts frames; EnvPool counts agent steps of frame_skip frames each.
        "max_episode_steps": int(env_kwargs.get("max_num_frames_per_episode", 108000)) // frame_skip,
        "mode": -1 if env_kwargs.get("mode") is None else int(env_kwargs["mode"]),
        "difficulty": -1 if env_kwargs.get("difficulty") is None else int(env_kwargs["difficulty"]),
        "zero_discount_on_life_loss": False,
        **flags,
    }
    return EnvPoolPlan(
        task_id,
        kwargs,
        stack_size=stack_size,
        zero_padding=padding == "zero" and stack_size > 1,
        squeeze_stack=not stack_size,
    )
