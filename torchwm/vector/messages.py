"""The typed messages between a pool and its workers, once for every transport.

`Step`, and the control commands `Reset`, `Call`, `SetAttr`, `NeedsReset`, `CloneStates`,
`RestoreStates` and `Close` (`ControlCommand`) go to a worker;
`torchwm.vector.env_group.EnvGroup.answer` runs the control commands. A worker reports its built envs
with a `ShareDescription` (`describe_share`), and answers a command whose env raised with an
`ErrorReply` (`error_reply`), which the pool turns into a `torchwm.errors.WorkerError` naming the env
and the worker: the env's group records which env raised on the exception itself (`blame_env`), so that
whoever catches it can say.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any, NamedTuple

import cloudpickle
import gymnasium as gym

from torchwm.vector.episode_seeds import SeedStream

# The attribute an `EnvGroup` sets on an exception that one of its envs raised: the env's local index.
# On the exception, not on the group: it goes wherever the exception goes (a thread's outbox, the code that
# builds the `ErrorReply`), and an exception from anywhere else never carries a stale index.
ENV_INDEX_ATTRIBUTE = "_torchwm_env_index"


class Step(NamedTuple):
    """Step envs ``local_ids`` of the worker (None: all of them, in order); ``actions`` has one row each."""

    local_ids: list[int] | None
    actions: Any


class Reset(NamedTuple):
    """Reset envs ``local_ids`` with one seed each; answered with their infos. ``streams``: where each env
    draws the seeds of its episodes that start without one, this reset's included (None, for all or for one
    env: seeded autoresets off), decided by the parent (`torchwm.vector.episode_seeds`)."""

    local_ids: list[int]
    seeds: list[int | None]
    options: dict | None
    streams: list[SeedStream | None] | None = None


class Call(NamedTuple):
    """Call method ``name`` of envs ``local_ids`` of the worker (None: all, in order), or read it, or call
    ``name(env, *args, **kwargs)`` when it is a function; answered with one value per env."""

    name: str | Callable | PickledFunction
    args: tuple
    kwargs: dict
    local_ids: list[int] | None = None


class PickledFunction(NamedTuple):
    """The function of a `Call`, sent by value (cloudpickle) as env factories travel: a lambda, a closure or
    a function of ``__main__`` reaches the worker. Loaded inside the call, so that one the worker cannot
    load (a module it cannot import) fails that call only, and the worker lives on."""

    data: bytes

    @classmethod
    def of(cls, function: Callable) -> PickledFunction:
        return cls(cloudpickle.dumps(function))

    def load(self) -> Callable:
        return cloudpickle.loads(self.data)


class SetAttr(NamedTuple):
    """Set attribute ``name`` on envs ``local_ids`` of the worker (None: all, in order), one value each."""

    name: str
    values: list
    local_ids: list[int] | None = None


class NeedsReset(NamedTuple):
    """Sent to a restarted worker under next_step autoreset: its envs' interrupted episodes were reported
    truncated, so their next step starts a new episode, as after any truncation."""


class CloneStates(NamedTuple):
    """Save the whole state of envs ``local_ids`` (`torchwm.env_state.EnvState`, with each env's last
    observation and autoreset bookkeeping); answered with one state each, in that order. Changes nothing."""

    local_ids: list[int]


class RestoreStates(NamedTuple):
    """Put envs ``local_ids`` in ``states`` (one `torchwm.env_state.EnvState` each, in that order): every
    state is checked against its env before any env changes. Answered as `Reset` is, with one info each
    and the envs' rows (their observations, reward 0, the states' flags) written into the batch."""

    local_ids: list[int]
    states: list


# The commands whose answer carries the envs' rows, as a reset's does: a transport whose worker writes
# into rows of its own (not the parent's batch) sends those rows back with the infos.
ROW_COMMANDS = (Reset, RestoreStates)


class Close(NamedTuple):
    """Close the envs and end the worker; answered with None."""


ControlCommand = Reset | Call | SetAttr | NeedsReset | CloneStates | RestoreStates | Close


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
    space (so that every env of every worker is checked, `torchwm.vector.stepper.resolve_spaces`), and the
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


def blame_env(exc: BaseException, index: int | None) -> None:
    """Record on ``exc`` that the env of local index ``index`` raised it (None: no env did); the last group
    it passes through, the one whose worker answers, has the last word."""
    try:
        setattr(exc, ENV_INDEX_ATTRIBUTE, index)
    except Exception:  # noqa: BLE001 - an exception type that refuses attributes is still reported, unnamed
        pass


def failing_env(exc: BaseException) -> int | None:
    """The local index of the env that raised ``exc``, as its `EnvGroup` recorded it (`blame_env`); None
    when no env did (the worker's own code, building the envs)."""
    index = getattr(exc, ENV_INDEX_ATTRIBUTE, None)
    return index if isinstance(index, int) else None


def error_reply(exc: BaseException) -> ErrorReply:
    """The `ErrorReply` for ``exc``, built where it was raised (a worker, or the parent's own share)."""
    try:
        pickled_type: bytes | None = cloudpickle.dumps(type(exc))
    except Exception:
        pickled_type = None
    return ErrorReply(failing_env(exc), "".join(traceback.format_exception(exc)), repr(exc), pickled_type)
