"""How things go wrong on Ray, in the pool's terms: an env's error, a restarted actor, a lost Ray or actor.

An env that raises in an actor call travels back as an `EnvFailure` (the pool's `ErrorReply`, with the
rows of the call's other envs, which went on); a restarted actor refuses to step envs it has not reset
(`ActorRestarted`). Ray's own errors become the pool's `torchwm.errors.WorkerGone`: `lost_ray` when
Ray itself went away (``ray.shutdown()``, a lost connection), `actor_gone` when one actor died, naming
those lost with it. `ActorEnd` is what these messages (and the compiled graph) use of the driver's end of
an actor, so that this module needs none of the handles.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from typing import Any, Protocol

import ray
import ray.exceptions
from ray import cloudpickle

from torchwm.errors import WorkerGone
from torchwm.plugin_api import messages
from torchwm_ray.connection import last_line

RAY_GONE = "Ray was shut down (ray.shutdown()) or this process lost its connection to the cluster"


class EnvFailure(Exception):
    """An env (or the actor's own code) raised in an actor call: the pool's `ErrorReply`, and the rows of the
    call's other envs, which went on (``(obs, rewards, terminations, truncations, infos)``; None: none
    came)."""

    def __init__(self, reply: messages.ErrorReply, rows: tuple | None = None) -> None:
        super().__init__(reply, rows)
        self.reply = reply
        self.rows = rows

    @classmethod
    def of(cls, exc: BaseException, env: int | None) -> EnvFailure:
        try:
            # Ray's cloudpickle, not the cloudpickle package: a class that came to the actor by value
            # (an env defined in the driver's __main__ or a test module) then goes back as the
            # driver's own class, which Ray's cloudpickle tracks.
            pickled_type = cloudpickle.dumps(type(exc))
        except Exception:
            pickled_type = None
        trace = "".join(traceback.format_exception(exc))
        return cls(messages.ErrorReply(env, trace, repr(exc), pickled_type))


class ActorRestarted(Exception):
    """Raised by a restarted actor asked to step envs it has not reset since it came back."""


class ActorEnd(Protocol):
    """The driver's end of one actor (`torchwm_ray.driver.RayActorHandle`), as the failures name it
    and the compiled graph (`torchwm_ray.compiled_graph`) drives it."""

    index: int
    actor: Any  # its Ray actor handle
    node_id: str | None
    timeout: float | None

    def describe(self) -> str: ...

    def lost(self, exc: BaseException, also: Sequence[ActorEnd] = ()) -> WorkerGone: ...


def lost_ray(exc: BaseException) -> WorkerGone:
    """The `WorkerGone` for an error of Ray's own while waiting, if Ray went away (``ray.shutdown()`` from
    another thread, a lost connection): Ray then raises what it happens to meet (``SystemExit``,
    ``AttributeError``)."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    deadline = time.monotonic() + 2.0  # a shutdown in another thread may still be on its way
    while ray.is_initialized() and time.monotonic() < deadline:
        if isinstance(exc, (ray.exceptions.RaySystemError, ray.exceptions.RayChannelError, SystemExit)):
            time.sleep(0.05)
        else:
            raise exc
    if ray.is_initialized():
        raise exc
    return WorkerGone(RAY_GONE, restartable=False)


def actor_gone(
    exc: BaseException,
    actor: ActorEnd,
    others: Sequence[ActorEnd],
    dead_nodes: set[str],
    restarts: int,
) -> WorkerGone:
    """The `WorkerGone` for the death of ``actor`` (``exc``: Ray's error), naming ``others``, the actors of
    the vector env lost with it; ``restarts``: how many times Ray could restart it."""
    reason = type(exc).__name__
    if actor.node_id in dead_nodes:
        reason = f"its node {actor.node_id} was lost"
    elif getattr(exc, "actor_init_failed", False):
        reason += ": " + last_line(str(exc))  # the constructor's error, e.g. the import that failed
    if others:
        reason += "; lost with it: " + ", ".join(other.describe() for other in others)
    envs = "Their" if others else "Its"
    if restarts:
        hint = (
            f"Ray did not restart it (max_restarts={restarts} used up, or it died while starting): "
            f"{envs.lower()} envs are lost; close() this vector env and make a new one."
        )
    else:
        hint = (
            f"{envs} envs are lost: close() this vector env and make a new one (pass "
            f"restart_on_crash=True in backend_kwargs to let Ray restart a crashed actor)."
        )
    return WorkerGone(reason, hint=hint)
