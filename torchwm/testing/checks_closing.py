"""Checks of closing: ``close()`` twice, after use, from two threads at once and from another thread
while a loop of steps runs."""

from __future__ import annotations

import itertools
import threading
import time
import warnings
from typing import Any

import numpy as np

from torchwm.errors import ClosedEnvironmentError
from torchwm.testing.target import (
    DEADLINE,
    BackendUnderTest,
)


def check_close(target: BackendUnderTest) -> None:
    """close() twice is fine; any use after close raises ClosedEnvironmentError; also works as a context
    manager."""
    envs = target.make(2, seed=0)
    envs.reset()
    envs.close()
    envs.close()
    for what, call in (("reset", envs.reset), ("step", lambda: envs.step(np.zeros(2, dtype=np.int64)))):
        try:
            call()
        except ClosedEnvironmentError:
            continue
        raise AssertionError(f"{what}() after close() must raise ClosedEnvironmentError")
    with target.make(2, seed=0) as envs:
        envs.reset()
    assert envs.closed, "leaving a with-block must close the env"


def check_close_from_two_threads_at_once(target: BackendUnderTest) -> None:
    """close() from two threads at once: both return quietly (no error of a double close), and the env is
    closed."""
    envs = target.make(2, seed=0)
    envs.reset()
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    def close() -> None:
        try:
            go.wait(DEADLINE)
            envs.close()
        except BaseException as error:  # noqa: BLE001 - the check looks at it
            errors.append(error)

    threads = [threading.Thread(target=close, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert not any(thread.is_alive() for thread in threads), f"a close() still runs after {DEADLINE} s"
    assert errors == [], f"close() from two threads at once raised {errors!r}"
    assert envs.closed, "the env is not closed after two close() calls"


def check_close_from_another_thread(target: BackendUnderTest) -> None:
    """close() from another thread while a loop of steps and calls runs: the loop ends in one
    ClosedEnvironmentError (never the raw error of what the close freed under it), and nothing hangs.
    Closed at two moments of the loop."""
    for delay in (0.0, 0.003):
        envs = target.make(2, seed=0)
        envs.reset()
        errors: list[BaseException] = []
        started = threading.Event()
        user = threading.Thread(target=_step_until_error, args=(envs, errors, started), daemon=True)
        user.start()
        assert started.wait(DEADLINE), f"no step of the loop ended within {DEADLINE} s"
        time.sleep(delay)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium's warning about the step pending in the other thread
            envs.close()
        user.join(DEADLINE)
        assert not user.is_alive(), f"the stepping thread still runs {DEADLINE} s after close()"
        assert len(errors) == 1 and isinstance(errors[0], ClosedEnvironmentError), (
            f"the loop closed from another thread {delay} s after its first step ended in {errors!r}, "
            f"expected one ClosedEnvironmentError"
        )


def _step_until_error(envs: Any, errors: list[BaseException], started: threading.Event) -> None:
    """Step ``envs`` (and read an attribute every third step) until a call raises; keep what it raised."""
    actions = np.zeros(envs.num_envs, dtype=np.int64)
    try:
        for calls in itertools.count():
            envs.step(actions)
            if calls % 3 == 2:
                envs.get_attr("action_space")
            started.set()
    except BaseException as error:  # noqa: BLE001 - the check looks at it
        errors.append(error)
        started.set()
