"""The exceptions torchwm raises.

Each one subclasses the built-in exception a caller would already catch
(`LookupError` for a missing name, `ValueError` for bad input), so code written
against Gymnasium keeps working, and each message says what was expected and
what came.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import gymnasium.error


class TorchwmError(Exception):
    """Base class of the errors that torchwm defines."""


class UnknownNameError(TorchwmError, LookupError):
    """A backend, wrapper, source or env id that nothing registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str], hint: str = "") -> None:
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        parts = [f"unknown {kind} {name!r}."]
        if close:
            parts.append(f"Did you mean {' or '.join(repr(c) for c in close)}?")
        if len(known) <= 30:
            parts.append(f"Registered {kind}s: {', '.join(known) or '(none)'}.")
        else:
            parts.append(f"{len(known)} {kind}s are registered.")
        parts.append(hint or f"If {name!r} comes from a plugin, install it (`torchwm list` shows what is loaded).")
        super().__init__(" ".join(parts))
        self.kind = kind
        self.name = name
        self.suggestions = close


class DuplicateNameError(TorchwmError, ValueError):
    """Two plugins registered the same name without ``override=True``."""


class ClosedEnvironmentError(gymnasium.error.ClosedEnvironmentError, TorchwmError):
    """A vector env was used after ``close()``."""


class UnsupportedStackError(TorchwmError, ValueError):
    """A backend cannot express the wrapper stack or env options it was given."""


class WorkerError(TorchwmError, RuntimeError):
    """An env raised, or a worker process died, inside a parallel backend.

    Attributes:
        env_index: the global index of the env that failed, or None when a whole worker died.
        worker_index: the worker that ran it.
        remote_traceback: the traceback text from the worker, when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        env_index: int | None = None,
        worker_index: int | None = None,
        remote_traceback: str = "",
    ) -> None:
        text = message if not remote_traceback else f"{message}\n\nTraceback in the worker:\n{remote_traceback}"
        super().__init__(text)
        self.env_index = env_index
        self.worker_index = worker_index
        self.remote_traceback = remote_traceback


class ConfigError(TorchwmError, ValueError):
    """A config file or dict that does not validate; the message names the key."""


class EnvTimeoutError(TorchwmError, TimeoutError):
    """A wait on workers passed its deadline (``timeout=``)."""
