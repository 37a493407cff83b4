"""Built-in env sources: ``gym`` (Gymnasium's registry) and ``ale`` (ALE directly).

A source makes one env from a Gymnasium id and keyword arguments. ``gym``
calls `gymnasium.make`; ``ale`` builds `ale_py.env.AtariEnv` without the
checker and order-enforcing wrappers that `gymnasium.make` adds, which makes
each step a little cheaper and gives the same arrays.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from torchwm.hookspecs import Register, hookimpl
from torchwm.names import is_atari, register_ale


def make_gym(env_id: str, **env_kwargs: Any) -> gym.Env:
    if env_id not in gym.registry:  # ale-py's import is a large share of a worker's start: only if needed
        register_ale()
    return gym.make(env_id, **env_kwargs)


def make_ale(env_id: str, **env_kwargs: Any) -> gym.Env:
    register_ale()
    if not is_atari(env_id):
        raise ValueError(
            f"the 'ale' source makes Atari envs only; {env_id!r} is not an ALE id (use source='gym')"
        )
    from ale_py.env import AtariEnv

    kwargs = {**gym.registry[env_id].kwargs, **env_kwargs}
    return AtariEnv(**kwargs)


@hookimpl
def register_sources(register: Register) -> None:
    register("gym", make_gym, description="gymnasium.make: any registered Gymnasium id, ALE included")
    register("ale", make_ale, description="ale_py AtariEnv directly, without gymnasium.make's checkers")
