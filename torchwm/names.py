"""Env id resolution: ``"ALE/Pong-v5"``, ``"pong"``, ``"Pong"``, ``"PongNoFrameskip-v4"``.

`resolve` turns what a user typed into a `ResolvedEnv`: the Gymnasium id,
the env's keyword arguments with the registered defaults made explicit, and
its family (``"atari"`` for ALE envs, which decides the default stack). ALE
envs are registered with Gymnasium here, so users never import ale_py
themselves. A typo gets the closest registered ids; an id from a namespace
whose package is missing names the package to install.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from torchwm.errors import UnknownNameError

ALE_ENTRY_POINT = "ale_py.env:AtariEnv"

# Namespaces of well-known env packages that register with Gymnasium on import.
NAMESPACE_PACKAGES = {
    "ALE": "ale-py",
    "MiniGrid": "minigrid",
    "BabyAI": "minigrid",
    "dm_control": "shimmy[dm-control]",
    "procgen": "procgen-mirror",
    "Craftax": "craftax",
    "MetaWorld": "metaworld",
}


@dataclass(frozen=True)
class ResolvedEnv:
    id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    family: str = "generic"


@functools.cache
def register_ale() -> bool:
    """Register ALE's ids with Gymnasium; False when ale-py is not installed.

    Every ALE env torchwm builds comes past here, so here ALE's log level is set to Warning: the banner
    ALE prints (at Info) for a process's first emulator ("A.L.E: Arcade Learning Environment ...") is no
    part of torchwm's output (a ``torchwm record`` printed it on every run), while ALE's warnings and
    errors still print. Worker processes set their own (`torchwm.vector.transports.worker_process`).
    """
    try:
        import ale_py
    except ImportError:
        return False
    gym.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    return True


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


@functools.cache
def _atari_short_names() -> dict[str, str]:
    """``"pong"``, ``"Pong"``, ``"space_invaders"``, ``"SpaceInvaders"`` -> ``"ALE/<Name>-v5"``."""
    names: dict[str, str] = {}
    for env_id in gym.registry:
        match = re.fullmatch(r"ALE/(\w+)-v5", env_id)
        if match:
            camel = match.group(1)
            for alias in (camel, camel.lower(), _snake(camel)):
                names[alias] = env_id
    return names


def is_atari(env_id: str) -> bool:
    spec = gym.registry.get(env_id)
    return spec is not None and spec.entry_point == ALE_ENTRY_POINT


def resolve(name: str, env_kwargs: dict[str, Any] | None = None) -> ResolvedEnv:
    """The Gymnasium id, explicit kwargs and family of ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"an env id must be a non-empty string, got {name!r}")
    register_ale()
    env_id = name if name in gym.registry else _atari_short_names().get(name)
    if env_id is None:
        raise _unknown(name)
    spec = gym.registry[env_id]
    kwargs = {**spec.kwargs, **(env_kwargs or {})}
    if spec.entry_point != ALE_ENTRY_POINT:
        return ResolvedEnv(env_id, kwargs, "generic")
    return ResolvedEnv(env_id, kwargs, "atari")


def _unknown(name: str) -> UnknownNameError:
    namespace = name.split("/", 1)[0] if "/" in name else None
    hint = ""
    if namespace in NAMESPACE_PACKAGES and not any(k.startswith(namespace + "/") for k in gym.registry):
        hint = (
            f"Ids in the {namespace!r} namespace come from the package {NAMESPACE_PACKAGES[namespace]!r}: "
            f"pip install {NAMESPACE_PACKAGES[namespace]}."
        )
    elif namespace and not any(k.startswith(namespace + "/") for k in gym.registry):
        hint = (
            f"No package has registered the namespace {namespace!r} with Gymnasium; install the package "
            f"that provides it."
        )
    known = list(gym.registry) + list(_atari_short_names())
    return UnknownNameError(
        "env id", name, known, hint=hint or "Gymnasium's registry and ALE's games were searched."
    )
