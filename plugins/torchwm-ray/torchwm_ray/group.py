"""The ``ray`` backend's `torchwm.plugin_api.WorkerGroup`: one per vector env, made before any actor.

`RayGroup` checks the options and splits the envs (`torchwm_ray.settings.configure`), makes the env's
`torchwm_ray.pool_state.PoolState` (the compiled graph, when steps travel that way) and reserves the
placement group, which `RayGroup.close` removes, whether the env closes or fails to start. Where every
actor is on the driver's node, steps go through a shared block, as on ``shmem``: the group then holds a
`torchwm.plugin_api.SharedBlock`, whose batch and wait are the group's, and its handles are
`torchwm_ray.same_node.SameNodeActorHandle`; elsewhere they are `torchwm_ray.driver.RayActorHandle`, over
a batch of the pool's and `torchwm_ray.driver.wait_for_actors`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from torchwm.errors import UnsupportedStackError
from torchwm.plugin_api import SharedBlock, VecSpec, WorkerGroup, WorkerHandle
from torchwm_ray.compiled_graph import CompiledStep
from torchwm_ray.driver import RayActorHandle, wait_for_actors
from torchwm_ray.placement import DEFAULT_TIMEOUT, remove_group
from torchwm_ray.pool_state import PoolState
from torchwm_ray.same_node import SameNodeActorHandle
from torchwm_ray.settings import RAY_OPTIONS, StepPath, configure


class SpacesTheBlockCannotHold(UnsupportedStackError):
    """The envs' spaces (Text, Graph, Sequence) do not fit the shared block: `RayVectorEnv` then starts
    again with steps over Ray's channels, unless the user asked for shared memory."""


class RayGroup(WorkerGroup):
    """The actors of one ``ray`` vector env (see the module docstring). ``block``: the shared block the
    actors step through when they are all on the driver's node, else None."""

    OPTIONS = RAY_OPTIONS

    def __init__(
        self,
        backend: str,
        spec: VecSpec,
        env_fns: list[Any],
        options: dict[str, Any],
        pool: WorkerGroup.Settings,
    ) -> None:
        super().__init__(backend, spec, env_fns, options, pool)
        self.settings, actors = configure(backend, spec, env_fns, options, pool)
        self._worker_slices = (
            pool.worker_slices if actors is None else self.split_evenly(len(env_fns), actors)
        )
        self.block = SharedBlock() if self.settings.steps is StepPath.SHARED_MEMORY else None
        graph = CompiledStep(DEFAULT_TIMEOUT) if self.settings.steps is StepPath.COMPILED_GRAPH else None
        self.state = PoolState(graph=graph)
        self.state.placement_group = self.settings.placement.reserve(len(self._worker_slices), pool.timeout)

    def split(self, spec: VecSpec, env_fns: list[Any], pool: WorkerGroup.Settings) -> list[range]:
        return self._worker_slices

    def worker(self, index: int, envs: range) -> WorkerHandle:
        if self.block is not None:
            return SameNodeActorHandle(index, envs, self, self.block)
        return RayActorHandle(index, envs, self)

    def create_batch(
        self, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> WorkerHandle.Batch:
        if self.block is None:
            return super().create_batch(observation_space, action_space, num_envs, num_workers)
        try:
            return self.block.create_batch(observation_space, action_space, num_envs, num_workers)
        except UnsupportedStackError as error:
            raise SpacesTheBlockCannotHold(*error.args) from None

    def wait(self, busy: list[WorkerHandle], timeout: float | None, need_all: bool) -> bool:
        if self.block is not None:
            return self.block.wait(busy, timeout, need_all)
        return wait_for_actors(busy, timeout, need_all)

    def close(self) -> None:
        group, self.state.placement_group = self.state.placement_group, None
        remove_group(group)

    def __repr__(self) -> str:
        return repr(self.settings)
