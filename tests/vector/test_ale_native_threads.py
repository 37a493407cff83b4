"""``ale-native`` takes the vector env's one-thread hold, as every other backend does: a second thread's
call while a call is under way is refused with `AlreadyPendingCallError` and changes nothing, and `close()`
from another thread ends a call under way in `ClosedEnvironmentError` (or lets it end first), never in
whatever ALE's dropped env gives.

A call is held under way deterministically: the backend's ALE interface is wrapped so that one of its
methods waits for a `threading.Event` (ALE's own waits release the GIL, so the other thread runs meanwhile).
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import torchwm
import torchwm.vector.ale_native as ale_native
from torchwm.errors import AlreadyPendingCallError, ClosedEnvironmentError

DEADLINE = 30.0  # seconds within which anything waited for must happen: generous for a loaded machine
NUM_ENVS = 2
ACTIONS = np.zeros(NUM_ENVS, dtype=np.int64)


def make() -> Any:
    return torchwm.make_vec(
        "ALE/Breakout-v5", NUM_ENVS, backend="ale-native", seed=0, repeat_action_probability=0.0
    )


class GatedAle:
    """ALE's vector interface, with ``method`` waiting for ``gate`` before it runs: holds a call under way.

    ``dropped`` records whether the vector env had dropped its ALE env by the time the gate opened."""

    def __init__(self, vec: Any, method: str) -> None:
        self.vec = vec
        self.ale = vec._stepper.ale
        self.method = method
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.dropped: bool | None = None

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.ale, name)
        if name != self.method:
            return real

        def gated(*args: Any) -> Any:
            self.entered.set()
            assert self.gate.wait(DEADLINE), "the test never opened the gate"
            self.dropped = self.vec._stepper.ale is None
            return real(*args)

        return gated


def gate(vec: Any, method: str) -> GatedAle:
    gated = GatedAle(vec, method)
    vec._stepper.ale = gated
    return gated


class Caller(threading.Thread):
    """Runs ``call`` in a thread of its own and keeps its result or its error."""

    def __init__(self, call: Any) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as error:  # noqa: BLE001 - checked by the tests
            self.error = error

    def finish(self) -> None:
        self.join(DEADLINE)
        assert not self.is_alive(), "the thread hangs"


def reference_steps(count: int) -> list[np.ndarray]:
    """Observations of ``count`` steps of a twin that nothing disturbed."""
    with make() as twin:
        twin.reset()
        return [twin.step(ACTIONS)[0] for _ in range(count)]


SECOND_THREAD_CALLS = [
    ("resetting", lambda vec: vec.reset(seed=0)),
    ("sending a step", lambda vec: vec.step(ACTIONS)),
    ("sending a step", lambda vec: vec.send(ACTIONS)),
    ("receiving a step", lambda vec: vec.recv()),
    ("calling 'get_action_meanings'", lambda vec: vec.call("get_action_meanings")),
    ("calling 'action_space'", lambda vec: vec.get_attr("action_space")),
    ("setting 'frameskip'", lambda vec: vec.set_attr("frameskip", 2)),
    ("calling 'render'", lambda vec: vec.render()),
]


@pytest.mark.parametrize("under_way", ["recv", "reset"])
def test_a_second_thread_is_refused_while_a_call_is_under_way_and_changes_nothing(under_way):
    """The same refusal as `sync`'s and the pool backends' (type, Gymnasium's pending name, words), for
    each call a second thread can make, while the first thread is inside a step (ALE's ``recv``) or a
    reset."""
    expected = reference_steps(2)
    vec = make()
    vec.reset()
    gated = gate(vec, under_way)
    first = Caller(lambda: vec.step(ACTIONS) if under_way == "recv" else vec.reset(seed=0))
    first.start()
    try:
        assert gated.entered.wait(DEADLINE)
        for doing, call in SECOND_THREAD_CALLS:
            with pytest.raises(gym.error.AlreadyPendingCallError) as caught:
                call(vec)
            error = caught.value
            assert isinstance(error, AlreadyPendingCallError) and error.name == "step", repr(error)
            assert str(error).startswith(
                f"ale-native: refused {doing}: this vector env is being used from another thread (a step, "
                f"reset or call is under way there)"
            ), str(error)
    finally:
        gated.gate.set()
        first.finish()
    assert first.error is None, repr(first.error)
    vec._stepper.ale = gated.ale
    # The refused calls (a reset and a send among them) reached nothing: the envs go on as a twin's.
    if under_way == "recv":
        np.testing.assert_array_equal(first.result[0], expected[0])
        np.testing.assert_array_equal(vec.step(ACTIONS)[0], expected[1])
    else:
        np.testing.assert_array_equal(vec.step(ACTIONS)[0], expected[0])
    vec.close()


def test_close_from_another_thread_waits_for_the_step_under_way(monkeypatch):
    """ALE's env is dropped only once the step under way has left: the step returns its own results, and
    the env is closed after."""
    monkeypatch.setattr(ale_native.AleStepper, "close_wait_seconds", DEADLINE)
    expected = reference_steps(1)
    vec = make()
    vec.reset()
    gated = gate(vec, "recv")
    stepping = Caller(lambda: vec.step(ACTIONS))
    stepping.start()
    assert gated.entered.wait(DEADLINE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's warning about the step pending in the other thread
        closing = Caller(vec.close)
        closing.start()
        deadline = time.monotonic() + DEADLINE
        while vec._hold.closer is None and closing.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        gated.gate.set()
        stepping.finish()
        closing.finish()
    assert gated.dropped is False, "close() dropped ALE's env under the step"
    assert stepping.error is None and closing.error is None, (stepping.error, closing.error)
    np.testing.assert_array_equal(stepping.result[0], expected[0])
    assert vec.closed and vec._stepper.ale is None
    with pytest.raises(ClosedEnvironmentError, match="is closed; make a new one"):
        vec.step(ACTIONS)


@pytest.mark.parametrize("under_way", ["recv", "reset"])
def test_a_call_that_close_stops_waiting_for_raises_closed_environment_error(monkeypatch, under_way):
    """A call still under way when close() stops waiting gets ClosedEnvironmentError, not the results of
    an env that is gone."""
    monkeypatch.setattr(ale_native.AleStepper, "close_wait_seconds", 0.05)
    vec = make()
    vec.reset()
    gated = gate(vec, under_way)
    doing = "receiving a step" if under_way == "recv" else "resetting"
    first = Caller(lambda: vec.step(ACTIONS) if under_way == "recv" else vec.reset(seed=0))
    first.start()
    assert gated.entered.wait(DEADLINE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vec.close()
    assert vec.closed and vec._stepper.ale is None
    gated.gate.set()
    first.finish()
    assert gated.dropped is True
    assert isinstance(first.error, ClosedEnvironmentError), repr(first.error)
    assert str(first.error) == (
        f"ale-native: another thread closed this vector env while {doing}; make a new one"
    )


def test_a_send_that_close_cuts_short_raises_closed_environment_error_not_attribute_error(monkeypatch):
    """A send held before it reaches ALE (in its action check) while another thread's close() drops ALE's
    env: ClosedEnvironmentError, never the AttributeError of the env it no longer has."""
    monkeypatch.setattr(ale_native.AleStepper, "close_wait_seconds", 0.05)
    vec = make()
    vec.reset()
    entered, opened = threading.Event(), threading.Event()
    check_actions = ale_native.check_actions

    def gated_check(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert opened.wait(DEADLINE)
        return check_actions(*args, **kwargs)

    monkeypatch.setattr(ale_native, "check_actions", gated_check)
    sending = Caller(lambda: vec.send(ACTIONS))
    sending.start()
    assert entered.wait(DEADLINE)
    vec.close()
    opened.set()
    sending.finish()
    assert isinstance(sending.error, ClosedEnvironmentError), repr(sending.error)
    assert isinstance(sending.error.__cause__, AttributeError)  # what the close cut short, kept as the cause
    assert "while sending a step" in str(sending.error)
