"""The one-thread hold of a vector env, and its close from any thread: `ThreadHold`.

A vector env, like Gymnasium's, is not thread-safe: `send`, `recv`, `reset`, `call` and `set_attr` take
its hold for their call (`ThreadHold.enter`, `ThreadHold.held`), and a second thread's call meanwhile is
refused with `AlreadyPendingCallError`. `close` may come from any thread (`ThreadHold.close`): it cuts a
call under way short (`Stepper.interrupt`), waits a bounded time for it to leave (``close_wait_seconds``),
then closes the stepper; the call it cut short raises `ClosedEnvironmentError`, never the raw error of
what the close freed under it (`ThreadHold.raise_if_closed_meanwhile`). Two closes at once: the second
waits for the first.

`torchwm.vector.base.VectorEnv` holds one `ThreadHold` over its stepper. Its `send` and `recv`, called on
every step, take and give back the hold with the hold's own attributes (``in_use``, ``user``, ``closer``)
rather than through a method, so that a step makes no call more for it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from torchwm.errors import AlreadyPendingCallError, ClosedEnvironmentError
from torchwm.vector.stepper import Stepper


class ThreadHold:
    """The lock of one vector env's stepper, the thread that holds it, and the close protocol.

    Args:
        stepper: the envs the hold guards; `close` closes them.
        owner: the vector env in a closed env's message (``"ShmemVectorEnv (CartPole-v1)"``).
        backend: the backend's name, which the messages of a refused or cut-short call start with.

    Attributes:
        in_use: held by the call that talks to the envs: one thread at a time.
        user: the thread whose call holds ``in_use`` (None: no call under way).
        closer: the thread that closes the env (None: not closing); a call under way in another thread then
            raises `ClosedEnvironmentError`, whatever the close cut short in it. Set for good once closing.
        closed: whether the env is closed (`VectorEnv.closed`); True until the vector env is built (its
            ``__init__`` sets it False last), so that a backend whose stepper fails to start is neither
            closed again nor asked about pending calls.
    """

    def __init__(self, stepper: Stepper, *, owner: str, backend: str) -> None:
        self.stepper = stepper
        self.owner = owner
        self.backend = backend
        self.in_use = threading.Lock()
        # Held by the close under way: a second close(), from any thread, waits for it and then returns.
        self.closing = threading.RLock()
        self.user: int | None = None
        self.closer: int | None = None
        self.closed = True

    def __getstate__(self) -> dict[str, Any]:
        # A copy (deepcopy, pickle) has a hold of its own: a lock is neither copied nor pickled.
        state = self.__dict__.copy()
        state.update(in_use=None, closing=None, user=None, closer=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, in_use=threading.Lock(), closing=threading.RLock())

    def close(self) -> None:
        """Close once. A call of another thread under way is cut short first (`Stepper.interrupt`), then
        waited for (``close_wait_seconds`` at most), so that the stepper's close does not free what it uses;
        it then raises `ClosedEnvironmentError` (`closed_meanwhile`), or returns its results if it ended
        first."""
        if self.closed:
            return
        with self.closing:
            if self.closed:  # closed meanwhile by the thread this one waited for
                return
            me = threading.get_ident()
            self.closer = me
            held = self.in_use.acquire(blocking=False)
            if not held and self.user != me and self.stepper.interrupt():
                held = self.in_use.acquire(timeout=self.stepper.close_wait_seconds)
            try:
                self.stepper.close()
            finally:
                self.closed = True
                if held:
                    self.in_use.release()

    def check_open(self) -> None:
        """`ClosedEnvironmentError` once the env is closed."""
        if self.closed:
            raise ClosedEnvironmentError(f"{self.owner} is closed; make a new one")

    def enter(self, doing: str) -> None:
        """Take the env for the calling thread's call, or refuse the call: the env is closed, another thread
        is using it, or closing it. Two threads talking to the same envs or workers at once would cut each
        other's messages. The call releases it in its ``finally`` (``user = None``, then
        ``in_use.release()``)."""
        self.check_open()
        if not self.in_use.acquire(blocking=False):
            closed = self.closed_meanwhile(doing)
            if closed is not None:
                raise closed
            raise AlreadyPendingCallError(
                f"{self.backend}: refused {doing}: this vector env is being used from another thread (a "
                f"step, reset or call is under way there). A vector env, like Gymnasium's, is not "
                f"thread-safe: use it from one thread at a time, or give each thread its own",
                "step",
            )
        if self.closer is not None:  # another thread is closing it
            closed = self.closed_meanwhile(doing)
            if closed is not None:
                self.in_use.release()
                raise closed
        self.user = threading.get_ident()

    @contextlib.contextmanager
    def held(self, doing: str) -> Iterator[None]:
        """The env held for this thread's call (`enter`), and released after it; an error the call met
        because another thread closed the env meanwhile is that close's `ClosedEnvironmentError`.
        (`send` and `recv`, called on every step, spell this out rather than pay for a context manager.)"""
        self.enter(doing)
        try:
            yield
        except Exception as exc:
            self.raise_if_closed_meanwhile(doing, exc)
            raise
        finally:
            self.user = None
            self.in_use.release()

    def raise_if_closed_meanwhile(self, doing: str, exc: BaseException) -> None:
        """Raise `closed_meanwhile`'s error, caused by ``exc`` (what the call met), if another thread's
        close() cut this call short; else return, and the caller raises ``exc`` itself. A stepper that closed
        itself (a fault that leaves nothing usable) closes the env too: it says so from then on."""
        if self.stepper.closed:
            self.close()
        closed = self.closed_meanwhile(doing)
        if closed is not None:
            raise closed from exc

    def closed_meanwhile(self, doing: str) -> ClosedEnvironmentError | None:
        """The error for a call of this thread that another thread's close() cut short (None: no such
        close). Whatever the call met then (a worker gone, a freed buffer) is the close, not a fault."""
        closer = self.closer
        if closer is None or closer == threading.get_ident():
            return None
        return ClosedEnvironmentError(
            f"{self.backend}: another thread closed this vector env while {doing}; make a new one"
        )
