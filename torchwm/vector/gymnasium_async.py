"""Gymnasium's asynchronous names of a vector env's calls: `reset_async`/`reset_wait` and
`step_async`/`step_wait`, as ``AsyncVectorEnv`` has them, over `torchwm.vector.base.VectorEnv`'s `reset`,
`send` and `recv` (mixed into it).

``step_async``/``step_wait`` are `send`/`recv`. `reset_async` checks a reset and holds it; `reset_wait`
runs it under its own timeout, so that no reset is under way between the two calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchwm.errors import NoAsyncCallError
from torchwm.spec import check_timeout


class GymnasiumAsyncCalls:
    """``reset_async``, ``reset_wait``, ``step_async`` and ``step_wait`` (see the module docstring)."""

    timeout: float | None
    _pending_reset: tuple[Any, Any] | None
    reset: Any
    send: Any
    recv: Any
    _check_open: Any
    _check_nothing_pending: Any
    _reset_request: Any

    def reset_async(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Gymnasium's ``AsyncVectorEnv.reset_async``: check a reset of every env (or of
        ``options["reset_mask"]``), and hold it until `reset_wait` runs it.

        Its arguments are checked here, as Gymnasium checks them. Until `reset_wait`, a step, reset or
        call raises `AlreadyPendingCallError`.
        """
        self._check_open()
        self._check_nothing_pending("reset_async")
        self._reset_request(seed, options, None)  # checked now; nothing changes
        self._pending_reset = (seed, None if options is None else dict(options))

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Gymnasium's ``AsyncVectorEnv.reset_wait``: the reset `reset_async` asked for, within ``timeout``
        seconds (default: the backend's ``timeout``), else `EnvTimeoutError`, a
        ``multiprocessing.TimeoutError`` as in Gymnasium.

        The reset runs here, so it is not under way between the two calls.
        """
        self._check_open()
        timeout = self.timeout if timeout is None else check_timeout(timeout, "reset_wait(timeout=)")
        if self._pending_reset is None:
            raise NoAsyncCallError(
                "Calling `reset_wait` without any prior call to `reset_async`. (Or call reset(), which does "
                "both.)",
                "reset",
            )
        (seed, options), self._pending_reset = self._pending_reset, None
        # A stepper's methods take no timeout (their signatures are the documented plugin interface): every
        # stepper reads its `timeout` for each wait on its envs, so this reset's deadline is set there,
        # for this call only.
        default_timeout, self.timeout = self.timeout, timeout
        try:
            return self.reset(seed=seed, options=options)
        finally:
            self.timeout = default_timeout

    def step_async(self, actions: Any) -> None:
        """Gymnasium's ``AsyncVectorEnv.step_async``: `send` of every env's action."""
        self.send(actions)

    def step_wait(
        self, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Gymnasium's ``AsyncVectorEnv.step_wait``: `recv` (all envs unless ``batch_size`` is set)."""
        return self.recv(timeout)
