"""Two threads on one vector env: a second thread's call is refused with `AlreadyPendingCallError` and
changes nothing, and ``close()`` from another thread mid-step ends the step in `ClosedEnvironmentError`."""

from __future__ import annotations

import sys
import threading
import time
import warnings

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from fault_envs import (
    DEADLINE,
    NUM_ENVS,
    PROCESS_BACKENDS,
    SLEEP,
    FaultEnv,
    actions,
    assert_cleaned_up,
    assert_same_as_sync,
    assert_usable,
    assert_workers_gone,
    make,
    make_faulty,
    processes_of,
)

import torchwm
from torchwm.errors import ClosedEnvironmentError

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_two_threads_stepping_one_env_get_a_clear_refusal_and_leave_it_usable(backend):
    from torchwm.errors import AlreadyPendingCallError

    vec = torchwm.make_vec(
        "CartPole-v1", 4, backend=backend, backend_kwargs={"num_workers": 2, "timeout": 60}
    )
    pids = vec.worker_pids
    vec.reset(seed=0)
    errors: list[BaseException] = []
    steps = [0, 0]
    start = threading.Barrier(2)

    def hammer(k):
        start.wait()
        for _ in range(300):
            try:
                vec.step(np.zeros(4, dtype=np.int64))
                steps[k] += 1
            except Exception as error:  # noqa: BLE001 - checked below
                errors.append(error)

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    # Every error is the refusal of a call while the other thread's call was under way (Gymnasium's
    # type), never a cut channel ("Ctrl-C") nor a lost worker.
    assert all(isinstance(error, gym.error.AlreadyPendingCallError) for error in errors), errors[:3]
    assert all(isinstance(error, AlreadyPendingCallError) for error in errors)
    assert not any("Ctrl-C" in str(error) for error in errors)
    assert sum(steps) > 0
    # The refused calls changed nothing: no env needs a reset (a ResetNeeded here would say one does).
    obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
    assert obs.shape == (4, 4)
    assert_same_as_sync(vec)
    assert_workers_gone(vec, pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_wait_while_another_thread_waits_is_refused_and_says_so(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(FaultEnv, "sleeping_marker", str(tmp_path / "sleeping"))
    envs = make(backend)
    envs.timeout = 30
    pids, block = processes_of(envs)
    envs.reset(seed=0)
    envs.send(actions(SLEEP))
    waiting = threading.Thread(target=envs.recv)  # waits for env 2's 2 s sleep
    waiting.start()
    deadline = time.monotonic() + DEADLINE
    while not (tmp_path / "sleeping").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    for call in (envs.recv, lambda: envs.reset(seed=0), lambda: envs.get_attr("t")):
        with pytest.raises(gym.error.AlreadyPendingCallError, match="another thread|pending call"):
            call()
    with pytest.raises(gym.error.AlreadyPendingCallError, match="being used from another thread"):
        envs.recv()
    waiting.join(DEADLINE)
    assert not waiting.is_alive()
    assert envs.get_attr("t") == (1,) * NUM_ENVS  # the waiting thread took the step in; nothing needs a reset
    assert_usable(envs)
    assert_cleaned_up(envs, pids, block)


@pytest.mark.parametrize("trial", range(6))
def test_close_from_another_thread_mid_step_gives_closed_environment_error(backend, trial):
    """The stepping thread gets ClosedEnvironmentError (or its results, if the call ended before the
    close), never the raw error of whatever the close freed under it, and nothing hangs. Each trial closes
    at another moment of the loop of steps and calls."""
    envs = make(backend) if backend == "ray" else make_faulty(backend, num_workers=2, timeout=30)
    pids, block = processes_of(envs)
    count = envs.num_envs
    envs.reset(seed=0)
    errors: list[BaseException] = []
    calls = [0]
    started = threading.Event()

    def use():
        try:
            while True:
                envs.step(np.zeros(count, dtype=np.int64))
                if calls[0] % 3 == 2:
                    envs.get_attr("t")
                calls[0] += 1
                started.set()
        except BaseException as error:  # noqa: BLE001 - checked below
            errors.append(error)
            started.set()

    user = threading.Thread(target=use, daemon=True)
    user.start()
    assert started.wait(DEADLINE)
    time.sleep(0.003 * trial)
    began = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Gymnasium's warning about the step pending in the other thread
        envs.close()
    closing = time.monotonic() - began
    user.join(DEADLINE)
    assert not user.is_alive(), "the stepping thread hangs after close()"
    assert closing < DEADLINE
    assert len(errors) == 1 and isinstance(errors[0], ClosedEnvironmentError), repr(errors)
    assert calls[0] > 0
    assert_cleaned_up(envs, pids, block)
