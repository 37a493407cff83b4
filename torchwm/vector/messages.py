"""The typed messages between a pool and its workers, once for every transport.

`Step`, and the control commands `Reset`, `Call`, `SetAttr`, `NeedsReset` and `Close`
(`ControlCommand`) go to a worker; `torchwm.vector.env_group.EnvGroup.answer` runs the control
commands. A worker reports its built envs with a `ShareDescription` (`describe_share`), and answers
a command whose env raised with an `ErrorReply` (`error_reply`), which the pool turns into a
`torchwm.errors.WorkerError` naming the env and the worker.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import cloudpickle
import gymnasium as gym

# The module whose loops over envs keep the env's local index in ``i`` (`failing_env` reads it): named,
# not imported, since that module imports this one.
ENV_LOOP_MODULE = "torchwm.vector.env_group"


class Step(NamedTuple):
    """Step envs ``local_ids`` of the worker (None: all of them, in order); ``actions`` has one row each."""

    local_ids: list[int] | None
    actions: Any


class Reset(NamedTuple):
    """Reset envs ``local_ids`` with one seed each; answered with their infos."""

    local_ids: list[int]
    seeds: list[int | None]
    options: dict | None


class Call(NamedTuple):
    """Call method ``name`` of envs ``local_ids`` of the worker (None: all, in order), or read it, or call
    ``name(env, *args, **kwargs)`` when it is a function; answered with one value per env."""

    name: str | Callable
    args: tuple
    kwargs: dict
    local_ids: list[int] | None = None


class SetAttr(NamedTuple):
    """Set attribute ``name`` on envs ``local_ids`` of the worker (None: all, in order), one value each."""

    name: str
    values: list
    local_ids: list[int] | None = None


class NeedsReset(NamedTuple):
    """Sent to a restarted worker under next_step autoreset: its envs' interrupted episodes were reported
    truncated, so their next step starts a new episode, as after any truncation."""


class Close(NamedTuple):
    """Close the envs and end the worker; answered with None."""


ControlCommand = Reset | Call | SetAttr | NeedsReset | Close


class ErrorReply(NamedTuple):
    """A worker's answer when an env (or the worker's own code) raised.

    Attributes:
        env: the local index of the env that raised (None: not one env).
        traceback: the traceback text, shown in the `WorkerError`.
        summary: ``repr`` of the exception.
        pickled_type: the exception's type, cloudpickled (None: it cannot be), so that the pool raises a
            `WorkerError` that is also an instance of it.
    """

    env: int | None
    traceback: str
    summary: str
    pickled_type: bytes | None


class ShareDescription(NamedTuple):
    """What the pool needs to know of one worker's envs, once built: every env's observation and action
    space (so that every env of every worker is checked, `torchwm.vector.base.resolve_spaces`), and the
    first env's metadata and render mode."""

    observation_spaces: list[gym.Space]
    action_spaces: list[gym.Space]
    metadata: dict[str, Any]
    render_mode: str | None


def describe_share(envs: list[gym.Env]) -> ShareDescription:
    """The `ShareDescription` of ``envs``. A space equal to the first env's is that same object, which
    pickle sends once."""
    first = envs[0]

    def spaces_of(kind: str) -> list[gym.Space]:
        reference = getattr(first, kind)
        return [reference if space == reference else space for space in (getattr(env, kind) for env in envs)]

    return ShareDescription(
        spaces_of("observation_space"), spaces_of("action_space"), dict(first.metadata), first.render_mode
    )


def failing_env(exc: BaseException) -> int | None:
    """The local index of the env that raised, read from the `EnvGroup` frame of the traceback.

    `EnvGroup` loops over its envs with the index in ``i``; reading it back here
    costs nothing on the hot path, unlike wrapping every env call in a try.
    """
    tb = exc.__traceback__
    index = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") == ENV_LOOP_MODULE and "i" in frame.f_locals:
            index = frame.f_locals["i"]
        tb = tb.tb_next
    return index if isinstance(index, int) else None


def error_reply(exc: BaseException) -> ErrorReply:
    """The `ErrorReply` for ``exc``, built where it was raised (a worker, or the parent's own share)."""
    try:
        pickled_type: bytes | None = cloudpickle.dumps(type(exc))
    except Exception:
        pickled_type = None
    return ErrorReply(failing_env(exc), "".join(traceback.format_exception(exc)), repr(exc), pickled_type)
