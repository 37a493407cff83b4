"""EnvPool called directly, made as the ``envpool`` backend makes it: the peer `torchwm bench` measures it
against.

``torchwm bench --backends envpool,envpool-direct`` builds both from the same spec. `EnvPoolDirect`
makes the pool with the very options `torchwm_envpool.translate` derives for the backend (task,
preprocessing, stack, seeds, threads) and exposes only what the benchmark calls: ``reset``,
``step``, ``close`` and a batched ``action_space``. The difference between the two rows is then
what the backend adds: torchwm's checks, infos and copies.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector.utils import batch_space

from torchwm.plugin_api import VecSpec
from torchwm_envpool.translate import translate


class EnvPoolDirect:
    """``envpool.make_gymnasium(...)`` for ``spec``, with the ``envpool`` backend's options.

    Example:
        >>> from torchwm.plugin_api import resolve_spec
        >>> pool = EnvPoolDirect(resolve_spec("CartPole-v1", 4, seed=0))   # doctest: +SKIP
        >>> pool.action_space.shape                                          # doctest: +SKIP
        (4,)
    """

    def __init__(self, spec: VecSpec, num_threads: int = 0, thread_affinity_offset: int = -1) -> None:
        import envpool

        plan = translate(spec)
        n = spec.num_envs
        seed = spec.seed if spec.seed is not None else 0
        self.pool = envpool.make_gymnasium(
            plan.task_id,
            num_envs=n,
            batch_size=n,
            seed=seed,
            env_seed=[seed + i for i in range(n)],
            num_threads=num_threads,
            thread_affinity_offset=thread_affinity_offset,
            **plan.kwargs,
        )
        self.action_space = batch_space(self.pool.action_space, n)

    def reset(self, seed: int | None = None) -> Any:
        return self.pool.reset()  # EnvPool fixes its seeds when the pool is made

    def step(self, actions: np.ndarray) -> Any:
        return self.pool.step(actions)

    def close(self) -> None:
        self.pool.close()
