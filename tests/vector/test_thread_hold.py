"""The one-thread hold of a vector env (`torchwm.vector.thread_hold`): one call at a time, from any thread in
turn; a second thread's call meanwhile is refused in Gymnasium's type, naming the backend and the call, and
the hold is given back whatever the call did (returned, raised). The `ThreadHold` object on its own: closed
until opened, one close of its stepper, a call cut short by another thread's close, a copy free of the
original's lock."""

from __future__ import annotations

import copy
import threading

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.errors import AlreadyPendingCallError, ClosedEnvironmentError
from torchwm.vector.thread_hold import ThreadHold

DEADLINE = 30.0


class GatedEnv(gym.Env):
    """A reset that says it began (``entered``) and waits for ``gate``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    gate: threading.Event | None = None
    entered: threading.Event | None = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.entered is not None:
            self.entered.set()
            self.gate.wait(DEADLINE)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.ones(1, np.float32), 1.0, False, False, {}


def in_thread(call):
    """What ``call`` returned or raised in another thread."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except Exception as error:  # noqa: BLE001 - the caller checks it
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive()
    return outcome[0]


def test_threads_may_use_a_vector_env_one_after_another():
    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as vec:
        in_thread(lambda: vec.reset(seed=0))
        obs, *_ = in_thread(lambda: vec.step(np.ones(2, dtype=np.int64)))
        assert obs.shape == (2, 4)
        assert vec.step(np.ones(2, dtype=np.int64))[0].shape == (2, 4)


def test_the_hold_is_given_back_after_a_call_that_raised():
    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as vec:
        vec.reset(seed=0)
        with pytest.raises(AttributeError):
            vec.call("no_such_attribute")
        result = in_thread(lambda: vec.step(np.ones(2, dtype=np.int64)))
        assert not isinstance(result, Exception), result


def test_a_call_while_another_thread_holds_the_env_is_refused_naming_backend_and_call():
    gate, entered = threading.Event(), threading.Event()
    vec = torchwm.make_vec_from_fns([GatedEnv, GatedEnv], backend="sync")
    for env in vec.envs:
        env.unwrapped.gate, env.unwrapped.entered = gate, entered
    resetting = threading.Thread(target=vec.reset, kwargs={"seed": 0})
    resetting.start()
    try:
        assert entered.wait(DEADLINE)
        with pytest.raises(AlreadyPendingCallError, match=r"^sync: refused .*being used from another thread"):
            vec.call("observation_space")
        with pytest.raises(gym.error.AlreadyPendingCallError):
            vec.set_attr("x", [1, 2])
    finally:
        gate.set()
        resetting.join(DEADLINE)
    assert not resetting.is_alive()
    for env in vec.envs:
        env.unwrapped.entered = None
    vec.set_attr("x", [1, 2])  # the refused call changed nothing, and the hold is free again
    assert vec.get_attr("x") == (1, 2)
    vec.close()


class StubStepper:
    """What a `ThreadHold` asks of its stepper: whether it closed itself, cutting a call short, closing."""

    closed = False
    close_wait_seconds = 0.05  # the call under way below never leaves: the close waits this long for it

    def __init__(self):
        self.closes = 0
        self.interrupts = 0

    def interrupt(self):
        self.interrupts += 1
        return True

    def close(self):
        self.closes += 1


def test_a_hold_on_its_own_is_closed_until_opened_and_closes_its_stepper_once():
    stepper = StubStepper()
    hold = ThreadHold(stepper, owner="StubVectorEnv (Stub-v0)", backend="stub")
    assert hold.closed  # until the vector env that holds it is built
    hold.closed = False
    with hold.held("resetting"):
        assert hold.user == threading.get_ident()
    assert hold.user is None and hold.in_use.acquire(blocking=False)
    hold.in_use.release()
    hold.close()
    hold.close()
    assert hold.closed and stepper.closes == 1 and stepper.interrupts == 0
    with pytest.raises(
        ClosedEnvironmentError, match=r"^StubVectorEnv \(Stub-v0\) is closed; make a new one$"
    ):
        hold.enter("sending a step")


def test_a_close_from_another_thread_cuts_the_call_under_way_short():
    stepper = StubStepper()
    hold = ThreadHold(stepper, owner="StubVectorEnv (Stub-v0)", backend="stub")
    hold.closed = False
    hold.enter("resetting")  # this thread's call is under way
    closing = threading.Thread(target=hold.close)
    closing.start()
    closing.join(DEADLINE)
    assert not closing.is_alive()
    assert hold.closed and stepper.interrupts == 1 and stepper.closes == 1
    freed = RuntimeError("the buffer the close freed")
    with pytest.raises(ClosedEnvironmentError) as caught:
        hold.raise_if_closed_meanwhile("resetting", freed)
    assert str(caught.value) == "stub: another thread closed this vector env while resetting; make a new one"
    assert caught.value.__cause__ is freed


def test_a_copy_of_a_hold_in_use_is_free():
    hold = ThreadHold(StubStepper(), owner="StubVectorEnv (Stub-v0)", backend="stub")
    hold.closed = False
    hold.enter("resetting")
    copied = copy.deepcopy(hold)
    assert copied.user is None and copied.closer is None and not copied.closed
    assert copied.in_use.acquire(blocking=False)
