"""Which of Gymnasium's asynchronous calls is pending on a vector env: `PendingCalls`.

`torchwm.vector.base.VectorEnv` has ``AsyncVectorEnv``'s names: ``step_async``/``step_wait`` are its `send`
and `recv`; `reset_async` checks a reset of every env and holds it here (``held_reset``), and `reset_wait`
takes it and runs it under its own timeout, so that no reset is under way between the two calls. A call
meanwhile, or a call while envs have a step in flight (the `StepState`'s), is refused as Gymnasium's
``AsyncVectorEnv`` refuses it: `AlreadyPendingCallError` naming the pending call, in its words, then
torchwm's detail.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchwm.errors import AlreadyPendingCallError, NoAsyncCallError
from torchwm.vector.step_state import StepState


class PendingCalls:
    """The pending call of one vector env: the reset `reset_async` holds, or a step in flight.

    Args:
        state: the step state of the vector env's stepper (which envs are in flight).

    Attributes:
        held_reset: ``(seed, options)`` of the reset `reset_async` asked for (None: none is held).
    """

    def __init__(self, state: StepState) -> None:
        self.state = state
        self.held_reset: tuple[Any, dict[str, Any] | None] | None = None

    def pending(self) -> str | None:
        """The call still pending, by Gymnasium's name for it: ``"reset"`` (`reset_async`), ``"step"`` or
        None."""
        return "reset" if self.held_reset is not None else self.state.pending()

    def check_nothing_pending(self, calling: str) -> None:
        """AlreadyPendingCallError (Gymnasium's words, then torchwm's detail) if a step or reset is pending;
        ``calling`` is Gymnasium's name of the call refused (``"step_async"``, ``"call_async"``, ...)."""
        pending = self.pending()
        if pending is None:
            return
        if pending == "reset":
            detail = "reset_async() was called: reset_wait() first"
        else:
            detail = (
                f"envs {np.flatnonzero(self.state.in_flight).tolist()} have actions in flight; recv() first"
            )
        raise AlreadyPendingCallError(
            f"Calling `{calling}` while waiting for a pending call to `{pending}` to complete ({detail}).",
            pending,
        )

    def check_can_reset(self, ids: np.ndarray, resets_while_stepping: bool) -> None:
        """AlreadyPendingCallError if a reset of envs ``ids`` cannot run now: a `reset_async` is pending, or
        one of them has a step in flight (or any env has, for a stepper that does not reset envs while
        others step: ``resets_while_stepping`` False)."""
        if self.held_reset is not None or not resets_while_stepping:
            self.check_nothing_pending("reset")
        else:
            self.state.check_can_reset(ids)

    def hold_reset(self, seed: Any, options: dict[str, Any] | None) -> None:
        """Hold a reset, checked already; the options are copied, as the caller may change its dict."""
        self.held_reset = (seed, None if options is None else dict(options))

    def take_reset(self) -> tuple[Any, dict[str, Any] | None]:
        """The reset held, now no longer held; `NoAsyncCallError` (Gymnasium's words) if none is."""
        if self.held_reset is None:
            raise NoAsyncCallError(
                "Calling `reset_wait` without any prior call to `reset_async`. (Or call reset(), which does "
                "both.)",
                "reset",
            )
        request, self.held_reset = self.held_reset, None
        return request
