"""An env's own exception (in ``step``, ``reset``, ``call``, ``set_attr``, its own broken pipe) or a value
that cannot travel back: the error names the env, the worker and the remote traceback, is the env's own
exception type as Gymnasium re-raises it, and leaves the other envs and every worker usable."""

from __future__ import annotations

import sys

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from fault_envs import (
    DEADLINE,
    FAULTY_ENV,
    NUM_ENVS,
    OK,
    PROCESS_BACKENDS,
    RAISE,
    OwnPipeEnv,
    actions,
    assert_cleaned_up,
    assert_usable,
    assert_workers_gone,
    make,
    make_faulty,
    processes_of,
    timed,
)
from support.processes import leaked_segments, process_running

import torchwm
from torchwm.errors import WorkerError

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_an_exception_in_step_names_the_env_and_leaves_the_rest_usable(backend):
    envs = make(backend)
    pids, block = processes_of(envs)
    envs.reset(seed=0)
    error = timed(lambda: envs.step(actions(RAISE)))
    # A WorkerError that is also the env's own exception type, as Gymnasium re-raises it.
    assert issubclass(error.type, WorkerError) and issubclass(error.type, ValueError), error
    assert (
        error.seconds < DEADLINE
        and error.env_index == FAULTY_ENV
        and "the env broke on purpose" in error.text
    )
    # Every backend's contract: the env that raised has no valid state until it is reset, and says so.
    refused = timed(lambda: envs.step(actions()))
    assert issubclass(refused.type, gym.error.ResetNeeded) and f"envs [{FAULTY_ENV}]" in refused.text, refused
    assert_usable(envs)
    assert_cleaned_up(envs, pids, block)


def test_an_unpicklable_result_fails_that_call_only(backend):
    envs = make(backend)
    pids, block = processes_of(envs)
    envs.reset(seed=0)
    error = timed(lambda: envs.get_attr("lock"))
    assert error.seconds < DEADLINE and "pickle" in error.text, error
    # The same type on every backend: a WorkerError, and the TypeError pickle raises.
    assert issubclass(error.type, WorkerError) and issubclass(error.type, TypeError), error
    assert "env 0" in error.text and error.env_index == 0, (
        error
    )  # names the first env whose value cannot travel
    assert processes_of(envs)[0] == pids, "no process may die or restart for an unpicklable value"
    assert envs.get_attr("t") == (0,) * NUM_ENVS
    assert_usable(envs)
    assert_cleaned_up(envs, pids, block)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_env_exception_names_env_worker_and_traceback(backend):
    vec = make_faulty(backend)
    pids = vec.worker_pids
    vec.reset()
    with pytest.raises(WorkerError) as caught:
        vec.step(np.array([OK, OK, RAISE, OK]))
    error = caught.value
    assert error.env_index == 2 and error.worker_index == 1
    assert "ValueError: the env broke on purpose" in error.remote_traceback
    assert "env 2" in str(error) and "the env broke on purpose" in str(error)
    # The other envs are fine: after a reset the vector env steps again.
    vec.reset()
    obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
    assert np.array_equal(obs[:, 0], [1, 1, 1, 1])
    assert_workers_gone(vec, pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_an_env_error_names_the_envs_whose_results_its_send_dropped(backend):
    vec = make_faulty(backend)
    pids = vec.worker_pids
    vec.reset()
    vec.send(np.array([OK, OK]), env_ids=[0, 1])  # worker 0
    vec.send(np.array([RAISE, OK]), env_ids=[2, 3])  # worker 1
    with pytest.raises(WorkerError) as caught:
        vec.recv()
    # Envs 2 and 3 lost their step's results (env 3 may have taken it); envs 0 and 1, another send,
    # keep theirs.
    assert caught.value.dropped_env_ids == (2, 3)
    obs, *_ = vec.recv()
    assert np.array_equal(obs[:, 0], [1, 1])
    vec.reset(env_ids=[2])
    with pytest.raises(WorkerError) as caught:
        vec.step(np.array([OK, RAISE, OK, OK]))
    assert caught.value.dropped_env_ids == (0, 1, 2, 3)
    assert_workers_gone(vec, pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("inline", [False, True])
def test_replies_stay_in_step_after_many_env_errors(backend, inline):
    # An error in one worker while the other answers (subproc: a reply, then its raw observation
    # bytes) must leave nothing unread: a stale message would shift every later step's rows.
    vec = make_faulty(backend, inline=inline)
    vec.reset()
    for k in range(12):
        actions = np.zeros(4, dtype=np.int64)
        actions[0 if k % 2 else 3] = RAISE  # worker 0's env or worker 1's
        with pytest.raises(WorkerError):
            vec.step(actions)
        vec.reset()
        obs, rewards, *_ = vec.step(np.zeros(4, dtype=np.int64))
        assert np.array_equal(obs[:, 0], [1, 1, 1, 1]) and np.array_equal(rewards, [1, 1, 1, 1])
    vec.close()
    assert leaked_segments() == []


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_an_envs_own_broken_pipe_is_its_error_not_a_lost_worker(backend):
    vec = torchwm.make_vec_from_fns(
        [OwnPipeEnv] * 4, backend=backend, backend_kwargs={"num_workers": 2, "context": "fork", "timeout": 30}
    )
    pids = vec.worker_pids
    vec.reset(seed=0)
    for kind, exc_type in OwnPipeEnv.errors.items():
        action = 1 + list(OwnPipeEnv.errors).index(kind)
        failing = [
            (vec.step, (np.array([0, 0, action, 0]),), {}),
            (vec.reset, (), {"env_ids": [2], "options": {"fail": kind}}),
            (vec.call, ("fail", kind), {"env_ids": [2]}),
            (vec.set_attr, ("pipe", kind), {"env_ids": [2]}),
        ]
        for call, args, kwargs in failing:
            with pytest.raises(WorkerError) as caught:
                call(*args, **kwargs)
            error = caught.value
            # The env's own error, as any other exception type gives it: its type, the env, the worker, and
            # its traceback.
            assert isinstance(error, exc_type), repr(error)
            assert error.env_index == 2 and error.worker_index == 1, repr(error)
            assert "env 2" in str(error) and "broke on purpose" in error.remote_traceback, str(error)
            assert vec.worker_pids == pids and all(process_running(pid) for pid in pids)
            vec.reset(seed=0)
            obs, rewards, *_ = vec.step(np.zeros(4, dtype=np.int64))
            assert obs[:, 0].tolist() == [1, 1, 1, 1] and rewards.tolist() == [1, 1, 1, 1]
    assert_workers_gone(vec, pids)
