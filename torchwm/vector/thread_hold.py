"""The one-thread hold of a vector env, and its close from any thread.

A vector env, like Gymnasium's, is not thread-safe: `send`, `recv`, `reset`, `call` and `set_attr` take
its hold for their call (`_enter`, `_held`), and a second thread's call meanwhile is refused with
`AlreadyPendingCallError`. `close` may come from any thread: it cuts a call under way short
(`Stepper.interrupt`), waits a bounded time for it to leave (``close_wait_seconds``), then closes the
stepper; the call it cut short raises `ClosedEnvironmentError`, never the raw error of what the close freed
under it (`_raise_if_closed_meanwhile`). Two closes at once: the second waits for the first.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from torchwm.errors import AlreadyPendingCallError, ClosedEnvironmentError
from torchwm.spec import VecSpec
from torchwm.vector.stepper import Stepper


class OneThreadHold:
    """The hold and the close protocol of `torchwm.vector.base.VectorEnv` (mixed into it, which sets what
    is declared here in its ``__init__``)."""

    closed: bool
    _stepper: Stepper
    _vec_spec: VecSpec
    _in_use: threading.Lock
    _closing: threading.RLock
    _user: int | None
    _closer: int | None

    def _close_now(self) -> None:
        """Close once. A call of another thread under way is cut short first (`Stepper.interrupt`), then
        waited for (``close_wait_seconds`` at most), so that the stepper's close does not free what it uses;
        it then raises `ClosedEnvironmentError` (`_closed_meanwhile`), or returns its results if it ended
        first."""
        if self.closed:
            return
        with self._closing:
            if self.closed:  # closed meanwhile by the thread this one waited for
                return
            me = threading.get_ident()
            self._closer = me
            held = self._in_use.acquire(blocking=False)
            if not held and self._user != me and self._stepper.interrupt():
                held = self._in_use.acquire(timeout=self._stepper.close_wait_seconds)
            try:
                self._stepper.close()
            finally:
                self.closed = True
                if held:
                    self._in_use.release()

    def _check_open(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(
                f"{type(self).__name__} ({self._vec_spec.id}) is closed; make a new one"
            )

    def _enter(self, doing: str) -> None:
        """Take this vector env for the calling thread's call, or refuse the call: the env is closed, another
        thread is using it, or closing it. Two threads talking to the same envs or workers at once would cut
        each other's messages. The call releases it in its ``finally`` (``_user = None``, then
        ``_in_use.release()``)."""
        if self.closed:
            self._check_open()
        if not self._in_use.acquire(blocking=False):
            closed = self._closed_meanwhile(doing)
            if closed is not None:
                raise closed
            raise AlreadyPendingCallError(
                f"{self._vec_spec.backend}: refused {doing}: this vector env is being used from another "
                f"thread (a step, reset or call is under way there). A vector env, like Gymnasium's, is not "
                f"thread-safe: use it from one thread at a time, or give each thread its own",
                "step",
            )
        if self._closer is not None:  # another thread is closing it
            closed = self._closed_meanwhile(doing)
            if closed is not None:
                self._in_use.release()
                raise closed
        self._user = threading.get_ident()

    @contextlib.contextmanager
    def _held(self, doing: str) -> Iterator[None]:
        """The vector env held for this thread's call (`_enter`), and released after it; an error the call
        met because another thread closed the env meanwhile is that close's `ClosedEnvironmentError`.
        (`send` and `recv`, called on every step, spell this out rather than pay for a context manager.)"""
        self._enter(doing)
        try:
            yield
        except Exception as exc:
            self._raise_if_closed_meanwhile(doing, exc)
            raise
        finally:
            self._user = None
            self._in_use.release()

    def _raise_if_closed_meanwhile(self, doing: str, exc: BaseException) -> None:
        """Raise `_closed_meanwhile`'s error, caused by ``exc`` (what the call met), if another thread's
        close() cut this call short; else return, and the caller raises ``exc`` itself. A stepper that closed
        itself (a fault that leaves nothing usable) closes this env too: it says so from then on."""
        if self._stepper.closed:
            self._close_now()
        closed = self._closed_meanwhile(doing)
        if closed is not None:
            raise closed from exc

    def _closed_meanwhile(self, doing: str) -> ClosedEnvironmentError | None:
        """The error for a call of this thread that another thread's close() cut short (None: no such
        close). Whatever the call met then (a worker gone, a freed buffer) is the close, not a fault."""
        closer = self._closer
        if closer is None or closer == threading.get_ident():
            return None
        return ClosedEnvironmentError(
            f"{self._vec_spec.backend}: another thread closed this vector env while {doing}; make a new one"
        )
