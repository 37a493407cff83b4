"""Multi-agent envs: PettingZoo envs vectorized on every torchwm backend.

    >>> import torchwm.multiagent
    >>> envs = torchwm.multiagent.make_vec("mpe2.simple_spread_v3", 4, backend="shmem")  # doctest: +SKIP

``make_vec(env, num_envs, layout=...)`` gives an `AgentsVectorEnv` (``"agents"``: a Gymnasium vector env
of ``num_envs * A`` rows, one per agent) or a `ParallelVectorEnv` (``"parallel"``: dicts by agent). It
needs PettingZoo (torchwm's ``pettingzoo`` extra), imported by this package only.
"""

from __future__ import annotations

from torchwm.multiagent.agents_vector import AgentsVectorEnv
from torchwm.multiagent.make import make_vec
from torchwm.multiagent.parallel_vector import ParallelVectorEnv

__all__ = ["AgentsVectorEnv", "ParallelVectorEnv", "make_vec"]
