"""Multi-agent envs: PettingZoo envs vectorized on every torchwm backend.

    >>> import torchwm.multiagent
    >>> envs = torchwm.multiagent.make_vec("mpe2.simple_spread_v3", 4, backend="shmem")  # doctest: +SKIP

``make_vec(env, num_envs, layout=...)`` gives an `AgentsVectorEnv` (``"agents"``: a Gymnasium vector env
of ``num_envs * A`` rows, one per agent), a `ParallelVectorEnv` (``"parallel"``: dicts by agent) or an
`AECVectorEnv` (``"aec"``: turn-based envs, SuperSuit's ``VectorAECEnv`` API). SuperSuit's calls
(``pettingzoo_env_to_vec_env_v1``, ``concat_vec_envs_v1``, ``vectorize_aec_env_v0``) are in
`torchwm.integrations.supersuit`, beside the other peers' adapters. It needs PettingZoo (torchwm's
``pettingzoo`` extra), imported by this package only.

A config file describes a multi-agent setup with a ``[multiagent]`` table (`torchwm.multiagent.config`):
``load_config`` gives its `MultiAgentSpec`, ``make_vec_from_config`` its vector env. Both are imported on
first use, so that the envs' workers, which import this package, do not import the config layer.
"""

from __future__ import annotations

import importlib
from typing import Any

from torchwm.multiagent.aec import AECVectorEnv
from torchwm.multiagent.agents_vector import AgentsVectorEnv
from torchwm.multiagent.make import make_vec
from torchwm.multiagent.parallel_vector import ParallelVectorEnv
from torchwm.multiagent.spec import MultiAgentSpec

# Public names imported on first use, and the module each comes from.
_LAZY = {
    "load_config": "torchwm.multiagent.config",
    "make_vec_from_config": "torchwm.multiagent.config",
}

__all__ = [
    "AECVectorEnv",
    "AgentsVectorEnv",
    "MultiAgentSpec",
    "ParallelVectorEnv",
    "load_config",
    "make_vec",
    "make_vec_from_config",
]


def __getattr__(name: str) -> Any:
    """The names of `_LAZY`, imported on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'torchwm.multiagent' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later reads find it without this hook
    return value
