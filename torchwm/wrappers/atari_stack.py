"""The standard Atari wrapper stack, read once: what every fast Atari path translates from.

Three paths run an Atari stack faster than Gymnasium's wrapper chain: the fused env
(`torchwm.wrappers.atari_fused`, on any Python backend), ALE's C++ vector env
(backend ``ale-native``) and EnvPool (the ``envpool`` plugin). Each needs the same
reading of a `VecSpec`: an ALE game, ``atari_preprocessing`` first, then some of
`LAYERS`, every one of them torchwm's own wrapper. `parse_atari_stack` reads a spec
into an `AtariStack` once and refuses, with `UnsupportedStackError`, what no fast path
can run. A plugin that registered another factory under one of these names (say its
own ``frame_stack``) gets its factory run: no fast path can express it, so the stack
is refused here, and the fused path falls back to the chain, which runs the plugin's.

What each path can express beyond that is one table, `PATH_LIMITS`, which
`path_refusal` checks and docs/atari.md shows; each path then translates the typed
fields into its own arguments (`torchwm.vector.ale_native_spec.ale_vector_kwargs`,
``torchwm_envpool.translate``, `torchwm.wrappers.atari_fused.FusedAtariEnv`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchwm.errors import UnsupportedStackError
from torchwm.plugins import registry
from torchwm.spec import EPISODE_STATISTICS, VecSpec, WrapperSpec
from torchwm.wrappers.atari import atari_preprocessing, check_preprocessing_options, screen_dims
from torchwm.wrappers.episode_statistics import episode_statistics
from torchwm.wrappers.episodic_life import episodic_life
from torchwm.wrappers.fire_reset import fire_reset
from torchwm.wrappers.generic import clip_reward, frame_stack

# The wrappers a fast path may find on top of atari_preprocessing.
LAYERS = ("episodic_life", "fire_reset", "clip_reward", "frame_stack")


def _own_factories() -> dict[str, Callable[..., Any]]:
    """torchwm's own factory of each name a fast path translates."""
    return {
        "atari_preprocessing": atari_preprocessing,
        "episodic_life": episodic_life,
        "fire_reset": fire_reset,
        "clip_reward": clip_reward,
        "frame_stack": frame_stack,
        EPISODE_STATISTICS: episode_statistics,
    }


@dataclass(frozen=True)
class AtariStack:
    """An Atari wrapper stack as plain options: ``atari_preprocessing``'s, then the layers over it.

    Attributes:
        wrappers: the resolved stack: ``episode_statistics`` or not, ``atari_preprocessing``, then the
            layers over it in order (names in `LAYERS`), each torchwm's own wrapper with every option
            explicit.
    """

    wrappers: tuple[WrapperSpec, ...]

    @property
    def episode_statistics(self) -> bool:
        """Whole games are recorded (``episode_statistics``, on the AtariEnv itself)."""
        return self.wrappers[0].name == EPISODE_STATISTICS

    @property
    def preprocessing(self) -> dict[str, Any]:
        """The options of ``atari_preprocessing`` (noop_max, frame_skip, screen_size, grayscale,
        terminal_on_life_loss, scale_obs, grayscale_newaxis)."""
        return self.wrappers[int(self.episode_statistics)].kwargs

    @property
    def screen(self) -> tuple[int, int]:
        """``(width, height)`` of the frames (``screen_size`` as Gymnasium reads it)."""
        return screen_dims(self.preprocessing["screen_size"])

    @property
    def channel_axis(self) -> bool:
        """Gray frames carry a last axis of 1 (``grayscale_newaxis``; RGB frames have their 3 anyway)."""
        return self.preprocessing["grayscale"] and self.preprocessing["grayscale_newaxis"]

    @property
    def layers(self) -> tuple[WrapperSpec, ...]:
        return self.wrappers[int(self.episode_statistics) + 1 :]

    @property
    def names(self) -> list[str]:
        return [layer.name for layer in self.layers]

    def has(self, name: str) -> bool:
        return name in self.names

    def options(self, name: str) -> dict[str, Any]:
        """The options of the first layer called ``name``."""
        return next(layer.kwargs for layer in self.layers if layer.name == name)

    @property
    def clip_bounds(self) -> tuple[Any, Any] | None:
        """``(min_reward, max_reward)`` of ``clip_reward`` (None, floats or arrays, as Gymnasium's ClipReward
        takes)."""
        if not self.has("clip_reward"):
            return None
        options = self.options("clip_reward")
        return options["min_reward"], options["max_reward"]

    @property
    def clips_to_unit(self) -> bool:
        """``clip_reward`` is there and clips to ``[-1, 1]``, the one clip ALE and EnvPool have."""
        bounds = self.clip_bounds
        return bounds is not None and all(isinstance(b, float) for b in bounds) and bounds == (-1.0, 1.0)

    @property
    def frame_stack(self) -> tuple[int, str] | None:
        """``(stack_size, padding)``, or None without a frame stack."""
        if not self.has("frame_stack"):
            return None
        options = self.options("frame_stack")
        return options["stack_size"], options["padding"]


def parse_atari_stack(spec: VecSpec) -> AtariStack:
    """The `AtariStack` of ``spec``; `UnsupportedStackError` says why no fast path can run it.

    Example:
        >>> from torchwm.factory import resolve_spec
        >>> spec = resolve_spec("ALE/Breakout-v5", wrappers=["atari_preprocessing", "fire_reset"])
        >>> stack = parse_atari_stack(spec)
        >>> stack.names, stack.preprocessing["frame_skip"]
        (['fire_reset'], 4)
    """
    from torchwm.names import is_atari, register_ale

    register_ale()
    if spec.family != "atari" or not is_atari(spec.id):
        raise UnsupportedStackError("it is not an Atari (ALE) env")
    if spec.source not in ("gym", "ale"):
        raise UnsupportedStackError(
            f"source {spec.source!r} (ALE's AtariEnv is made by the sources 'gym' and 'ale' only)"
        )
    for wrapper in spec.wrappers:
        if wrapper.fn is not None:
            raise UnsupportedStackError(f"the wrapper {wrapper.name!r} is a Python callable")
    names = [wrapper.name for wrapper in spec.wrappers]
    # episode_statistics is always first (resolve_wrappers puts it on the env itself).
    first = 1 if names[:1] == [EPISODE_STATISTICS] else 0
    if names[first : first + 1] != ["atari_preprocessing"]:
        raise UnsupportedStackError(f"the stack does not start with atari_preprocessing (got {names})")
    own = _own_factories()
    for name in names[first + 1 :]:
        if name not in LAYERS:
            raise UnsupportedStackError(
                f"{name!r} is not one of {LAYERS} (a fast path has no equivalent of the wrapper {name!r})"
            )
    for name in set(names):
        entry = registry("wrapper").get(name)
        if entry.factory is not own[name]:
            raise UnsupportedStackError(
                f"the wrapper {name!r} is plugin {entry.plugin!r}'s, not torchwm's own, and only the wrapper "
                "chain runs it"
            )
    stack = AtariStack(spec.wrappers)
    pre = stack.preprocessing
    # What Gymnasium's AtariPreprocessing refuses is bad input on every path, not a stack this path cannot
    # run: its ValueError, not UnsupportedStackError (which would send the user to another backend).
    check_preprocessing_options(pre)
    return stack


def _each_once(stack: AtariStack) -> bool:
    return len(set(stack.names)) == len(stack.names)


def _repeated(stack: AtariStack) -> str:
    name = next(n for n in stack.names if stack.names.count(n) > 1)
    return f"the wrapper {name!r} appears {stack.names.count(name)} times"


def _clip(stack: AtariStack) -> str:
    return f"clip_reward{stack.clip_bounds}"


def _clip_valid(stack: AtariStack) -> bool:
    """What Gymnasium's ClipReward accepts (else the chain raises its InvalidBound)."""
    if stack.clip_bounds is None:
        return True
    low, high = stack.clip_bounds
    if low is None or high is None:
        return low is not None or high is not None
    return not np.any(np.asarray(high) - np.asarray(low) < 0)


# What each fast path can express of a parsed stack, beyond `parse_atari_stack`'s rules:
# (holds(stack), why not) pairs, checked in order; the first that fails is the refusal.
PATH_LIMITS: dict[str, list[tuple[Callable[[AtariStack], bool], Callable[[AtariStack], str]]]] = {
    "fused": [
        (lambda s: s.names.count("frame_stack") <= 1, lambda s: "frame_stack twice (fused supports one)"),
        (_clip_valid, lambda s: f"{_clip(s)}: Gymnasium's ClipReward refuses these bounds"),
    ],
    "ale-native": [
        (
            lambda s: not s.episode_statistics,
            lambda s: (
                "episode_statistics: ALE's vector env reports neither a game's raw score nor its frames"
            ),
        ),
        (_each_once, _repeated),
        (
            lambda s: not s.preprocessing["scale_obs"],
            lambda s: "atari_preprocessing(scale_obs=True) gives float observations and ALE gives uint8 only",
        ),
        (
            lambda s: not s.has("frame_stack") or s.names[-1] == "frame_stack",
            lambda s: "frame_stack must be the last wrapper of the stack (ALE stacks the final frames)",
        ),
        (
            lambda s: s.frame_stack is None or s.frame_stack[1] == "zero",
            lambda s: (
                f"frame_stack(padding={s.options('frame_stack')['padding']!r}): ALE pads the stack with "
                "zeros only"
            ),
        ),
        (
            lambda s: s.clip_bounds is None or s.clips_to_unit,
            lambda s: f"{_clip(s)}: ALE clips rewards to (-1, 1) only",
        ),
    ],
    "envpool": [
        (
            lambda s: not s.episode_statistics,
            lambda s: (
                "episode_statistics: EnvPool reports raw rewards and game overs, but not the frames of its "
                "no-op "
                "resets, so a game's length in frames (what the wrapper records) cannot be known"
            ),
        ),
        (_each_once, _repeated),
        (
            lambda s: not s.preprocessing["terminal_on_life_loss"],
            lambda s: (
                "atari_preprocessing(terminal_on_life_loss=True) (EnvPool's life loss is episodic_life, "
                "which "
                "restarts the game only at game over)"
            ),
        ),
        (
            lambda s: not s.preprocessing["scale_obs"],
            lambda s: "atari_preprocessing(scale_obs=True) (EnvPool returns uint8 frames)",
        ),
        (
            lambda s: s.preprocessing["grayscale"],
            lambda s: "atari_preprocessing(grayscale=False) (EnvPool lays RGB frames out channel-first)",
        ),
        (
            lambda s: s.clip_bounds is None or s.clips_to_unit,
            lambda s: f"{_clip(s)} (EnvPool clips to the sign, which is clip_reward(-1.0, 1.0) only)",
        ),
        (
            lambda s: not s.channel_axis,
            lambda s: (
                "atari_preprocessing(grayscale_newaxis=True) (EnvPool gives gray frames without a channel "
                "axis)"
            ),
        ),
    ],
}


def path_refusal(stack: AtariStack, path: str) -> str | None:
    """Why ``path`` (a key of `PATH_LIMITS`) cannot express ``stack``, or None when it can."""
    for holds, why_not in PATH_LIMITS[path]:
        if not holds(stack):
            return why_not(stack)
    return None


def parse_for(spec: VecSpec, path: str) -> AtariStack:
    """`parse_atari_stack`, then `path_refusal`: the stack ``path`` runs, or `UnsupportedStackError`."""
    stack = parse_atari_stack(spec)
    refusal = path_refusal(stack, path)
    if refusal is not None:
        raise UnsupportedStackError(refusal)
    return stack
