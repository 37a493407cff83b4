"""`make_vec`: PettingZoo envs vectorized on any torchwm backend, in the layout asked for.

Every argument is checked, with the checks declared once in `torchwm.multiagent.spec` (which a config file's
``[multiagent]`` setup runs too), and one env is built here to read its agents and spaces
(`torchwm.multiagent.sources`), before any worker starts. The envs then run as `AgentsEnv` envs of a
torchwm vector env built as `torchwm.make_vec_from_fns` builds one (so every backend, its options, seeds,
autoreset modes and faults apply), under the layout: `AgentsVectorEnv` (``"agents"``),
`ParallelVectorEnv` (``"parallel"``) or `AECVectorEnv` (``"aec"``, turn-based: `torchwm.multiagent.aec`).
`make_vec_from_spec` builds a `MultiAgentSpec`, the same setup as plain data.
"""

from __future__ import annotations

import functools
from typing import Any

from torchwm.multiagent.aec import make_aec_vec
from torchwm.multiagent.agent_spaces import AgentSpaces
from torchwm.multiagent.agents_env import AgentsEnv
from torchwm.multiagent.agents_vector import AgentsVectorEnv
from torchwm.multiagent.parallel_vector import ParallelVectorEnv, resolve_group_map
from torchwm.multiagent.sources import env_sources, probe
from torchwm.multiagent.spec import LAYOUTS, MultiAgentSpec, check_make_vec_options

__all__ = ["LAYOUTS", "make_vec", "make_vec_from_spec"]


def make_vec(
    env: Any,
    num_envs: int = 1,
    *,
    backend: str = "sync",
    layout: str = "agents",
    autoreset_mode: Any = "same_step",
    dead_agents: str = "error",
    pad_spaces: bool = False,
    info_format: str = "gymnasium",
    group_map: Any = None,
    seed: int | None = None,
    autoreset_seeds: bool = False,
    backend_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> Any:
    """``num_envs`` PettingZoo envs on ``backend``, each with all its agents on one worker.

    Args:
        env: a PettingZoo ``ParallelEnv`` or ``AECEnv`` (copied into each env slot), a zero-argument
            callable returning one, a list of ``num_envs`` such callables, or a PettingZoo module path
            (``"pettingzoo.butterfly.pistonball_v6"``; ``env_kwargs`` go to its ``parallel_env``).
        num_envs: N, the PettingZoo envs.
        backend: any torchwm backend that builds envs from factories (``sync``, ``subproc``, ``shmem``,
            ``ray``); its options in ``backend_kwargs``.
        layout: ``"agents"`` (`AgentsVectorEnv`: ``N * A`` rows), ``"parallel"`` (`ParallelVectorEnv`:
            dicts by agent of ``(N, ...)``) or ``"aec"`` (`AECVectorEnv`: turn-based envs, SuperSuit's
            ``VectorAECEnv`` API).
        autoreset_mode: ``"same_step"`` (default, SuperSuit's and SB3's), ``"next_step"`` or ``"disabled"``.
        dead_agents: ``"error"`` (an agent that leaves before its env ends raises ``AssertionError``) or
            ``"zero"`` (its rows are zeros, ``terminated`` True, ``agent_mask`` False until the reset).
        pad_spaces: zero-pad Box observations and Discrete actions of differing agents to one space.
        info_format: ``"gymnasium"`` (dicts of arrays) or ``"list"`` (one dict per row; ``agents`` only).
        group_map: ``parallel`` only: ``"all_agents"``, ``"one_group_per_agent"``, ``"by_prefix"`` or
            ``{group: [agents]}``.
        seed: the seed of the first reset (env ``i`` gets ``seed + i``).
        autoreset_seeds: seed every episode from ``(seed, env, episode)`` (``infos["episode_seed"]``).

    Example:
        >>> import torchwm.multiagent
        >>> envs = torchwm.multiagent.make_vec("mpe2.simple_spread_v3", num_envs=2, seed=0)
        >>> obs, infos = envs.reset()
        >>> obs.shape, envs.num_envs, envs.possible_agents
        ((6, 18), 6, ['agent_0', 'agent_1', 'agent_2'])
        >>> envs.close()
    """
    checked = check_make_vec_options(
        {
            "num_envs": num_envs,
            "backend": backend,
            "backend_kwargs": backend_kwargs,
            "layout": layout,
            "autoreset_mode": autoreset_mode,
            "dead_agents": dead_agents,
            "pad_spaces": pad_spaces,
            "info_format": info_format,
            "group_map": group_map,
            "seed": seed,
            "autoreset_seeds": autoreset_seeds,
        }
    )
    num_envs, mode, seed = checked["num_envs"], checked["autoreset_mode"], checked["seed"]
    backend_kwargs = backend_kwargs if backend_kwargs is None else checked["backend_kwargs"]
    fns = env_sources(env, num_envs, env_kwargs, layout)
    if layout == "aec":
        return _make_aec(fns, backend, seed, autoreset_seeds, backend_kwargs, info_format)

    agent_spaces = check_agents(fns[0], layout, pad_spaces, group_map)

    from torchwm.factory import make_vec_from_fns

    env_fns = [
        functools.partial(
            AgentsEnv, fn, dead_agents=dead_agents, pad_spaces=pad_spaces, agent_spaces=agent_spaces
        )
        for fn in fns
    ]
    inner = make_vec_from_fns(
        env_fns,
        backend=backend,
        seed=seed,
        autoreset_mode=mode,
        backend_kwargs=backend_kwargs,
        autoreset_seeds=autoreset_seeds,
    )
    try:
        if layout == "agents":
            return AgentsVectorEnv(inner, agent_spaces, info_format=info_format, seed=seed)
        return ParallelVectorEnv(inner, agent_spaces, group_map=group_map, seed=seed)
    except BaseException:
        inner.close()
        raise


def check_agents(env_fn: Any, layout: str, pad_spaces: bool, group_map: Any) -> AgentSpaces:
    """What `make_vec` checks of the env before any worker starts, for the ``agents`` and ``parallel``
    layouts: one env built with ``env_fn`` here, its agents' spaces read (shared by all agents for
    ``agents``, unless ``pad_spaces``), and ``group_map`` placed over its agents; returns the spaces."""
    found = probe(env_fn, layout)
    agent_spaces = AgentSpaces.read(
        found.possible_agents, found.observation_spaces, found.action_spaces, pad_spaces=pad_spaces
    )
    if layout == "agents" and (
        agent_spaces.shared_observation_space is None or agent_spaces.shared_action_space is None
    ):
        described = ", ".join(
            f"{a}: {agent_spaces.observation_spaces[a]} / {agent_spaces.action_spaces[a]}"
            for a in agent_spaces.agents
        )
        raise AssertionError(
            'layout="agents" gives every agent a row of one batch, so the agents must share their '
            f"observation and action spaces (they have {described}); pass pad_spaces=True to zero-pad Box "
            'observations and Discrete actions to one space, or use layout="parallel"'
        )
    if layout == "parallel":
        resolve_group_map(group_map, agent_spaces.agents)  # refused here, before any worker starts
    return agent_spaces


def make_vec_from_spec(spec: MultiAgentSpec) -> Any:
    """The vector env a `MultiAgentSpec` describes (a config's: `torchwm.multiagent.make_vec_from_config`).

    Example:
        >>> from torchwm.multiagent.make import make_vec_from_spec
        >>> from torchwm.multiagent.spec import MultiAgentSpec
        >>> envs = make_vec_from_spec(MultiAgentSpec(env="mpe2.simple_spread_v3", num_envs=2, seed=0))
        >>> envs.num_envs
        6
        >>> envs.close()
    """
    return make_vec(
        spec.env,
        spec.num_envs,
        backend=spec.backend,
        layout=spec.layout,
        autoreset_mode=spec.autoreset_mode,
        dead_agents=spec.dead_agents,
        pad_spaces=spec.pad_spaces,
        info_format=spec.info_format,
        group_map=spec.group_map,
        seed=spec.seed,
        autoreset_seeds=spec.autoreset_seeds,
        backend_kwargs=dict(spec.backend_kwargs),
        **spec.env_kwargs,
    )


def _make_aec(
    fns: list[Any],
    backend: str,
    seed: int | None,
    autoreset_seeds: bool,
    backend_kwargs: dict[str, Any] | None,
    info_format: str,
) -> Any:
    """The turn-based layout: an `AECVectorEnv` of the envs ``fns`` make."""
    return make_aec_vec(
        fns,
        backend=backend,
        seed=seed,
        autoreset_seeds=autoreset_seeds,
        backend_kwargs=backend_kwargs,
        info_format=info_format,
    )
