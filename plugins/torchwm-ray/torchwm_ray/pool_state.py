"""What the handles of one ``ray`` vector env share and change while it runs.

The env's settings (`torchwm_ray.settings.RaySettings`) are its checked options and do not change;
everything pool-wide that does (the compiled graph, the driver's end of each actor, the placement
group) is in one `PoolState`, which the env's `torchwm_ray.group.RayGroup` holds and passes to each
handle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torchwm_ray.compiled_graph import CompiledStep
from torchwm_ray.failures import ActorEnd


@dataclass(eq=False)
class PoolState:
    """The pool-wide state of one ray vector env, shared by its handles."""

    # The graph that steps every actor at once, when steps travel that way (`StepPath.COMPILED_GRAPH`).
    graph: CompiledStep | None = None
    # The driver's end of each started actor, until it closes: an actor's death names those lost with it.
    handles: list[ActorEnd] = field(default_factory=list)
    # The placement group reserved for the actors (the ``placement`` option), removed when the env closes.
    placement_group: Any = None
