"""The ``ray`` backend's options, checked, and how steps of all envs travel: the configuration of one env.

`configure` checks the options (``address``, ``actor_options``, ``placement``, ...) before any actor
starts, connects to Ray, splits the envs over the actors and chooses a `StepPath`: a shared block
where every actor is on the driver's node, else a Ray Compiled Graph, else (for a reason the path
names) one actor call per actor and step. It returns the `RaySettings` every handle of the env
shares, and the split; what changes while the env runs is in the env's `torchwm_ray.group.RayGroup`.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

import ray

from torchwm.plugin_api import VecSpec, WorkerGroup
from torchwm_ray.connection import (
    LocalRay,
    check_address,
    client_connected,
    cluster_cpus,
    one_node_ray,
    with_runtime_env,
)
from torchwm_ray.placement import ActorPlacement
from torchwm_ray.shipping import ship_by_value

logger = logging.getLogger(__name__)

# The backend options of the ray backend and their defaults (the pool's own come from the pool).
RAY_OPTIONS: dict[str, Any] = {
    "address": None,
    "actor_options": None,
    "placement": None,
    "runtime_env": None,
    "max_restarts": 3,
    "init_kwargs": None,
    "stop_ray_on_close": True,
    "compiled_graph": True,
    "shared_memory": None,
}


class StepPath(enum.Enum):
    """How a step of all envs travels between the driver and the actors, and why that way.

    ``str()`` gives the words ``repr(envs)`` shows after ``steps=``: the way (``carrier``), then the
    reason in parentheses where there is one.
    """

    # Every actor on the driver's node: the shared block of `torchwm_ray.same_node`.
    SHARED_MEMORY = "shared memory", "every actor on this node"
    # Otherwise: one execution of a graph over every actor costs less than one call per actor.
    COMPILED_GRAPH = "compiled graph", ""
    # The user turned the graph off.
    ACTOR_CALLS_ASKED = "actor calls", "compiled_graph=False"
    # A graph does not survive the death of one of its actors.
    ACTOR_CALLS_RESTARTS = "actor calls", "restart_on_crash=True"
    # A graph's results come all together, never the first ready.
    ACTOR_CALLS_BATCHES = "actor calls", "batch_size < num_envs"
    # Ray Client cannot compile graphs.
    ACTOR_CALLS_RAY_CLIENT = "actor calls", "Ray Client: no compiled graph"

    def __init__(self, carrier: str, reason: str) -> None:
        self.carrier = carrier
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.carrier} ({self.reason})" if self.reason else self.carrier


@dataclass(frozen=True, repr=False)
class RaySettings:
    """The Ray options of one vector env, checked; shared by its handles (what changes while the env runs
    is in its `torchwm_ray.group.RayGroup`)."""

    address: str | None
    steps: StepPath
    placement: ActorPlacement
    max_restarts: int
    init_kwargs: dict[str, Any]
    stop_ray_on_close: bool
    timeout: float | None

    def actor_options(self, index: int, placement_group: Any) -> dict[str, Any]:
        """The `ray.remote` options of actor ``index`` (in ``placement_group``, when there is one)."""
        return {
            **self.placement.options(index, placement_group),
            "max_restarts": self.max_restarts,
        }

    def __repr__(self) -> str:
        return (
            f"RaySettings(address={self.address!r}, steps={str(self.steps)!r}, placement={self.placement!r}, "
            f"max_restarts={self.max_restarts!r}, stop_ray_on_close={self.stop_ray_on_close!r}, "
            f"timeout={self.timeout!r})"
        )


def choose_step_path(
    options: dict[str, Any], shared_memory: bool, env_count: int, pool: WorkerGroup.Settings
) -> StepPath:
    """How steps of all envs travel, for the checked ``options`` (``shared_memory`` decided)."""
    if shared_memory:
        return StepPath.SHARED_MEMORY
    if not options["compiled_graph"]:
        return StepPath.ACTOR_CALLS_ASKED
    if pool.restart_on_crash:
        return StepPath.ACTOR_CALLS_RESTARTS
    if pool.batch_size not in (None, env_count):
        return StepPath.ACTOR_CALLS_BATCHES
    if client_connected():
        return StepPath.ACTOR_CALLS_RAY_CLIENT
    return StepPath.COMPILED_GRAPH


def configure(
    backend: str, spec: VecSpec, env_fns: list[Any], options: dict[str, Any], pool: WorkerGroup.Settings
) -> tuple[RaySettings, int | None]:
    """Check the ray options against the pool's checked settings, before any actor starts (TypeError,
    ValueError); connect to Ray and count the actors. Returns the settings and the count of actors the envs
    are split over evenly (None: the pool's split, the user's)."""
    options = {**RAY_OPTIONS, **options}
    address, init_kwargs = options["address"], options["init_kwargs"]
    max_restarts = options["max_restarts"]
    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a str such as 'auto' or 'ray://127.0.0.1:10001', got {address!r}")
    placement = ActorPlacement.check(options["actor_options"], options["placement"])
    if init_kwargs is not None and not isinstance(init_kwargs, dict):
        raise TypeError(f"init_kwargs must be a dict of ray.init arguments, got {init_kwargs!r}")
    init_kwargs = with_runtime_env(dict(init_kwargs or {}), options["runtime_env"])
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
    shared_memory = options["shared_memory"]
    if shared_memory is not None and not isinstance(shared_memory, bool):
        raise TypeError(f"shared_memory must be None (where it can), True or False; got {shared_memory!r}")
    actors: int | None = None
    if not (pool.split_given or pool.inline) and placement.per_actor is not None:
        actors = min(len(placement.per_actor), len(env_fns))  # at most one actor per env
    placement.actors(len(pool.worker_slices) if actors is None else actors)
    check_address(address)  # a second env asking for another Ray: refused before anything starts
    LocalRay.connect(address, init_kwargs)
    if not (pool.split_given or pool.inline) and placement.per_actor is None:
        # One actor per CPU of the cluster (not of this machine), at most one per env.
        actors = min(cluster_cpus(), len(env_fns))
    # Every actor on this machine: the shared block of `torchwm_ray.same_node` (a user who turned the
    # graph off asked for actor calls).
    if shared_memory is None:
        shared_memory = bool(options["compiled_graph"]) and one_node_ray()
    elif shared_memory and not one_node_ray():
        raise ValueError(
            "ray: shared_memory=True needs every actor on the driver's machine: a Ray of one node, this "
            "process's (not through Ray Client), on Linux; this Ray has "
            f"{sum(node['Alive'] for node in ray.nodes())} alive nodes"
        )
    steps = choose_step_path(options, shared_memory, len(env_fns), pool)
    if steps is StepPath.ACTOR_CALLS_RAY_CLIENT:
        logger.info(
            "ray: connected through Ray Client, which cannot run a Ray Compiled Graph: every step "
            "is one actor call per actor"
        )
    # factories of a test module or a script's helper module: the actors cannot import them
    ship_by_value(env_fns)
    settings = RaySettings(
        address=address,
        steps=steps,
        placement=placement,
        max_restarts=max_restarts if pool.restart_on_crash else 0,
        init_kwargs=init_kwargs,
        stop_ray_on_close=bool(options["stop_ray_on_close"]),
        timeout=pool.timeout,
    )
    return settings, actors
