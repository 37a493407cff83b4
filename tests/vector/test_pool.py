"""The worker pool (`torchwm.vector.pool`) under ``subproc`` and ``shmem``: what it owns once for every
transport (timeouts that name the real deadline, the env factories in the spec, the parent's share
taking the actions as they were sent). The rest of its behaviour is checked by test_parallel.py,
test_inline.py, the fault tests and the conformance suite."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from support.processes import wait_until_ended

import torchwm
import torchwm.plugins
from torchwm import testing
from torchwm.errors import EnvTimeoutError, UnsupportedStackError, WorkerError

BACKENDS = ["subproc", "shmem"]


class SlowResetEnv(gym.Env):
    """Observes its step count; ``reset(options={"sleep": s})`` takes ``s`` seconds."""

    observation_space = spaces.Box(0, 1000, (1,), np.float32)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        time.sleep((options or {}).get("sleep", 0))
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        self.t += int(action)
        return np.array([self.t], np.float32), 1.0, False, False, {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_control_command_past_its_deadline_names_the_real_timeout(backend):
    with torchwm.make_vec_from_fns(
        [SlowResetEnv] * 2,
        backend=backend,
        backend_kwargs={"num_workers": 2, "context": "fork", "timeout": 60},
    ) as envs:
        envs.timeout = 0.5  # from now on: starting the workers on a busy machine may take longer
        with pytest.raises(EnvTimeoutError, match=r"did not answer within 0\.5 s while resetting"):
            envs.reset(options={"sleep": 1.5})
        time.sleep(1.5)
        # The late replies are dropped: the next reset gets its own answer.
        obs, _ = envs.reset()
        assert obs[:, 0].tolist() == [0, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_past_its_deadline_names_the_timeout_of_that_recv(backend):
    class SlowStepEnv(SlowResetEnv):
        def step(self, action):
            time.sleep(3 if action == 2 else 0)
            return super().step(action)

    with torchwm.make_vec_from_fns(
        [SlowStepEnv] * 2,
        backend=backend,
        backend_kwargs={"num_workers": 2, "context": "fork", "timeout": 60},
    ) as envs:
        envs.reset()
        envs.send(np.array([1, 2]))
        time.sleep(1)  # env 0 (no sleep) is back even on a loaded machine; env 1 sleeps 3 s
        with pytest.raises(EnvTimeoutError, match=r"envs \[1\] did not finish their step within 0\.5 s"):
            while True:  # env 1 takes longer than the timeout of recv
                envs.recv(timeout=0.5)


@pytest.mark.parametrize("backend", ["sync", *BACKENDS])
def test_make_vec_from_fns_puts_the_factories_in_the_spec(backend):
    fns = [SlowResetEnv] * 3
    options = {} if backend == "sync" else {"num_workers": 2, "context": "fork"}
    with torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options) as envs:
        assert envs.spec.env_fns == tuple(fns)
        assert envs.spec.backend_kwargs == options
        with pytest.raises(ValueError, match="cannot be written as data"):
            envs.spec.to_dict()
        # The spec alone rebuilds the same thing.
        with torchwm.factory.make_vec_from_spec(envs.spec) as again:
            assert np.array_equal(again.reset(seed=1)[0], envs.reset(seed=1)[0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_env_fn_option_lands_in_the_spec(backend):
    envs = torchwm.TorchVectorizedEnv(SlowResetEnv, num_workers=2, backend=backend, context="fork")
    try:
        assert envs.vec_env.spec.env_fns == (SlowResetEnv, SlowResetEnv)
    finally:
        envs.close()


def test_make_vec_from_fns_refuses_a_backend_that_builds_from_an_env_id(fresh_plugins):
    def from_the_id(spec, num_workers=1):
        raise AssertionError("the backend was called")

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("from-id", from_the_id, options={"num_workers": 1})

    torchwm.plugins.register_plugin(Plugin(), name="from-id")
    with pytest.raises(UnsupportedStackError, match="'from-id' builds its envs from an env id"):
        torchwm.make_vec_from_fns([SlowResetEnv] * 2, backend="from-id")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_parent_share_steps_with_the_actions_as_sent(backend):
    # The parent's own share (inline) steps in recv: it must not see a change the caller makes to its
    # array after send.
    with torchwm.make_vec_from_fns(
        [SlowResetEnv] * 4,
        backend=backend,
        backend_kwargs={"num_workers": 2, "context": "fork", "inline": True},
    ) as envs:
        envs.reset()
        actions = np.array([1, 2, 1, 2])
        envs.send(actions)
        actions[:] = 0
        obs, *_ = envs.recv()
        assert obs[:, 0].tolist() == [1, 2, 1, 2]


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_call_takes_lambdas_closures_and_main_functions_and_a_function_the_worker_cannot_load_fails_that_call(
    backend,
):
    import sys
    import types

    offset = 7
    module = types.ModuleType("torchwm_test_nowhere")  # importable here, not in a worker
    exec("def probe(env):\n    return 1", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        # The default start method (forkserver): workers do not share this process's modules.
        with torchwm.make_vec(testing.COUNTDOWN_ID, 2, backend=backend) as envs:
            envs.reset(seed=0)
            lengths = envs.get_attr("length")
            assert envs.call(lambda env: env.unwrapped.length + offset) == tuple(n + offset for n in lengths)
            with pytest.raises(WorkerError, match="ModuleNotFoundError.*torchwm_test_nowhere"):
                envs.call(module.probe)
            obs, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))  # the workers live on
            assert rewards.tolist() == [1.0, 1.0]
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_ctrl_c_in_a_close_that_waits_for_slow_env_closes_still_ends_every_worker(backend):
    import signal
    import threading

    envs = torchwm.make_vec(testing.COUNTDOWN_ID, 2, backend=backend, backend_kwargs={"num_workers": 2})
    envs.reset(seed=0)
    pids = [pid for pid in envs.worker_pids if pid is not None]
    envs.set_attr("close_delay", 30.0)
    main = threading.main_thread().ident
    timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            envs.close()
    finally:
        timer.cancel()
    wait_until_ended(pids, 5.0)  # not the envs' 30 s: close() ended them
    envs.close()  # quiet
    assert envs.closed


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_in_flight_ids_lists_the_envs_sent_and_not_yet_received(backend):
    with torchwm.make_vec(testing.COUNTDOWN_ID, 4, backend=backend) as envs:
        envs.reset(seed=0)
        assert envs.in_flight_ids == []
        envs.send(np.array([1, 1]), env_ids=[3, 1])
        view = envs.in_flight_ids
        assert view == [1, 3]
        view.append(0)  # a copy
        assert envs.in_flight_ids == [1, 3]
        envs.recv()
        assert envs.in_flight_ids == []


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_a_ctrl_c_in_the_middle_of_a_restart_leaves_envs_that_ask_for_a_reset_then_work(backend, monkeypatch):
    import os

    from torchwm.vector.pool_faults import PoolFaults

    envs = torchwm.make_vec(
        testing.COUNTDOWN_ID, 4, backend=backend, backend_kwargs={"num_workers": 2, "restart_on_crash": True}
    )
    with envs, torchwm.make_vec(testing.COUNTDOWN_ID, 4, backend="sync") as reference:
        envs.reset(seed=0)
        started = PoolFaults.started

        def interrupted(self, handle, deadline, doing):
            # The Ctrl-C comes once the new worker started, before its answers are read.
            if doing == "restarting after a crash":
                monkeypatch.setattr(PoolFaults, "started", started)
                raise KeyboardInterrupt
            return started(self, handle, deadline, doing)

        monkeypatch.setattr(PoolFaults, "started", interrupted)
        envs.set_attr("crash", os.getpid(), env_ids=[3])
        with pytest.raises(KeyboardInterrupt):
            envs.step(np.zeros(4, dtype=np.int64))
        with pytest.raises(gym.error.ResetNeeded, match=r"envs \[2, 3\]"):
            envs.step(np.zeros(2, dtype=np.int64), env_ids=[2, 3])
        obs, _ = envs.reset(seed=200)  # the worker is restarted again, whole
        want, _ = reference.reset(seed=200)
        np.testing.assert_array_equal(obs, want)
        np.testing.assert_array_equal(envs.step(np.ones(4, dtype=np.int64))[0], reference.step(np.ones(4))[0])
