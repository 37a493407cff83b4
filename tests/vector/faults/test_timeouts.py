"""Steps and waits past their deadline: an `EnvTimeoutError` that names the envs, a step still in flight
waited for again (not stale rows), ``close()`` ending a hung worker, and timeouts too long for any wait
meaning no deadline, while a dead worker is still noticed."""

from __future__ import annotations

import math
import sys

import cloudpickle
import numpy as np
import pytest
from fault_envs import (
    DEADLINE,
    FAULTY_ENV,
    HANG,
    OK,
    PROCESS_BACKENDS,
    SIGSEGV,
    TIMEOUT,
    actions,
    assert_cleaned_up,
    assert_same_as_sync,
    assert_workers_gone,
    countdown_pool,
    make,
    make_faulty,
    processes_of,
    received_and_in_flight,
    timed,
)

import torchwm
from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError, WorkerError

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_a_hang_past_the_timeout_raises_then_close_ends_it(backend):
    envs = make(backend)
    pids, block = processes_of(envs)
    envs.reset(seed=0)
    envs.step(
        actions()
    )  # the hang is in a running env (on Ray the first step also starts the compiled graph)
    error = timed(lambda: envs.step(actions(HANG)))
    assert issubclass(error.type, EnvTimeoutError) and TIMEOUT <= error.seconds < DEADLINE, error
    assert f"{FAULTY_ENV}" in error.text and "timeout" in error.text.lower(), error
    # No stale data: waiting again gives a timeout again (the same step is still in flight), not the
    # results of some other step; or, where the step cannot be waited for again (Ray's compiled
    # graph), the env said it is closed and is.
    if "now closed" in error.text:
        assert envs.closed
        with pytest.raises(ClosedEnvironmentError):
            envs.recv(timeout=0.5)
    else:
        error = timed(lambda: envs.recv(timeout=0.5))
        assert issubclass(error.type, EnvTimeoutError) and error.seconds < DEADLINE, error
    assert_cleaned_up(envs, pids, block)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_hung_worker_times_out_and_close_kills_it(backend):
    vec = make_faulty(backend, timeout=60)
    vec.timeout = 0.5  # from now on: starting the workers on a busy machine may take longer
    pids = vec.worker_pids
    vec.reset()
    with pytest.raises(EnvTimeoutError, match=r"envs \[.*2.*\] did not finish"):
        vec.step(np.array([OK, OK, HANG, OK]))
    # recv(timeout=) on the same envs times out again rather than waiting for ever.
    with pytest.raises(EnvTimeoutError):
        vec.recv(timeout=0.2)
    assert_workers_gone(vec, pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("timeout", [1e9, 3e6, math.inf])
def test_a_timeout_longer_than_any_wait_means_no_deadline(backend, timeout):
    # 1e9 and 3e6 s are past what select.poll takes (2**31 ms): they mean "no limit", as math.inf does.
    with torchwm.make_vec(
        "CartPole-v1", 4, backend=backend, backend_kwargs={"timeout": timeout, "num_workers": 2}
    ) as vec:
        assert_same_as_sync(vec)
        vec.send(np.zeros(4, dtype=np.int64))
        assert vec.recv(timeout=timeout)[1].tolist() == [1.0] * 4
        vec.call("reset")


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_dead_worker_is_still_noticed_without_a_deadline(backend):
    vec = make_faulty(backend, timeout=1e9)
    pids = vec.worker_pids
    vec.reset()
    with pytest.raises(WorkerError, match="SIGSEGV"):
        vec.step(np.array([OK, SIGSEGV, OK, OK]))
    assert_workers_gone(vec, pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_torchwm_run_takes_a_timeout_of_1e9(backend, capsys):
    from torchwm.cli import main

    assert (
        main(
            [
                "run",
                "CartPole-v1",
                "--num-envs",
                "2",
                "--steps",
                "20",
                "--seed",
                "0",
                "--no-progress",
                "--backend",
                backend,
                "--set",
                "backend_kwargs.timeout=1e9",
                "--set",
                "backend_kwargs.num_workers=2",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "steps per second" in captured.out and "Traceback" not in captured.err


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_timeout_while_others_were_reset_leaves_them_in_flight(backend):
    with countdown_pool(backend) as envs:
        envs.reset()
        received_and_in_flight(envs)
        with pytest.raises(EnvTimeoutError):
            envs.recv(timeout=0.05)
        *_, infos = envs.recv()  # still in flight: the next recv gets them, with their own rows
        assert sorted(infos["env_id"].tolist()) == [2, 3]
