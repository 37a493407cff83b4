"""Where the ``ray`` backend's actors run: their `ray.remote` options, one dict per actor.

Two options decide it, as a Ray user would write them:

- ``actor_options``: one dict of `ray.remote` options for every actor, or a list of one dict per
  actor (pin actor ``i`` with ``{"resources": {"node_b": 1}}`` or a ``NodeAffinitySchedulingStrategy``).
  Without a ``scheduling_strategy`` the actors are spread over the nodes (``"SPREAD"``, best effort).
- ``placement``: a placement group strategy (``"STRICT_SPREAD"``, ``"SPREAD"``, ``"STRICT_PACK"``,
  ``"PACK"``). The backend then creates a placement group with one bundle per actor (the actor's
  ``num_cpus``, default 1, its ``num_gpus`` and custom ``resources``), puts actor ``i`` in bundle
  ``i``, and removes the group when the env closes. ``"STRICT_SPREAD"`` gives every actor a node
  of its own, which ``"SPREAD"`` alone does not promise.

`ActorPlacement` holds both, checked before Ray is touched; `ActorPlacement.reserve` creates the
placement group (connected), waiting for it within the env's deadline, and `remove_group` removes it;
`check_schedulable` fails an actor that no alive node can take, which Ray would keep pending for ever.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray
import ray.util.scheduling_strategies

from torchwm.errors import EnvTimeoutError, WorkerGone

STRATEGIES = ("STRICT_SPREAD", "SPREAD", "STRICT_PACK", "PACK")
DEFAULT_TIMEOUT = 120.0  # seconds; actors may first have to be scheduled and import torchwm
# An actor still pending after this many seconds has its request checked against the alive nodes
# (`check_schedulable`).
SCHEDULING_GRACE = 2.0


@dataclass(frozen=True)
class ActorPlacement:
    """Each actor's `ray.remote` options and the placement group they go in (see the module docstring)."""

    per_actor: list[dict[str, Any]] | None  # one dict per actor, or None: ``common`` for all
    common: dict[str, Any]
    strategy: str | None

    @classmethod
    def check(cls, actor_options: Any, placement: Any) -> ActorPlacement:
        """The options checked (TypeError / ValueError, as Gymnasium raises for bad arguments)."""
        if isinstance(actor_options, (list, tuple)):
            if not actor_options or not all(isinstance(o, dict) for o in actor_options):
                raise TypeError(
                    f"actor_options must be a dict of ray.remote options or a list of one such dict per "
                    f"actor, got {actor_options!r:.200}"
                )
            per_actor: list[dict[str, Any]] | None = [dict(o) for o in actor_options]
            every = per_actor or []
        elif actor_options is None or isinstance(actor_options, dict):
            per_actor, every = None, [dict(actor_options or {})]
        else:
            raise TypeError(
                f"actor_options must be a dict of ray.remote options or a list of one such dict per "
                f"actor, got {actor_options!r:.200}"
            )
        if placement is not None and placement not in STRATEGIES:
            raise ValueError(
                f"placement must be one of {list(STRATEGIES)} (a placement group strategy, one bundle "
                f"per actor) or None, got {placement!r}"
            )
        for options in every:
            if placement is not None and "scheduling_strategy" in options:
                raise ValueError(
                    "give placement or a scheduling_strategy in actor_options, not both: placement "
                    f"{placement!r} puts each actor in a placement group of its own making"
                )
        common = {} if per_actor is not None else every[0]
        return cls(per_actor, common, placement)

    def actors(self, count: int) -> int:
        """The number of actors, checked against a list of per-actor options (``count``: the split's)."""
        if self.per_actor is not None and len(self.per_actor) != count:
            raise ValueError(
                f"actor_options has {len(self.per_actor)} dicts, one per actor, but there are {count} "
                f"actors (num_actors / envs_per_actor); give one dict per actor"
            )
        return count

    def options(self, index: int, group: Any = None) -> dict[str, Any]:
        """The `ray.remote` options of actor ``index`` (without ``max_restarts``), in bundle ``index`` of
        ``group`` (`reserve`'s placement group) if there is one."""
        options = dict(self.per_actor[index] if self.per_actor is not None else self.common)
        if group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=index
            )
            options.setdefault("num_cpus", bundle_of(options)["CPU"])
        else:
            options.setdefault("scheduling_strategy", "SPREAD")
        return options

    def reserve(self, count: int, timeout: float | None) -> Any:
        """Create the placement group (``placement`` given; else None) of ``count`` bundles and return it once
        it is placed, waiting at most ``timeout`` seconds (None: no limit), else remove it and raise
        `torchwm.errors.EnvTimeoutError` naming the bundles."""
        if self.strategy is None:
            return None
        from ray.util.placement_group import placement_group

        bundles = [
            bundle_of(self.per_actor[i] if self.per_actor is not None else self.common) for i in range(count)
        ]
        group = placement_group(bundles, strategy=self.strategy)
        started = time.monotonic()
        ready, _ = ray.wait([group.ready()], timeout=timeout)
        if not ready:
            ray.util.remove_placement_group(group)
            nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
            raise EnvTimeoutError(
                f"ray: the placement group for placement={self.strategy!r} ({count} bundles: {bundles}) "
                f"could not be placed within {time.monotonic() - started:.0f} s; the cluster's live nodes "
                f"have {nodes}. "
                f"{'STRICT_SPREAD needs a node per actor; ' if self.strategy == 'STRICT_SPREAD' else ''}"
                f"use fewer actors, smaller bundles (actor_options num_cpus) or another strategy"
            )
        return group


def remove_group(group: Any) -> None:
    """Remove a placement group `ActorPlacement.reserve` made, if any (its actors end with it)."""
    if group is not None and ray.is_initialized():
        try:
            ray.util.remove_placement_group(group)
        except Exception:
            pass  # gone with its cluster or job already


def bundle_of(options: dict[str, Any]) -> dict[str, float]:
    """The placement group bundle an actor with these `ray.remote` options needs."""
    bundle = {"CPU": float(options.get("num_cpus", 1))}
    if options.get("num_gpus"):
        bundle["GPU"] = float(options["num_gpus"])
    bundle.update({key: float(value) for key, value in (options.get("resources") or {}).items()})
    return bundle


def json_resources(resources: dict[str, float]) -> str:
    """Ray resources as a short sorted dict text, without the per-node ``node:`` markers."""
    shown = {
        name: (int(v) if float(v).is_integer() else v)
        for name, v in sorted(resources.items())
        if not name.startswith("node:") and name not in ("object_store_memory",)
    }
    return "{" + ", ".join(f"{name!r}: {v}" for name, v in shown.items()) + "}"


def check_schedulable(options: dict[str, Any]) -> None:
    """Raise `WorkerGone` if no alive node has every resource an actor of ``options`` (its `ray.remote`
    options) asks for: Ray would keep it pending for ever."""
    strategy = options.get("scheduling_strategy")
    if options.get("placement_group") not in (None, "default") or isinstance(
        strategy, ray.util.scheduling_strategies.PlacementGroupSchedulingStrategy
    ):
        return  # a placement group's bundles were checked when it was created
    # Ray's actor default
    demand = {
        "CPU": float(1 if options.get("num_cpus") is None else options["num_cpus"]),
        "GPU": float(options.get("num_gpus") or 0),
        "memory": float(options.get("memory") or 0),
        **{name: float(amount) for name, amount in (options.get("resources") or {}).items()},
    }
    demand = {name: amount for name, amount in demand.items() if amount > 0}
    nodes = [node for node in ray.nodes() if node["Alive"]]
    where = ""
    if (
        isinstance(strategy, ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy)
        and not strategy.soft
    ):
        nodes = [node for node in nodes if node["NodeID"] == strategy.node_id]
        where = f" (node affinity: node {strategy.node_id})"
    if any(
        all(node["Resources"].get(name, 0.0) >= amount for name, amount in demand.items()) for node in nodes
    ):
        return
    have = "; ".join(sorted({json_resources(node["Resources"]) for node in nodes})) or "no alive node"
    raise WorkerGone(
        f"Ray cannot place it: it asks for {json_resources(demand)}{where}, which no alive node of the "
        f"cluster has (the nodes have: {have})",
        restartable=False,
        hint="Pass actor_options that a node can meet, or add a node with those resources.",
    )
