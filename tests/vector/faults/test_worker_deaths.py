"""A worker that dies (SIGKILL, a segfault, ``os._exit``, the whole process group killed, the parent's pipe
closed): reported as a `WorkerError` naming the worker and how it died, then the vector env says it is
lost, or, with ``restart_on_crash``, restarts the worker and its envs say their episodes ended."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cloudpickle
import numpy as np
import pytest
from fault_envs import (
    DEADLINE,
    EXIT,
    HANG,
    OK,
    PROCESS_BACKENDS,
    SIGKILL,
    SIGSEGV,
    OwnPipeEnv,
    actions,
    assert_cleaned_up,
    assert_closed,
    assert_workers_gone,
    countdown_pool,
    make,
    make_faulty,
    processes_of,
    received_and_in_flight,
    timed,
)
from support.processes import wait_until_ended

import torchwm
from torchwm.errors import WorkerError

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("fault, words", [(SIGKILL, "SIGKILL"), (SIGSEGV, "SIGSEGV"), (EXIT, "exit code 0")])
def test_a_dead_worker_is_reported_and_the_env_says_it_is_lost(backend, fault, words):
    envs = make(backend)
    # A death, not a hang: it is reported once the process has ended, which a Ray actor's process (its
    # threads, its mappings) took over 1.5 s to do on a loaded machine; a death never seen still times out.
    envs.timeout = 10.0
    pids, block = processes_of(envs)
    envs.reset(seed=0)
    error = timed(lambda: envs.step(actions(fault)))
    assert issubclass(error.type, WorkerError) and error.seconds < DEADLINE, error
    assert "died" in error.text and (backend == "ray" or words in error.text), error
    assert_closed(envs)
    assert_cleaned_up(envs, pids, block)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_worker_killed_mid_step_raises_instead_of_hanging(backend):
    vec = make_faulty(
        backend
    )  # timeout 30 s: a WorkerError (not EnvTimeoutError) shows the death was detected
    pids = vec.worker_pids
    vec.reset()
    vec.send(np.array([OK, OK, HANG, OK]))
    time.sleep(0.2)
    os.kill(pids[1], signal.SIGKILL)
    with pytest.raises(WorkerError, match="worker 1 .* died \\(killed by SIGKILL\\)") as caught:
        vec.recv()
    assert caught.value.worker_index == 1 and caught.value.env_index is None
    with pytest.raises(WorkerError, match="lost a worker"):
        vec.reset()
    assert_workers_gone(vec, pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_restart_on_crash_carries_on(backend):
    vec = make_faulty(backend, restart_on_crash=True)
    pids = vec.worker_pids
    vec.reset()
    vec.step(np.zeros(4, dtype=np.int64))
    os.kill(pids[0], signal.SIGKILL)
    obs, rewards, terminations, truncations, infos = vec.step(np.zeros(4, dtype=np.int64))
    # Worker 0 held envs 0 and 1: their episodes end truncated, flagged, and start afresh.
    assert truncations.tolist() == [True, True, False, False]
    assert infos["worker_restarted"].tolist() == [True, True, False, False]
    assert np.array_equal(obs[:, 0], [0, 0, 2, 2]) and np.array_equal(rewards, [0, 0, 1, 1])
    new_pids = vec.worker_pids
    assert new_pids[0] != pids[0] and new_pids[1] == pids[1]
    obs, rewards, terminations, truncations, infos = vec.step(np.zeros(4, dtype=np.int64))
    # next_step autoreset: the step after a truncation is the reset step of those envs.
    assert np.array_equal(obs[:, 0], [0, 0, 3, 3]) and np.array_equal(rewards, [0, 0, 1, 1])
    obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
    assert np.array_equal(obs[:, 0], [1, 1, 4, 4])
    assert_workers_gone(vec, pids + new_pids)


SIGKILL_SCRIPT = """
import sys, time, torchwm
if __name__ == "__main__":
    envs = torchwm.make_vec("CartPole-v1", 4, backend="shmem", backend_kwargs={"num_workers": 2})
    envs.reset(seed=0)
    print(envs._stepper._batch.layout.name, *envs.worker_pids, flush=True)
    time.sleep(60)
"""


def test_sigkill_of_the_whole_process_group_leaves_no_segment(tmp_path):
    script = tmp_path / "hold.py"
    script.write_text(SIGKILL_SCRIPT)
    child = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        name, *pids = child.stdout.readline().split()
        os.killpg(child.pid, signal.SIGKILL)  # the parent, its workers, the resource tracker, the forkserver
        child.wait(timeout=30)
    finally:
        child.kill()
    wait_until_ended([int(pid) for pid in pids], 10)
    assert name.startswith("torchwm_")
    assert not os.path.exists(f"/dev/shm/{name}")


def test_the_parent_closing_its_pipe_still_ends_a_worker():
    vec = torchwm.make_vec_from_fns(
        [OwnPipeEnv] * 2, backend="subproc", backend_kwargs={"num_workers": 1, "context": "fork"}
    )
    (pid,) = vec.worker_pids
    vec.reset(seed=0)
    vec._stepper._handles[0].conn.close()  # as when the parent dies: the worker's reads end with EOF
    wait_until_ended([pid], DEADLINE)
    assert vec._stepper._handles[0].process.exitcode == 0  # quietly, as nobody is left to answer
    vec.close()


def assert_batched_infos_equal(got, expected):
    assert set(got) == set(expected)
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_batched_infos_equal(got[key], value)
        elif value.dtype == object:  # final_obs: one observation (or None) per env
            assert len(got[key]) == len(value), key
            for a, b in zip(got[key], value, strict=True):
                assert (a is None and b is None) or np.array_equal(a, b), key
        else:
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value), key


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_restarted_envs_report_what_ended_envs_report_in_their_autoreset_mode(backend, mode):
    from torchwm.vector.batching import InfoBatcher

    options = {"num_workers": 2, "context": "fork", "timeout": 30, "restart_on_crash": True}
    vec = torchwm.make_vec(
        "TorchwmTest/Faulty-v0", 4, backend=backend, seed=0, autoreset_mode=mode, backend_kwargs=options
    )
    vec.reset()
    zeros = np.zeros(4, dtype=np.int64)
    vec.step(zeros)
    vec.step(zeros)
    vec.step(zeros[:1], env_ids=[0])  # env 0 one step ahead, so that each row is its own
    before, *_ = vec.step(zeros)
    assert before[:, 0].tolist() == [4, 3, 3, 3]
    pids = vec.worker_pids
    os.kill(pids[0], signal.SIGKILL)
    wait_until_ended(pids[:1], 30)
    obs, rewards, terminations, truncations, infos = vec.step(zeros)
    assert truncations.tolist() == [True, True, False, False]
    assert obs[:, 0].tolist() == [0, 0, 4, 4]
    if mode == "same_step":
        # As every env that ends under same_step: its last observation (the row the user saw before the
        # crash) in final_obs, and its final step's infos in final_info, batched as Gymnasium batches them.
        restarted = {"worker_restarted": True}
        expected = InfoBatcher(4).batch(
            [
                {"final_obs": before[0], "final_info": restarted, **restarted},
                {"final_obs": before[1], "final_info": restarted, **restarted},
                {},
                {},
            ]
        )
        assert_batched_infos_equal(infos, expected)
        assert infos["final_obs"][0].tolist() == [4] and infos["final_obs"][1].tolist() == [3]
    else:
        # next_step: the next step of the restarted envs is their reset step, which needs no final_obs.
        assert_batched_infos_equal(infos, InfoBatcher(4).batch([{"worker_restarted": True}] * 2 + [{}] * 2))
        obs, rewards, *_ = vec.step(zeros)
        assert obs[:, 0].tolist() == [0, 0, 5, 5] and rewards.tolist() == [0, 0, 1, 1]
    assert_workers_gone(vec, pids + vec.worker_pids)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_worker_death_while_others_were_reset_restarts_or_says_so(backend):
    for restart in (False, True):
        with countdown_pool(backend, restart_on_crash=restart) as envs:
            envs.reset()
            received_and_in_flight(envs)
            os.kill(envs.worker_pids[1], signal.SIGKILL)
            if not restart:
                with pytest.raises(WorkerError, match="died"):
                    envs.recv()
                with pytest.raises(WorkerError):  # every later call says so, never stale data
                    envs.reset(env_ids=[0])
                continue
            _, _, _, truncations, infos = envs.recv()
            assert sorted(infos["env_id"].tolist()) == [2, 3] and truncations.all()
            assert infos["worker_restarted"].all()
            envs.send(np.zeros(4, dtype=np.int64))  # every env steps on
            assert len(envs.recv()[1]) == 2
