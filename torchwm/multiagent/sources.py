"""What `torchwm.multiagent.make_vec` vectorizes: ``env`` turned into one picklable factory per env, checked.

``env`` may be a PettingZoo ``ParallelEnv`` or ``AECEnv`` instance (copied into each slot with cloudpickle,
as SuperSuit copies it), a zero-argument callable returning one, a list of ``num_envs`` such callables, or
a PettingZoo module path (``"pettingzoo.butterfly.pistonball_v6"``, ``"mpe2.simple_spread_v3"``: the
module's ``parallel_env(**env_kwargs)``, or ``env(**env_kwargs)`` for the turn-based layout). `env_sources`
gives the factories; `probe` builds one env in this process, reads its ``possible_agents`` (which fix the
agent order) and each agent's spaces, and closes it, so that bad input is refused before any worker
starts. An AEC env given for the ``agents`` or ``parallel`` layout is converted with PettingZoo's
``aec_to_parallel`` where its metadata says it is parallelizable, and refused (naming ``layout="aec"``)
where not.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle
from gymnasium import spaces

from torchwm.multiagent.pettingzoo_import import pettingzoo_env_types

# The layouts whose envs are stepped in parallel (all agents at once), so an AEC env is converted.
PARALLEL_LAYOUTS = ("agents", "parallel")


@dataclass(frozen=True)
class Probe:
    """What one env, built in this process, says of every env: its agents, in order, and their spaces."""

    possible_agents: tuple[str, ...]
    observation_spaces: dict[str, spaces.Space]
    action_spaces: dict[str, spaces.Space]
    metadata: dict[str, Any]
    render_mode: str | None


def _copy_of(blob: bytes) -> Any:
    """A new copy of the pickled env: each env slot gets its own."""
    return cloudpickle.loads(blob)


def _from_module(path: str, function: str, env_kwargs: dict[str, Any]) -> Any:
    return getattr(importlib.import_module(path), function)(**env_kwargs)


def as_parallel(env_fn: Callable[[], Any]) -> Any:
    """``env_fn()`` as a PettingZoo ``ParallelEnv``: an AEC env converted with ``aec_to_parallel`` (only an
    env whose metadata says ``is_parallelizable``; else ValueError naming ``layout="aec"``)."""
    parallel_type, aec_type = pettingzoo_env_types()
    env: Any = env_fn()
    if isinstance(env, parallel_type):
        return env
    if isinstance(env, aec_type):
        from pettingzoo.utils.conversions import aec_to_parallel

        if not (getattr(env, "metadata", None) or {}).get("is_parallelizable", False):
            name = (getattr(env, "metadata", None) or {}).get("name", type(env).__name__)
            env.close()
            raise ValueError(
                f"the AEC env {name!r} is turn-based and its metadata does not say is_parallelizable, so "
                f'PettingZoo cannot step its agents at once: use layout="aec" for it'
            )
        return aec_to_parallel(env)
    raise _not_a_pettingzoo_env(env, "the env factory returned")


def _not_a_pettingzoo_env(value: Any, what: str) -> TypeError:
    import gymnasium as gym

    hint = ""
    if isinstance(value, gym.vector.VectorEnv):
        hint = "; a vector env cannot be vectorized again: give the PettingZoo env it was made from"
    elif isinstance(value, gym.Env):
        hint = "; for single-agent Gymnasium envs use torchwm.make_vec_from_fns"
    return TypeError(
        f"{what} {type(value).__module__}.{type(value).__qualname__}, but torchwm.multiagent.make_vec "
        f"expects a PettingZoo ParallelEnv or AECEnv{hint}"
    )


def env_sources(env: Any, num_envs: int, env_kwargs: dict[str, Any], layout: str) -> list[Callable[[], Any]]:
    """One picklable zero-argument factory per env (see the module); the env types are checked by
    `probe`, which calls the first."""
    parallel_type, aec_type = pettingzoo_env_types()
    if env_kwargs and not isinstance(env, str):
        raise TypeError(
            f"keyword arguments for the env ({sorted(env_kwargs)}) go with a PettingZoo module path "
            f'(make_vec("pettingzoo.butterfly.pistonball_v6", n_pistons=10)); a factory or an instance '
            f"takes its own options, got env={env!r:.120}"
        )
    fns: list[Callable[[], Any]]
    if isinstance(env, str):
        function = "parallel_env" if layout in PARALLEL_LAYOUTS else "env"
        try:
            module = importlib.import_module(env)
        except ImportError as exc:
            raise ValueError(
                f"env={env!r} is no importable PettingZoo module ({exc}); give a module path such as "
                f'"pettingzoo.butterfly.pistonball_v6" or "mpe2.simple_spread_v3"'
            ) from exc
        if not callable(getattr(module, function, None)):
            raise ValueError(
                f"module {env!r} has no {function}() function, so it is not a PettingZoo env module "
                f'(such as "pettingzoo.butterfly.pistonball_v6")'
            )
        fns = [functools.partial(_from_module, env, function, dict(env_kwargs))] * num_envs
    elif isinstance(env, (parallel_type, aec_type)):
        try:
            blob = cloudpickle.dumps(env)
        except Exception as exc:
            raise TypeError(
                f"the PettingZoo env {type(env).__qualname__} cannot be copied with cloudpickle ({exc}); "
                f"give a zero-argument callable that builds it instead"
            ) from exc
        fns = [functools.partial(_copy_of, blob)] * num_envs
    elif isinstance(env, (list, tuple)):
        if len(env) != num_envs or not all(callable(fn) for fn in env):
            raise TypeError(
                f"a list env must hold num_envs={num_envs} zero-argument callables, one per env, each "
                f"returning a PettingZoo env; got {len(env)} items: {env!r:.200}"
            )
        fns = list(env)
    elif callable(env):
        fns = [env] * num_envs
    else:
        raise _not_a_pettingzoo_env(env, "env is")
    if layout in PARALLEL_LAYOUTS:
        fns = [functools.partial(as_parallel, fn) for fn in fns]
    return fns


def probe(env_fn: Callable[[], Any], layout: str) -> Probe:
    """Build one env with ``env_fn`` here, read its agents and spaces, close it."""
    parallel_type, aec_type = pettingzoo_env_types()
    env: Any = env_fn()
    try:
        if not isinstance(env, (parallel_type, aec_type)):
            raise _not_a_pettingzoo_env(env, "the env factory returned")
        agents = tuple(env.possible_agents)
        if not agents:
            raise ValueError(f"the PettingZoo env {type(env).__qualname__} has no possible_agents")
        return Probe(
            possible_agents=agents,
            observation_spaces={a: env.observation_space(a) for a in agents},
            action_spaces={a: env.action_space(a) for a in agents},
            metadata=dict(getattr(env, "metadata", {}) or {}),
            render_mode=getattr(env, "render_mode", None),
        )
    finally:
        env.close()
