"""The ``ray`` backend: torchwm's worker pool over Ray actors, several envs an actor.

`RayVectorEnv` is a `torchwm.plugin_api.WorkerPool` whose worker group is
`torchwm_ray.group.RayGroup`: the split of envs, routing, async batches,
deadlines, restarts and errors are the pool's, as on ``subproc`` and ``shmem``. The
plugin's modules, each one job:

- `settings`: `RaySettings`, the options checked (`configure`), and `StepPath`, how steps travel and why;
- `group`: `RayGroup`, the env's actors as a whole (split, handles, batch, wait, placement group);
- `pool_state`: `PoolState`, what an env's handles share while it runs (graph, handles, placement
  group);
- `actor`: `EnvActor`, the worker, a share of the envs in a Ray actor;
- `driver`: `RayActorHandle`, the driver's end of one `EnvActor`;
- `failures`: an env's error (`EnvFailure`), and Ray's errors as the pool's (`WorkerGone`);
- `same_node`: `SameNodeActorHandle`, the handle where every actor is on the driver's node (steps through
  a shared block, as on ``shmem``);
- `compiled_graph`: `CompiledStep`, the Ray Compiled Graph that steps every actor at once;
- `connection`: `LocalRay`, the Ray torchwm connects to (which address), shared by the envs of a process;
- `placement`: `ActorPlacement`, each actor's options and the placement group the env reserves;
- `shipping`: the env factories of modules the nodes cannot import, pickled by value;
- `vector_env` (this module): the backend and its options.
"""

from __future__ import annotations

from typing import Any

from torchwm.plugin_api import VecSpec, WorkerPool
from torchwm_ray.connection import LocalRay
from torchwm_ray.driver import RayActorHandle
from torchwm_ray.group import RayGroup, SpacesTheBlockCannotHold
from torchwm_ray.placement import DEFAULT_TIMEOUT
from torchwm_ray.pool_state import PoolState
from torchwm_ray.same_node import SameNodeActorHandle


class RayVectorEnv(WorkerPool):
    """torchwm envs on Ray actors: ``num_actors`` actors hosting ``envs_per_actor`` envs each.

    Args:
        spec: what to build (from `torchwm.make_vec`).
        num_actors: how many actors (default: one per CPU of the cluster, ``ray.cluster_resources()["CPU"]``,
            at most ``num_envs``; with a list of ``actor_options``, one per dict).
        envs_per_actor: envs in each actor (the last one takes the rest); give this or ``num_actors``, or
            both if they agree. The split is the pool's, as for ``num_workers``.
        address: the Ray to connect to: ``None`` (the Ray this process is connected to, else ``RAY_ADDRESS``,
            else a private local Ray), ``"local"`` (a private local Ray), ``"auto"``, ``"host:port"`` or
            ``"ray://host:port"`` (Ray Client; steps are then actor calls). A process connects to one Ray at a
            time: an address other than the current connection's is refused (ValueError).
        actor_options: `ray.remote` options of every actor (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ...), or a list of one such dict per actor. By default actors are
            spread over the nodes (``"SPREAD"``, best effort).
        placement: a placement group strategy (``"STRICT_SPREAD"``, ``"SPREAD"``, ``"STRICT_PACK"``,
            ``"PACK"``): the backend reserves one bundle per actor (its ``num_cpus``, default 1, and
            ``resources``), puts actor ``i`` in bundle ``i`` and removes the group on close
            (`torchwm_ray.placement`).
        runtime_env: the job's Ray runtime environment, given to `ray.init` when this env connects, e.g.
            ``{"py_modules": [torchwm, torchwm_ray, myenvs]}`` to ship code the nodes do not have
            (docs/cluster.md). Refused once this process is connected with another one.
        restart_on_crash: let Ray restart a dead actor (``max_restarts`` times); its envs begin new
            episodes and the interrupted steps come back truncated with ``infos["worker_restarted"]``.
        max_restarts: restarts allowed for each actor when ``restart_on_crash`` is set.
        init_kwargs: extra `ray.init` arguments when this env starts or joins Ray (not used once connected).
        stop_ray_on_close: stop the Ray instance this env started when the last env using it
            closes (default); ``False`` keeps it for the next env, until the process exits.
        compiled_graph: step all envs at once through a Ray Compiled Graph (default), compiled at
            the first such step; ``False``: one ordinary actor call per actor and step. Not used with
            ``restart_on_crash`` or ``batch_size < num_envs``. While the graph lives, each actor polls
            its input channel and shows as a busy core even when idle (it yields to other work). Through
            Ray Client there is no compiled graph: ``repr(envs)`` says how steps travel (``steps=``).
        shared_memory: where every actor runs on this process's machine (a one-node Ray, the driver's),
            steps go through a shared block as on ``shmem`` (`torchwm_ray.same_node`). ``None`` (default):
            where it can, with ``compiled_graph`` and spaces a block holds (not Text, Graph or Sequence);
            ``True``: required (ValueError on a Ray of more nodes); ``False``: never.
        batch_size, timeout, copy, env_fn, observation_mode: the pool's options
            (`torchwm.plugin_api.WorkerPool`); ``timeout`` defaults to 120 s here. The factories
            (``env_fn``, `torchwm.make_vec_from_fns`) are cloudpickled to the actors: those of a module the
            nodes cannot import (a script, a test module) travel by value (`torchwm_ray.shipping`).

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="ray", seed=0,
        ...                         backend_kwargs={"num_actors": 2})      # doctest: +SKIP
        >>> envs.actor_env_ids                                             # doctest: +SKIP
        [[0, 1], [2, 3]]
    """

    backend_name = "ray"
    worker_group = RayGroup
    unit = "actor"

    def __init__(self, spec: VecSpec, **options: Any) -> None:
        options = {"timeout": DEFAULT_TIMEOUT, **options}
        try:
            try:
                super().__init__(spec, **options)
            except SpacesTheBlockCannotHold:
                # Spaces a shared block cannot hold (Text, Graph, Sequence) show once the actors have built
                # their envs: then, unless the user asked for shared memory, Ray's channels carry the steps.
                # (The first try's group closed with it, placement group included.)
                if options.get("shared_memory") is not None:
                    raise
                super().__init__(spec, **{**options, "shared_memory": False})
        except BaseException:
            if options.get("stop_ray_on_close", True):
                LocalRay.release_unused()  # connected before an actor started (a placement that failed, ...)
            raise

    @property
    def _pool_state(self) -> PoolState:
        """What the env's handles share (`torchwm_ray.pool_state.PoolState`, the group's)."""
        handle = self.workers[0]
        assert isinstance(handle, (RayActorHandle, SameNodeActorHandle))
        return handle.state

    @property
    def placement_group(self) -> Any:
        """The placement group this env reserved for its actors (``placement``), or None."""
        return self._pool_state.placement_group

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, one per actor."""
        return [
            handle.actor
            for handle in self.workers
            if isinstance(handle, (RayActorHandle, SameNodeActorHandle))
        ]

    @property
    def actor_env_ids(self) -> list[list[int]]:
        """The env ids each actor hosts."""
        return [list(r) for r in self.worker_slices]

    @property
    def actor_node_ids(self) -> list[str | None]:
        """The Ray node id each actor runs on (`ray.get_runtime_context().get_node_id()` there)."""
        return [
            handle.node_id
            for handle in self.workers
            if isinstance(handle, (RayActorHandle, SameNodeActorHandle))
        ]

    @property
    def compiled_graph(self) -> bool:
        """Whether steps of all envs now go through a Ray Compiled Graph (compiled at the first one)."""
        graph = self._pool_state.graph
        return graph is not None and graph.graph is not None and not graph.stale
