"""The exceptions torchwm raises.

Each one subclasses the exception a caller would already catch: the built-in
one (`LookupError` for a missing name, `ValueError` for bad input) and, where
Gymnasium raises its own type for the same mistake, Gymnasium's
(`gymnasium.error.NoAsyncCallError`, `multiprocessing.TimeoutError`, ...), so
code written against Gymnasium keeps working. An exception an env raised in a
worker process arrives as a `WorkerError` that is also an instance of the
env's own exception type (see `worker_error_class`). Each message says what
was expected and what came.

Two are a transport's, not a user's: `WorkerGone` and `StepLost`, which a
backend plugin's worker handle raises to torchwm's pool (a dead worker, a step
that cannot be waited for again); the pool turns them into the errors above.
"""

from __future__ import annotations

import difflib
import multiprocessing
import pickle
import types
from collections.abc import Iterable
from typing import Any

import gymnasium.error


class TorchwmError(Exception):
    """Base class of the errors that torchwm defines."""


def closest_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """Up to ``n`` names of ``known`` spelt like ``name``, closest first: every "did you mean" of torchwm
    suggests by this one rule (difflib's similarity ratio of at least 0.6)."""
    return difflib.get_close_matches(name, list(known), n=n, cutoff=0.6)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known``, or nothing when none is close."""
    close = closest_names(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Names another library gives to something torchwm names otherwise: the suggestion for them is torchwm's
# name of the same thing, not the closest spelling ("async" is not a typo of "sync").
PEER_NAMES: dict[tuple[str, str], tuple[list[str], str]] = {
    ("backend", "async"): (
        ["shmem", "subproc"],
        "'async' is Gymnasium's AsyncVectorEnv; torchwm's backend for it is 'shmem' (or 'subproc', "
        "results through pipes, for spaces shared memory cannot hold).",
    ),
}


class UnknownNameError(TorchwmError, LookupError):
    """A backend, wrapper, source or env id that nothing registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = "") -> None:
        known = sorted(known)
        close = closest_names(name, known)
        parts = [f"unknown {kind} {name!r}."]
        peer = PEER_NAMES.get((kind, name))
        if peer is not None:
            close = [n for n in peer[0] if n in known] or close
            parts.append(peer[1])
        elif close:
            parts.append(f"Did you mean {' or '.join(repr(c) for c in close)}?")
        if len(known) <= 30:
            parts.append(f"Registered {kind}s: {', '.join(known) or '(none)'}.")
        else:
            parts.append(f"{len(known)} {kind}s are registered.")
        if hint or peer is None:
            parts.append(
                hint or f"If {name!r} comes from a plugin, install it (`torchwm list` shows what is loaded)."
            )
        super().__init__(" ".join(parts))
        self.kind = kind
        self.name = name
        self.suggestions = close


class DuplicateNameError(TorchwmError, ValueError):
    """Two plugins registered the same name without ``override=True``."""


class ClosedEnvironmentError(gymnasium.error.ClosedEnvironmentError, TorchwmError):
    """A vector env was used after ``close()``."""


class UnsupportedStackError(TorchwmError, gymnasium.error.Error, ValueError):
    """A backend cannot express the wrapper stack or env options it was given.

    Also ``gymnasium.error.Error``, what ALE raises for a bad env option (``frameskip=0``).
    """


class DynamicShapeError(UnsupportedStackError, TypeError):
    """Shared memory cannot hold a space without a fixed shape (``Graph``, ``Sequence``).

    Also the ``TypeError`` that Gymnasium's ``AsyncVectorEnv(shared_memory=True)``
    raises for the same spaces, with its phrase in the message.
    """


class NotABatchError(TorchwmError, ValueError, TypeError):
    """Actions that are no batch (one scalar where one action per env is expected).

    A ``ValueError`` like torchwm's other refusals of actions, and the ``TypeError``
    Gymnasium's vector envs raise when they cannot iterate the actions.
    """


class WorkerError(TorchwmError, RuntimeError):
    """An env raised, or a worker process died, inside a parallel backend.

    When an env raised, the error is also an instance of the env's exception type
    (``except ValueError`` catches a ``ValueError`` raised in a worker, as with
    Gymnasium's ``AsyncVectorEnv``), unless that type cannot be combined with this
    one (see `worker_error_class`).

    Attributes:
        env_index: the global index of the env that failed, or None when a whole worker died.
        worker_index: the worker that ran it.
        remote_traceback: the traceback text from the worker, when there is one.
        original_type: the exception type the env raised, when this class also subclasses it.
        dropped_env_ids: for an env's error raised by ``recv``/``step``, the envs of the send it failed
            whose results were dropped (the env that raised among them), in ascending order: each may
            have taken that step without its rows reaching the caller, so an episode recorded from the
            rows has a hole there (see `mark_dropped`). Empty for any other error.
    """

    original_type: type[BaseException] | None = None
    dropped_env_ids: tuple[int, ...] = ()

    def __init__(
        self,
        message: str,
        *,
        env_index: int | None = None,
        worker_index: int | None = None,
        remote_traceback: str = "",
    ) -> None:
        text = (
            message if not remote_traceback else f"{message}\n\nTraceback in the worker:\n{remote_traceback}"
        )
        super().__init__(text)
        self.env_index = env_index
        self.worker_index = worker_index
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        # The message as written, whatever the env's type does (KeyError's own __str__ would quote it).
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple:
        # A class made by worker_error_class is no module attribute: rebuild it from the original type.
        return (_rebuild_worker_error, (self.original_type, self.args), self.__dict__)


def mark_dropped(exc: BaseException, env_ids: Iterable[int]) -> None:
    """Record on ``exc``, as ``exc.dropped_env_ids``, the envs of the send it failed whose step results
    were dropped. A backend that raises the env's own exception (``sync``, as Gymnasium's
    ``SyncVectorEnv`` does) records it there too; an exception type that refuses attributes goes on
    without it (a reader then takes every env of the send as dropped)."""
    try:
        exc.dropped_env_ids = tuple(sorted(int(i) for i in env_ids))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - the error itself must still reach the caller
        pass


def _rebuild_worker_error(original_type: type[BaseException] | None, args: tuple) -> WorkerError:
    cls = worker_error_class(original_type)
    error = cls.__new__(cls)
    error.args = args
    return error


def worker_error_class(original_type: type[BaseException] | None) -> type[WorkerError]:
    """`WorkerError`, or a subclass of it and ``original_type`` (made once per type).

    The subclass is made only where that is safe: an ``Exception`` type (not
    ``KeyboardInterrupt`` or ``SystemExit``) without an ``__init__`` of its own in
    Python (its instances would lack what that ``__init__`` sets; the built-in
    types and ``class MyError(Exception): pass`` qualify), picklable by reference
    (so the error pickles), that can be combined with `WorkerError`. Any other
    type gives plain `WorkerError`; its message still names the type.
    """
    cls = _WORKER_ERROR_CLASSES.get(original_type)
    if cls is None:
        cls = _WORKER_ERROR_CLASSES[original_type] = _make_worker_error_class(original_type)
    return cls


# One class per original type, made once: errors of the same type from the same env are then of one class.
_WORKER_ERROR_CLASSES: dict[type[BaseException] | None, type[WorkerError]] = {}


def _make_worker_error_class(original_type: type[BaseException] | None) -> type[WorkerError]:
    if (
        not isinstance(original_type, type)
        or not issubclass(original_type, Exception)
        or issubclass(WorkerError, original_type)
        or isinstance(original_type.__init__, types.FunctionType)
    ):
        return WorkerError
    if issubclass(original_type, WorkerError):
        return original_type
    try:
        if pickle.loads(pickle.dumps(original_type)) is not original_type:
            return WorkerError
        name = f"WorkerError[{original_type.__name__}]"
        cls = type(
            name,
            (WorkerError, original_type),
            {"__module__": __name__, "__qualname__": name, "original_type": original_type},
        )
        cls("probe", env_index=0)  # a type that cannot be built this way fails here, not when raised
    except Exception:
        return WorkerError
    return cls


class WrapperOptionError(TorchwmError, gymnasium.error.Error, TypeError, ValueError):
    """A wrapper of a stack with a bad option: unknown, of the wrong type, or no name at all.

    Raised by `torchwm.spec.resolve_wrapper`, the one place that checks a stack. Besides the
    message, ``option`` names the key at fault and ``problem`` says what is wrong in words a config
    file shows after the key's path (``wrappers[1].stack_size: expected an integer, got "four"``).
    Both a TypeError and a ValueError: the types the same checks raised before they had a class; and
    ``gymnasium.error.Error``, what Gymnasium and ALE raise for a bad option of theirs.
    """

    def __init__(self, message: str, option: str, problem: str) -> None:
        super().__init__(message)
        self.option = option
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.option, self.problem)


class InvalidOptionError(TorchwmError, gymnasium.error.Error, ValueError):
    """An option out of its range (``frameskip=0``); ``option`` names it.

    Also ``gymnasium.error.Error``, what ALE's `AtariEnv` and `AtariVectorEnv` raise for a bad ``frameskip``.
    """

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (str(self), self.option)


class InvalidOptionTypeError(InvalidOptionError, TypeError):
    """An option of the wrong type (``frameskip=4.0``): also the ``TypeError`` such checks raise."""


class ConfigError(TorchwmError, ValueError):
    """A config file or dict that does not validate; the message names the key."""


class EnvTimeoutError(TorchwmError, TimeoutError, multiprocessing.TimeoutError):
    """A wait on workers passed its deadline (``timeout=``).

    Both the built-in ``TimeoutError`` and ``multiprocessing.TimeoutError``, which
    Gymnasium's ``AsyncVectorEnv`` raises for the same wait.
    """


class NoAsyncCallError(TorchwmError, gymnasium.error.NoAsyncCallError, RuntimeError):
    """`recv()` (``step_wait()``) with no action in flight; Gymnasium raises its type for the same misuse."""

    def __init__(self, message: str, name: str = "step") -> None:
        super().__init__(message, name)


class AlreadyPendingCallError(TorchwmError, gymnasium.error.AlreadyPendingCallError, RuntimeError):
    """A second `send()`, or a `reset`/`call`, while actions are in flight: `recv()` first."""

    def __init__(self, message: str, name: str = "step") -> None:
        super().__init__(message, name)


class InvalidSeedError(TorchwmError, gymnasium.error.Error, ValueError):
    """A seed Gymnasium's seeding refuses (a negative int): a ``ValueError`` and Gymnasium's ``Error``."""


class WorkerGone(Exception):
    """Raised by a transport whose worker cannot answer any more.

    Args:
        reason: what happened, for the message (``"killed by SIGKILL"``).
        restartable: the worker died and a new one can take its envs; False when the channel itself
            cannot be used again (an interrupt cut a message): the vector env must then be closed.
        hint: what to do, when the transport knows better than the pool (a worker that died before it
            reached torchwm's code).
        worker: the index of the worker that is gone, when a wait on another one found out (Ray's compiled
            graph fails every actor's wait when one actor dies); None: the transport raising it.
    """

    def __init__(
        self, reason: str, *, restartable: bool = True, hint: str = "", worker: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.restartable = restartable
        self.hint = hint
        self.worker = worker


class StepLost(TimeoutError):
    """Raised by `WorkerHandle.finish_step` at its deadline when the step cannot be waited for again (a Ray
    compiled graph's result is read once): the pool closes itself rather than keep a step it cannot take in.

    Args:
        late: which workers did not answer, for the message (default: the handle's `WorkerHandle.describe`).
        hint: what else the user can do, for the message.
    """

    def __init__(self, late: str | None = None, hint: str = "") -> None:
        super().__init__(late)
        self.late = late
        self.hint = hint
