"""Faults and bad input in the vector backends: one place for every fault test.

After every fault the vector env must say what happened (a clear error of the right type, within a
deadline), then either work (a reset and steps give the arrays of a fresh ``sync`` env with the same
seed) or say it is closed; and after ``close()`` no worker process, actor or shared-memory block may
be left. docs/backends.md ("Faults") states the contract these tests hold each backend to.

Two test envs inject the faults when they get a given action (`OK`, `RAISE`, `HANG`, ...):

- `FaultEnv`, in each backend's DEFAULT configuration (default backend options, except a short
  timeout), as a user gets it from `torchwm.make_vec`, on every process backend and on Ray when the
  plugin is installed: an exception in ``step``; a ``step`` that hangs past the timeout; SIGKILL of
  the process that runs the env, a real segfault in the env's step (SIGSEGV raised by the kernel in
  the stepping thread: ``os.kill`` would deliver it to any thread of a Ray worker), and
  ``os._exit(0)`` in the env; a ``get_attr`` whose value cannot be pickled (a lock); Ctrl-C (SIGINT
  to the user's own process) while an env's step runs, in a child Python so that the test runner is
  safe. Where the backends' documented contracts differ, each is held to its own: after a timed-out
  step a process backend waits again (and times out again), while Ray's compiled graph, whose step
  can be collected only once, closes the env and says so.
- `FaultyEnv`, on the process backends with two workers under ``fork``: which env and worker an
  error names, replies kept in step after many errors, a worker killed mid-step, restarts, SIGINT.

Ray actors and spawned workers cannot import this module: the envs are registered with their class as
entry point, and the module is pickled by value (with Ray's own cloudpickle too, see ``ray_instance``).
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError, WorkerError
from torchwm.testing import leaked_segments, mapped_segments, process_running, wait_until_ended
from torchwm.vector.transports.shared_block import SharedBatch

FAULT_ID = "TorchwmTest/FaultInjection-v0"
NUM_ENVS = 4
FAULTY_ENV = 2  # on the last worker (or actor) of the default split on two cores or more
TIMEOUT = 1.5  # the backends' timeout: short, so that a hang is noticed quickly
DEADLINE = 30.0  # seconds within which any fault must be reported: generous for a loaded machine
# The action that injects each fault, in both test envs (FaultEnv, FaultyEnv).
OK, RAISE, HANG, SIGKILL, SIGSEGV, EXIT, SLEEP = range(7)

PROCESS_BACKENDS = ["subproc", "shmem"]
BACKENDS = PROCESS_BACKENDS + (["ray"] if importlib.util.find_spec("torchwm_ray") else [])


class FaultEnv(gym.Env):
    """The action says which fault to inject; the observation depends on the seed, to compare arrays."""

    sleeping_marker = (
        ""  # a file SLEEP creates, to say it sleeps (set by the Ctrl-C test; travels with the class)
    )

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1000, 1000, (2,), np.float32)
        self.action_space = spaces.Discrete(7)
        self.lock = threading.Lock()  # an attribute that cannot be pickled
        self.t = 0
        self.mark = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.mark = float(self.np_random.random())
        return np.array([self.t, self.mark], np.float32), {}

    def step(self, action):
        if action == RAISE:
            raise ValueError("the env broke on purpose")
        if action == HANG:
            time.sleep(15)  # ten times the timeout; short, so that a backend that waits it out costs little
        if action == SIGKILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if action == SIGSEGV:
            faulthandler.disable()  # an inherited handler would print a dump
            ctypes.string_at(0)  # a real segfault, in the thread that steps the env
        if action == EXIT:
            os._exit(0)
        if action == SLEEP:
            Path(self.sleeping_marker).touch()
            time.sleep(2)
        self.t += 1
        return np.array([self.t, self.mark], np.float32), float(self.t), False, False, {}


# Ray actors and spawned workers cannot import this test module: they get the env class by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
if FAULT_ID not in gym.registry:
    gym.register(FAULT_ID, entry_point=FaultEnv)


@pytest.fixture(scope="module")
def ray_instance():
    """One local Ray for the module (when Ray is tested), as the plugin's own tests start it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray pickles with its own copy
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    return request.param


@pytest.fixture(autouse=True)
def no_wedge():
    """Fail a test that does not finish within a bound (a backend that wedges), instead of hanging the run."""

    def give_up(signum, frame):
        raise TimeoutError("the test did not finish within 120 s: something wedged")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def make(backend):
    """The default configuration, with a short timeout once started (starting may take longer on a loaded
    machine)."""
    envs = torchwm.make_vec(FAULT_ID, NUM_ENVS, backend=backend, seed=0, backend_kwargs={"timeout": 30})
    envs.timeout = TIMEOUT
    return envs


def actions(fault=OK):
    chosen = np.full(NUM_ENVS, OK, dtype=np.int64)
    chosen[FAULTY_ENV] = fault
    return chosen


def processes_of(envs):
    """The pids that run the envs (workers or actors), and the shared block's name (shmem)."""
    if hasattr(envs, "worker_pids"):
        batch = envs._stepper._batch
        block = batch.layout.name if isinstance(batch, SharedBatch) else None
        return [pid for pid in envs.worker_pids if pid is not None], block
    import ray

    return [ray.get(actor.describe.remote(), timeout=30)["pid"] for actor in envs.actors], None


def assert_cleaned_up(envs, pids, block):
    envs.close()
    wait_until_ended(pids, 30)
    assert leaked_segments() == []
    gc.collect()  # frames of caught exceptions may still hold views of the block
    assert block is None or block not in mapped_segments()


def assert_usable(envs, seed=7):
    """A reset and steps give the arrays of a fresh sync env with the same seed (no stale rows)."""
    with torchwm.make_vec(FAULT_ID, NUM_ENVS, backend="sync") as reference:
        expected = [reference.reset(seed=seed)[0]] + [reference.step(actions())[:4] for _ in range(2)]
    got = [envs.reset(seed=seed)[0]] + [envs.step(actions())[:4] for _ in range(2)]
    np.testing.assert_array_equal(got[0], expected[0])
    for step_got, step_expected in zip(got[1:], expected[1:], strict=True):
        for array_got, array_expected in zip(step_got, step_expected, strict=True):
            np.testing.assert_array_equal(array_got, array_expected)


def assert_closed(envs):
    """The next call says the env is lost or closed, rather than answering."""
    with pytest.raises((WorkerError, ClosedEnvironmentError), match="(?i)lost|died|closed|close"):
        envs.reset(seed=7)


class Raised:
    """What an exception said (kept without its traceback, whose frames would hold the batch arrays)."""

    def __init__(self, exc: BaseException, seconds: float) -> None:
        self.type = type(exc)
        self.text = str(exc)
        self.env_index = getattr(exc, "env_index", None)
        self.seconds = seconds

    def __repr__(self) -> str:
        return f"{self.type.__name__} after {self.seconds:.1f} s: {self.text[:500]}"


def timed(call):
    """Run ``call``, which must raise; returns what it raised and how long that took."""
    started = time.monotonic()
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - checked by the caller
        return Raised(exc, time.monotonic() - started)
    raise AssertionError(f"{call} raised nothing")


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


RAY_INTERRUPT_SCRIPT = r"""
import json, os, signal, sys, threading, time
sys.path.insert(0, sys.argv[2])
import numpy as np, gymnasium as gym, torchwm
import test_faults as tfi

interrupted_at = []

def interrupt_when_an_env_sleeps():
    while not os.path.exists(os.environ["TORCHWM_TEST_SLEEPING"]):
        time.sleep(0.01)
    time.sleep(0.2)
    interrupted_at.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)

if sys.argv[1] == "ray":
    import ray, ray.cloudpickle
    ray.cloudpickle.register_pickle_by_value(tfi)
    ray.init(address=sys.argv[3], log_to_driver=False, configure_logging=False)
report = {}
tfi.FaultEnv.sleeping_marker = os.environ["TORCHWM_TEST_SLEEPING"]
envs = tfi.make(sys.argv[1])
envs.timeout = 10  # the next reset waits for the interrupted step's 2 s sleep to end in the worker
pids, block = tfi.processes_of(envs)
envs.reset(seed=0)
threading.Thread(target=interrupt_when_an_env_sleeps, daemon=True).start()
try:
    envs.step(tfi.actions(tfi.SLEEP))
    report["first"] = "no KeyboardInterrupt"
except KeyboardInterrupt:
    report["first"] = "KeyboardInterrupt"
# From Ctrl-C to the KeyboardInterrupt (the step may take long to reach the env on a loaded machine).
report["seconds"] = time.monotonic() - interrupted_at[0]
try:
    obs, *_ = envs.step(tfi.actions())
    report["next"] = "stepped: " + repr(obs[:, 0].tolist())
except Exception as error:
    report["next"] = f"{type(error).__name__}: {error}"
try:
    tfi.assert_usable(envs)
    report["usable"] = True
except Exception as error:
    report["usable"] = f"{type(error).__name__}: {error}"
envs.close()
deadline = time.monotonic() + 30  # Ray ends its actors' processes after close() returns
while any(tfi.process_running(pid) for pid in pids) and time.monotonic() < deadline:
    time.sleep(0.05)
report["left"] = [pid for pid in pids if tfi.process_running(pid)]
print(json.dumps(report))
"""


def test_ctrl_c_mid_step_leaves_an_env_that_asks_for_a_reset_then_works(backend, tmp_path):
    address = ""
    if backend == "ray":
        import ray

        address = ray.get_runtime_context().gcs_address
    script = tmp_path / "interrupt.py"
    script.write_text(RAY_INTERRUPT_SCRIPT)
    env = {**os.environ, "TORCHWM_TEST_SLEEPING": str(tmp_path / "sleeping")}
    done = subprocess.run(
        [sys.executable, str(script), backend, str(Path(__file__).parent), address],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
        cwd=tmp_path,
        # SIGINT's default action, in case this run inherited it ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["first"] == "KeyboardInterrupt" and report["seconds"] < DEADLINE, report
    # The interrupted step's envs were not reset: the next step must say so, not return stale rows.
    assert report["next"].startswith("ResetNeeded") and "interrupted" in report["next"], report
    assert report["usable"] is True, report
    assert report["left"] == [], report


# -- the process backends with two workers under fork (FaultyEnv) --------------------------------------


class FaultyEnv(gym.Env):
    """The action says what goes wrong (OK, HANG: sleep 60 s, RAISE, SIGSEGV); truncates after 5 steps."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = spaces.Discrete(7)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        if action == HANG:
            time.sleep(60)
        elif action == RAISE:
            raise ValueError("the env broke on purpose")
        elif action == SIGSEGV:
            faulthandler.disable()  # pytest's handler, inherited by fork, would print a dump
            os.kill(os.getpid(), signal.SIGSEGV)
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, self.t >= 5, {}


gym.register("TorchwmTest/Faulty-v0", entry_point=FaultyEnv)


def make_faulty(backend, **kwargs):
    options = {"num_workers": 2, "context": "fork", "timeout": 30, **kwargs}
    return torchwm.make_vec("TorchwmTest/Faulty-v0", 4, backend=backend, seed=0, backend_kwargs=options)


def assert_workers_gone(vec, pids):
    vec.close()
    assert not any(process_running(pid) for pid in pids), "a worker outlived close()"
    assert leaked_segments() == []


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
def test_exception_at_construction_is_reported_with_its_traceback(backend):
    def broken_factory():
        raise RuntimeError("cannot build this env")

    with pytest.raises(WorkerError, match="cannot build this env"):
        torchwm.TorchVectorizedEnv(broken_factory, num_workers=2, backend=backend, context="fork")
    assert leaked_segments() == []


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


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_workers_ignore_sigint(backend):
    vec = make_faulty(backend)
    pids = vec.worker_pids
    vec.reset()
    os.kill(pids[0], signal.SIGINT)
    time.sleep(0.1)
    obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
    assert np.array_equal(obs[:, 0], [1, 1, 1, 1])
    assert_workers_gone(vec, pids)


CTRL_C_SCRIPT = """
import sys, time, numpy as np, torchwm
if __name__ == "__main__":
    envs = torchwm.make_vec("CartPole-v1", 4, backend=sys.argv[1],
                            backend_kwargs={"num_workers": 2, "context": "fork"})
    envs.reset(seed=0)
    print("stepping", flush=True)
    while True:
        envs.step(np.zeros(4, dtype=np.int64))
"""


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_ctrl_c_gives_one_keyboard_interrupt_and_cleans_up(backend, tmp_path):
    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    # SIGINT's default action restored in the child: a test run started in the background inherits it
    # ignored, and Python then installs no KeyboardInterrupt handler at all.
    child = subprocess.Popen(
        [sys.executable, str(script), backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert child.stdout.readline().strip() == "stepping"
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    finally:
        child.kill()
    assert stderr.count("KeyboardInterrupt") == 1, stderr
    assert stderr.count("Traceback") == 1, stderr
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"torchwm_{child.pid}_")]


# -- Ctrl-C in the middle of a step, scripts without a main guard, leftovers after SIGKILL ------------------

INLINE_INTERRUPT_SCRIPT = r'''
import json, os, signal, sys, threading, time
import gymnasium as gym, numpy as np, torchwm
from torchwm.testing import process_running
from gymnasium import spaces

MARKER = sys.argv[3]

class SlowStepEnv(gym.Env):
    """Action 1: say so in MARKER, then sleep 2 s in step. The observation is the step count."""
    observation_space = spaces.Box(0, 1000, (1,), np.float32)
    action_space = spaces.Discrete(2)
    def __init__(self):
        self.t = 0
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}
    def step(self, action):
        if action == 1:
            open(MARKER, "w").close()
            time.sleep(2)
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}

def interrupt_when_an_env_sleeps():
    while not os.path.exists(MARKER):
        time.sleep(0.01)
    time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGINT)

def main():  # guarded, so that this test is about Ctrl-C alone, also under old start-up rules
    options = {"num_workers": 2, "inline": sys.argv[2] == "1", "timeout": 20}
    envs = torchwm.make_vec_from_fns([SlowStepEnv] * 4, backend=sys.argv[1], backend_kwargs=options)
    report = {}
    envs.reset(seed=0)
    envs.step(np.zeros(4, dtype=np.int64))
    threading.Thread(target=interrupt_when_an_env_sleeps, daemon=True).start()
    try:
        envs.step(np.array([1, 0, 0, 1]))  # env 0 (the parent's own under inline) and env 3 sleep
        report["interrupted"] = False
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["t"] = list(envs.get_attr("t"))  # the envs' real state, not a late step reply
    try:
        envs.step(np.zeros(4, dtype=np.int64))
        report["step_after"] = "stepped"
    except gym.error.ResetNeeded as error:
        report["step_after"] = str(error)
    obs, _ = envs.reset(seed=0)
    report["reset"] = obs[:, 0].tolist()
    report["steps"] = [envs.step(np.zeros(4, dtype=np.int64))[0][:, 0].tolist() for _ in range(3)]
    pids = [pid for pid in envs.worker_pids if pid is not None]
    envs.close()
    report["children_left"] = [pid for pid in pids if process_running(pid)]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
'''


def run_script(tmp_path, text, *args, timeout=120):
    script = tmp_path / "script.py"
    script.write_text(text)
    # SIGINT's default action restored in the child: a test run started in the background inherits it
    # ignored, and Python then installs no KeyboardInterrupt handler at all.
    return subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("inline", [False, True])
def test_ctrl_c_mid_step_then_carry_on(backend, inline, tmp_path):
    done = run_script(tmp_path, INLINE_INTERRUPT_SCRIPT, backend, int(inline), tmp_path / "sleeping")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["interrupted"]
    # Isolated workers finish the interrupted step; under inline, Ctrl-C stopped the parent's env 0
    # (and env 1 after it) in the middle of it.
    assert report["t"] == ([1, 1, 2, 2] if inline else [2, 2, 2, 2])
    assert "interrupted" in report["step_after"] and "reset" in report["step_after"]
    assert report["reset"] == [0, 0, 0, 0]
    assert report["steps"] == [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]
    assert report["children_left"] == []


def readme_example():
    """The first ```python block of the README, as a user would copy it."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "README.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


NO_GUARD_SCRIPT = """
import gymnasium as gym, numpy as np, torchwm

class CounterEnv(gym.Env):  # defined in the script itself
    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}
    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}

envs = torchwm.make_vec_from_fns([CounterEnv] * 4, backend=BACKEND, backend_kwargs=OPTIONS)
envs.reset(seed=0)
print("obs", envs.step(np.zeros(4, dtype=np.int64))[0][:, 0].tolist())
envs.close()
"""


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_readme_example_runs_as_a_script_without_a_main_guard(backend, tmp_path):
    example = readme_example()
    assert "__main__" not in example and 'backend="shmem"' in example
    done = run_script(
        tmp_path, example.replace('backend="shmem"', f'backend="{backend}"') + "print('done')\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "done"


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("context", [None, "fork"])
def test_script_with_its_own_env_class_needs_no_main_guard(backend, context, tmp_path):
    options = {} if context is None else {"context": context}
    done = run_script(tmp_path, f"BACKEND, OPTIONS = {backend!r}, {options!r}\n" + NO_GUARD_SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "obs [1.0, 1.0, 1.0, 1.0]"


def test_spawn_without_a_main_guard_says_so_in_one_line(tmp_path):
    done = run_script(
        tmp_path, "BACKEND, OPTIONS = 'subproc', {'context': 'spawn', 'num_workers': 2}\n" + NO_GUARD_SCRIPT
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("torchwm.errors.WorkerError")
        and "'spawn'" in last
        and "if __name__ == '__main__':" in last
    )


def exit_at_construction():
    os._exit(0)


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_an_env_that_exits_while_built_gets_no_main_guard_hint(backend, context):
    with pytest.raises(WorkerError, match="died .* while starting its envs") as caught:
        torchwm.TorchVectorizedEnv(exit_at_construction, num_workers=2, backend=backend, context=context)
    assert "__main__" not in str(caught.value) and "constructor" in str(caught.value)


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


# -- long timeouts: "no deadline" (issue 25, item 1) ---------------------------------------------------------


def cartpole_steps(vec, steps=3):
    """The arrays of a reset (seed 0) and ``steps`` steps of action 1 on ``vec``."""
    arrays = [vec.reset(seed=0)[0]]
    for _ in range(steps):
        arrays.extend(vec.step(np.ones(vec.num_envs, dtype=np.int64))[:4])
    return arrays


def assert_same_as_sync(vec, steps=3):
    with torchwm.make_vec("CartPole-v1", vec.num_envs, backend="sync") as reference:
        expected = cartpole_steps(reference, steps)
    for got, want in zip(cartpole_steps(vec, steps), expected, strict=True):
        np.testing.assert_array_equal(got, want)


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


# -- config files that must not crash the command line (issue 25, item 8) ------------------------------------

DEEP_CONFIGS = {
    "deep.json": '{"id": "CartPole-v1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep.toml": 'id = "CartPole-v1"\nx = ' + "[" * 5000 + "]" * 5000 + "\n",
    "deep_tables.toml": 'id = "CartPole-v1"\nx = ' + "{a = " * 5000 + "1" + "}" * 5000 + "\n",
    "deep.yaml": "id: CartPole-v1\nx: " + "[" * 5000 + "]" * 5000 + "\n",
    # Read, but deeper than the recursive steps after reading (validation) can walk.
    "nested.json": '{"id": "CartPole-v1", "backend_kwargs": {"x": ' + "[" * 600 + "]" * 600 + "}}",
}


def run_bad_config(tmp_path, capsys, name, content):
    from torchwm.cli import main

    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    status = main(["run", str(path), "--steps", "1", "--no-progress"])
    err = capsys.readouterr().err.strip()
    return status, err, path


@pytest.mark.parametrize("name", sorted(DEEP_CONFIGS))
def test_a_config_nested_thousands_deep_is_one_line_and_exit_2(tmp_path, capsys, name):
    status, err, path = run_bad_config(tmp_path, capsys, name, DEEP_CONFIGS[name])
    assert status == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and "nest" in err and "64" in err and "Traceback" not in err


def test_a_config_nested_deeper_than_the_limit_is_refused_as_a_dict_too():
    from torchwm.errors import ConfigError

    deep: dict = {"a": 1}
    for _ in range(100):
        deep = {"a": deep}
    with pytest.raises(ConfigError, match="more than 64 levels deep"):
        torchwm.load_config({"id": "CartPole-v1", "backend_kwargs": deep})


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_a_config_that_is_not_utf8_is_one_line_and_exit_2(tmp_path, capsys, suffix):
    text = {
        ".toml": 'id = "CartPole-v1" # café\n',
        ".yaml": "id: CartPole-v1  # café\n",
        ".json": '{"id": "CartPole-v1", "note": "café"}',
    }[suffix]
    status, err, path = run_bad_config(tmp_path, capsys, "latin1" + suffix, text.encode("latin-1"))
    assert status == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and "not UTF-8" in err and "Traceback" not in err


# -- an observation of the wrong shape (issue 25, item 7) ----------------------------------------------------


class WrongShapeEnv(gym.Env):
    """Box(shape=(3,)), but env ``bad`` returns shape (1,) (on reset when ``on_reset``, else on its steps)."""

    observation_space = spaces.Box(-10, 10, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index=0, bad=2, on_reset=False):
        self.wrong = index == bad
        self.on_reset = on_reset

    def _obs(self, wrong):
        return np.ones(1 if wrong else 3, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(self.wrong and self.on_reset), {}

    def step(self, action):
        return self._obs(self.wrong), 1.0, False, False, {}


def wrong_shape_envs(backend, on_reset=False):
    import functools

    fns = [functools.partial(WrongShapeEnv, i, 2, on_reset) for i in range(4)]
    options = {} if backend == "sync" else {"num_workers": 2, "timeout": 60}
    return torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options)


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
def test_an_observation_of_the_wrong_shape_is_a_value_error_naming_the_env(backend):
    with wrong_shape_envs(backend) as vec:
        vec.reset(seed=0)
        with pytest.raises(ValueError, match=r"env 2 returned an observation of shape \(1,\).* shape \(3,\)"):
            vec.step(np.zeros(4, dtype=np.int64))
    # Gymnasium's SyncVectorEnv refuses it with the same type.
    reference = gym.vector.SyncVectorEnv([lambda i=i: WrongShapeEnv(i) for i in range(4)])
    reference.reset(seed=0)
    with pytest.raises(ValueError):
        reference.step(np.zeros(4, dtype=np.int64))


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
def test_a_reset_observation_of_the_wrong_shape_is_a_value_error_too(backend):
    with wrong_shape_envs(backend, on_reset=True) as vec:
        with pytest.raises(ValueError, match=r"env 2 returned an observation of shape \(1,\)"):
            vec.reset(seed=0)


def test_a_dict_observation_of_the_wrong_shape_names_its_key():
    class DictEnv(WrongShapeEnv):
        observation_space = spaces.Dict({"pos": spaces.Box(-10, 10, (3,), np.float32)})

        def _obs(self, wrong):
            return {"pos": super()._obs(wrong)}

    with torchwm.make_vec_from_fns([lambda i=i: DictEnv(i) for i in range(4)], backend="sync") as vec:
        vec.reset(seed=0)
        with pytest.raises(ValueError, match=r"env 2 returned an observation\['pos'\] of shape \(1,\)"):
            vec.step(np.zeros(4, dtype=np.int64))


# -- a failed start closes the envs that were built (issue 25, item 2) ---------------------------------------


class RecordsClose(gym.Env):
    """Writes its index to the file ``record`` when closed. ``fail="raise"``: env 3's constructor raises;
    ``fail="spaces"``: env 3 has another observation space."""

    action_space = spaces.Discrete(2)

    def __init__(self, index, record, fail=None):
        if fail == "raise" and index == 3:
            raise RuntimeError("env 3 cannot be built")
        self.observation_space = spaces.Box(
            -1, 1, (3,) if fail == "spaces" and index == 3 else (2,), np.float32
        )
        self.index, self.record = index, record

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}

    def close(self):
        with open(self.record, "a") as f:
            f.write(f"{self.index}\n")


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
@pytest.mark.parametrize(
    "fail, error, closed", [("raise", WorkerError, [0, 1, 2]), ("spaces", RuntimeError, [0, 1, 2, 3])]
)
def test_a_failed_start_closes_every_env_that_was_built(backend, fail, error, closed, tmp_path, capfd):
    import functools

    record = str(tmp_path / "closed")
    fns = [functools.partial(RecordsClose, i, record, fail) for i in range(4)]
    options = {} if backend == "sync" else {"num_workers": 2, "context": "fork", "timeout": 60}
    expected = RuntimeError if backend == "sync" else error  # sync raises the env's own error, unwrapped
    with pytest.raises(expected, match="env 3 cannot be built" if fail == "raise" else "observation space"):
        torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options)
    assert sorted(int(line) for line in Path(record).read_text().split()) == closed
    err = capfd.readouterr().err
    assert "Traceback" not in err and "has no attribute" not in err, err  # the workers ended quietly
    assert leaked_segments() == []


# -- forked copies and copies of a vector env never touch the owner's workers (issue 25, items 5 and 6) ------

FORK_SCRIPT = r"""
import gc, json, os, sys
import numpy as np, torchwm
from torchwm.testing import process_running

backend, what = sys.argv[1], sys.argv[2]
envs = torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs={"num_workers": 2, "timeout": 60})
envs.reset(seed=0)
envs.step(np.ones(4, dtype=np.int64))
pids = envs.worker_pids
child = os.fork()
if child == 0:  # a data loader's worker, an evaluator: it exits normally (atexit, finalizers, GC)
    outcome = "exited"
    if what == "close":
        envs.close()
    elif what == "drop":
        del envs
        gc.collect()
    elif what == "step":
        try:
            envs.step(np.ones(4, dtype=np.int64))
            outcome = "stepped"
        except Exception as error:
            outcome = f"{type(error).__name__}: {error}"
        envs.close()
    with open(sys.argv[3], "w") as f:
        f.write(outcome)
    sys.exit(0)
_, status = os.waitpid(child, 0)
report = {"child_status": status, "child": open(sys.argv[3]).read()}
report["alive"] = [os.path.exists(f"/proc/{pid}") for pid in pids]
obs, rewards, *_ = envs.step(np.ones(4, dtype=np.int64))
with torchwm.make_vec("CartPole-v1", 4, backend="sync") as reference:
    reference.reset(seed=0)
    reference.step(np.ones(4, dtype=np.int64))
    expected = reference.step(np.ones(4, dtype=np.int64))[0]
report["same_as_sync"] = bool((obs == expected).all())
envs.close()
report["left"] = [pid for pid in pids if process_running(pid)]
print(json.dumps(report))
"""


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("what", ["exit", "close", "drop", "step"])
def test_a_forked_copy_never_touches_the_parents_workers(backend, what, tmp_path):
    done = run_script(tmp_path, FORK_SCRIPT, backend, what, tmp_path / "child")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "can only join" not in done.stderr, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["child_status"] == 0 and report["alive"] == [True, True], report
    if what == "step":  # the copy refuses to step the parent's workers, and says why
        assert report["child"].startswith("ClosedEnvironmentError") and "forked copy" in report["child"], (
            report
        )
    else:
        assert report["child"] == "exited", report
    assert report["same_as_sync"] and report["left"] == [], report


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
def test_copy_copy_is_refused_and_the_original_keeps_working(backend):
    import copy

    options = {} if backend == "sync" else {"num_workers": 2, "timeout": 60}
    with torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs=options) as vec:
        pids = getattr(vec, "worker_pids", [])
        with pytest.raises(TypeError, match="cannot be copied.*share"):
            copy.copy(vec)
        if backend != "sync":
            with pytest.raises(TypeError, match="cannot be deep-copied"):
                copy.deepcopy(vec)
        gc.collect()
        assert_same_as_sync(vec)
        assert getattr(vec, "worker_pids", []) == pids


def test_a_deep_copy_of_a_sync_env_has_envs_of_its_own():
    import copy

    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as vec:
        vec.reset(seed=0)
        twin = copy.deepcopy(vec)
        assert twin.envs[0] is not vec.envs[0]
        twin.close()
        assert_same_as_sync(vec)


# -- two threads on one vector env (issue 25, item 9) --------------------------------------------------------


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


# -- an env's own broken pipe, close() from another thread, Ctrl-C while workers start (issue 37) -----------


class OwnPipeEnv(gym.Env):
    """Raises the BrokenPipeError or EOFError of a pipe of its own (a simulator process that died) where
    asked: step action 1 or 2, ``reset(options={"fail": kind})``, ``call("fail", kind)``,
    ``set_attr("pipe", kind)``."""

    observation_space = spaces.Box(0, 1000, (1,), np.float32)
    action_space = spaces.Discrete(3)
    errors = {"BrokenPipeError": BrokenPipeError, "EOFError": EOFError}

    def __init__(self) -> None:
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and "fail" in options:
            self.fail(options["fail"])
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        if action:
            self.fail(["BrokenPipeError", "EOFError"][action - 1])
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}

    def fail(self, kind):
        raise self.errors[kind](f"the simulator's pipe ({kind}) broke on purpose")

    @property
    def pipe(self):
        return None

    @pipe.setter
    def pipe(self, kind):
        self.fail(kind)


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


@pytest.mark.parametrize("trial", range(6))
def test_close_from_another_thread_mid_step_gives_closed_environment_error(backend, trial):
    """The stepping thread gets ClosedEnvironmentError (or its results, if the call ended before the
    close), never the raw error of whatever the close freed under it, and nothing hangs. Each trial closes
    at another moment of the loop of steps and calls."""
    if backend == "ray" and trial >= 2:
        pytest.skip("two moments on Ray, whose actors take seconds to start (more: test_ray_faults.py)")
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


START_INTERRUPT_SCRIPT = r"""
import contextlib, gc, io, json, os, signal, sys, threading, time, traceback
import torchwm
import torchwm.cli
import torchwm.cli.run

BACKEND = sys.argv[1]
# Delays (seconds after make_vec begins) of the SIGINT for each start method: from the first moments (a
# pipe made, a process half-started; under forkserver, the wait for the server) to the wait for the envs.
DELAYS = {"fork": [0.0, 0.03, 0.06], "forkserver": [0.03, 0.0, 0.06], "spawn": [0.05]}


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return fields[0], int(fields[1]), f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None


def workers():
    # This process's children and the forkserver's (its workers), but not the forkserver and the resource
    # tracker themselves; a zombie is gone.
    found = {int(p): state(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    found = {pid: s for pid, s in found.items() if s is not None and s[0] != "Z"}
    servers = {pid for pid, s in found.items() if s[1] == os.getpid() and "forkserver" in s[2]}
    return sorted(
        pid for pid, s in found.items()
        if (s[1] == os.getpid() and pid not in servers and "resource_tracker" not in s[2]) or s[1] in servers
    )


class Interrupt:
    # arm(): SIGINT to this process DELAY seconds later.
    def __init__(self, delay):
        self.timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))

    def arm(self):
        self.timer.start()


def interrupted(run, delay):
    # What came out of run() when SIGINT came ``delay`` seconds into its make_vec, and the workers left.
    interrupt = Interrupt(delay)
    outcome = "returned"
    try:
        outcome = f"returned {run(interrupt.arm)}"
        interrupt.timer.join()
        time.sleep(0.5)  # the SIGINT lands here if make_vec ended first
    except KeyboardInterrupt:
        traceback.print_exc()
        outcome = "KeyboardInterrupt" if outcome == "returned" else "KeyboardInterrupt after " + outcome
    except Exception as error:
        traceback.print_exc()
        outcome = f"{type(error).__name__}: {error}"
    interrupt.timer.join()
    gc.collect()
    deadline = time.monotonic() + 10
    while workers() and time.monotonic() < deadline:
        time.sleep(0.02)
    return outcome, workers()


def make_and_close(arm):
    arm()
    envs = torchwm.make_vec("CartPole-v1", 4, backend=BACKEND,
                            backend_kwargs={"num_workers": 2, "context": METHOD})
    envs.close()
    return "built"


def run_command(arm):
    build = torchwm.cli.run.make_vec_from_spec

    def armed_build(spec):
        arm()
        return build(spec)

    torchwm.cli.run.make_vec_from_spec = armed_build
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = torchwm.cli.main([
                "run", "CartPole-v1", "--num-envs", "4", "--backend", BACKEND, "--steps", "1",
                "--no-progress", "--set", "backend_kwargs.num_workers=2",
                "--set", f"backend_kwargs.context={METHOD}",
            ])
    finally:
        torchwm.cli.run.make_vec_from_spec = build
    return f"{status} {err.getvalue().strip()!r}"


if __name__ == "__main__":
    # The plugins and ids loaded first: a SIGINT in the middle of importing a C extension (ale_py) can
    # leave it half-made, which no vector env can help.
    torchwm.load_config({"id": "CartPole-v1", "num_envs": 4, "backend": BACKEND})
    report = []
    for METHOD, delays in DELAYS.items():
        for delay in delays:
            report.append([METHOD, delay, "make_vec", *interrupted(make_and_close, delay)])
    METHOD = "forkserver"  # the default; under fork, Python may drop a SIGINT that comes in os.fork (below)
    report.append([METHOD, 0.02, "torchwm run", *interrupted(run_command, 0.02)])
    print(json.dumps(report))
"""


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_ctrl_c_while_workers_start_is_a_keyboard_interrupt_and_leaves_nothing(backend, tmp_path):
    done = run_script(tmp_path, START_INTERRUPT_SCRIPT, backend)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    for method, delay, what, outcome, left in report:
        assert left == [], (method, delay, what, outcome, left)
        if what == "make_vec":
            # Interrupted while starting (or, for a late SIGINT, after): KeyboardInterrupt itself. A SIGINT
            # that comes while os.fork runs Python's own fork hooks is dropped by Python ("Exception ignored
            # in ..."), and make_vec then ends as if none came.
            assert outcome.startswith("KeyboardInterrupt") or outcome == "returned built", (method, delay)
        else:
            # Ctrl-C while `torchwm run` builds the env: its one line and status 130.
            assert outcome == "returned 130 'torchwm run: interrupted while building the env'", outcome
    # make_vec itself was interrupted under every start method, not only the code after it.
    for method in ("fork", "forkserver", "spawn"):
        assert any(m == method and o == "KeyboardInterrupt" for m, _, w, o, _ in report if w == "make_vec")
    assert "AttributeError" not in done.stderr and "KeyboardInterrupt" in done.stderr
    assert not [name for name in os.listdir("/dev/shm") if name.startswith("torchwm_")]


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


def test_an_id_registered_only_by_the_scripts_top_level_says_why_workers_miss_it(tmp_path):
    # The migration from AsyncVectorEnv(fns): the factory makes an id the script registered at its top
    # level, which forkserver and spawn workers never run. Gymnasium's message alone blames the install.
    script = tmp_path / "train.py"
    script.write_text(
        "import gymnasium as gym\n"
        "import torchwm\n"
        "gym.register('MyNS/Thing-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
        "if __name__ == '__main__':\n"
        "    try:\n"
        "        torchwm.make_vec_from_fns([lambda: gym.make('MyNS/Thing-v0')] * 2, backend='shmem',\n"
        "                                  backend_kwargs={'context': 'forkserver', 'num_workers': 1})\n"
        "    except torchwm.WorkerError as error:\n"
        "        assert isinstance(error, gym.error.NamespaceNotFound)\n"
        "        print(error)\n"
    )
    printed = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    ).stdout
    assert "Namespace MyNS not found" in printed
    assert "runs none of your script's top level" in printed and "'context': 'fork'" in printed


class NoSpacesEnv(gym.Env):
    """An env that defines no spaces (Gymnasium's Env has none by default)."""

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_an_env_without_spaces_gets_its_own_attribute_error_on_every_backend(backend):
    # Not "worker 0 died (exit code 1) ... An env's constructor ended the process".
    options = None if backend == "sync" else {"context": "fork", "num_workers": 1}
    with pytest.raises(AttributeError, match="observation_space"):
        torchwm.make_vec_from_fns([NoSpacesEnv] * 2, backend=backend, backend_kwargs=options)


def test_a_worker_slow_to_import_a_package_is_named_once(tmp_path, monkeypatch):
    # A factory whose module imports something heavy (torch, for one) makes each forkserver worker import
    # it anew: torchwm says which package, and what avoids it.
    from torchwm.vector.transports import processes

    (tmp_path / "slow_to_import.py").write_text(
        "import time\ntime.sleep(0.6)\nimport gymnasium as gym\n\n"
        "def make():\n    return gym.make('CartPole-v1')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(processes, "SLOW_START_SECONDS", 0.5)
    monkeypatch.setattr(processes, "_slow_start_noted", False)
    import slow_to_import

    from torchwm.errors import SlowStartWarning

    with pytest.warns(SlowStartWarning, match=r"importing slow_to_import.*'context': 'fork'") as noted:
        with torchwm.make_vec_from_fns(
            [slow_to_import.make] * 2,
            backend="shmem",
            backend_kwargs={"context": "forkserver", "num_workers": 2},
        ):
            pass
    assert sum("slow_to_import" in str(w.message) for w in noted) == 1  # once, not once per worker
    (note,) = [w.message for w in noted if "slow_to_import" in str(w.message)]
    # A UserWarning users can filter, not the RuntimeWarning TorchRL's tests turn into errors.
    assert isinstance(note, UserWarning) and not isinstance(note, RuntimeWarning)
    assert (
        note.backend == "shmem" and note.start_method == "forkserver" and note.imported[0] == "slow_to_import"
    )


# -- the fault contract while envs live their own cycles (some reset while others are in flight) --------


def countdown_pool(backend, **options):
    from torchwm.testing import COUNTDOWN_ID

    options = {"num_workers": 2, "context": "fork", "batch_size": 2, **options}
    return torchwm.make_vec(COUNTDOWN_ID, 4, backend=backend, seed=0, backend_kwargs=options)


def received_and_in_flight(envs):
    """Send every env, receive the first two; the other worker's envs stay in flight."""
    envs.set_attr("delay", [0.0, 0.0, 1.0, 1.0])  # worker 1's envs are slow
    envs.send(np.zeros(4, dtype=np.int64))
    ready = envs.recv()[4]["env_id"].tolist()
    assert sorted(ready) == [0, 1]
    envs.reset(env_ids=ready)  # while envs 2 and 3 are still stepping
    return ready


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_timeout_while_others_were_reset_leaves_them_in_flight(backend):
    with countdown_pool(backend) as envs:
        envs.reset()
        received_and_in_flight(envs)
        with pytest.raises(EnvTimeoutError):
            envs.recv(timeout=0.05)
        *_, infos = envs.recv()  # still in flight: the next recv gets them, with their own rows
        assert sorted(infos["env_id"].tolist()) == [2, 3]


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


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_ctrl_c_in_a_reset_beside_steps_in_flight_leaves_every_env_correct(backend):
    from torchwm.testing import COUNTDOWN_ID

    with countdown_pool(backend) as envs:
        envs.reset()
        envs.set_attr("delay", [0.0, 1.5, 0.0, 0.0])  # env 1 keeps worker 0 busy
        envs.step(np.zeros(1, dtype=np.int64), env_ids=[0])
        envs.send(np.zeros(1, dtype=np.int64), env_ids=[1])
        timer = threading.Timer(0.3, signal.raise_signal, (signal.SIGINT,))
        timer.start()
        # env 0 shares worker 0 with env 1, whose step the reset waits for: Ctrl-C lands in that wait.
        with pytest.raises(KeyboardInterrupt):
            envs.reset(env_ids=[0])
        timer.join()
        # The interrupted reset sent nothing: env 1's step is still in flight and comes back whole, and
        # env 0 (never reset) resets now.
        *_, infos = envs.recv()
        assert infos["env_id"].tolist() == [1] and infos["steps"].tolist() == [1]
        obs, _ = envs.reset(env_ids=[0], seed=5)
        with torchwm.make_vec(COUNTDOWN_ID, 1, seed=5) as reference:
            np.testing.assert_array_equal(obs, reference.reset()[0])


class GatedEnv(gym.Env):
    """A step that says it began (``entered``) and waits for ``gate`` (threading.Events), so that a test
    holds a step under way."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    gate: threading.Event | None = None
    entered: threading.Event | None = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if self.entered is not None:
            self.entered.set()
        if self.gate is not None:
            self.gate.wait(DEADLINE)
        return np.ones(1, np.float32), 1.0, False, False, {}


def test_sync_refuses_a_second_thread_while_a_call_is_under_way():
    """`sync` holds the vector env for each call as the pool backends do: a second thread's call is refused
    with AlreadyPendingCallError and changes nothing (before, it ran the envs from two threads at once)."""
    gate, entered = threading.Event(), threading.Event()
    vec = torchwm.make_vec_from_fns([GatedEnv, GatedEnv], backend="sync")
    vec.reset(seed=0)
    for env in vec.envs:
        env.unwrapped.gate, env.unwrapped.entered = gate, entered
    stepping = threading.Thread(target=vec.step, args=(np.zeros(2, dtype=np.int64),))
    stepping.start()
    try:
        assert entered.wait(DEADLINE)  # the other thread's step is under way
        for call in (lambda: vec.step(np.zeros(2, dtype=np.int64)), lambda: vec.reset(seed=0), vec.render):
            with pytest.raises(gym.error.AlreadyPendingCallError, match="being used from another thread"):
                call()
    finally:
        gate.set()
        stepping.join(DEADLINE)
    assert not stepping.is_alive()
    obs, rewards, *_ = vec.step(np.zeros(2, dtype=np.int64))  # usable: nothing was left in flight
    assert rewards.tolist() == [1.0, 1.0] and obs.tolist() == [[1.0], [1.0]]
    vec.close()


def test_a_ctrl_c_during_a_workers_start_comes_after_it(monkeypatch):
    from torchwm.vector.transports.processes import ctrl_c_after

    done = []
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, whatever this run had
    try:
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_after():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the signal is handled here, and held
                done.append("the start ended")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert done == ["the start ended"]
    # A handler that is not Python's (an embedding program's) is left alone: it could not be put back.
    monkeypatch.setattr(signal, "getsignal", lambda signum: None)
    installed = []
    monkeypatch.setattr(signal, "signal", lambda *args: installed.append(args))
    with ctrl_c_after():
        pass
    assert installed == []


@pytest.mark.parametrize("min_ready", [None, 1])
def test_a_lost_step_closes_the_env_with_its_own_error_also_under_min_ready(min_ready):
    # StepLost (a step that can never be waited for again: Ray's compiled graph) stands in for a handle's
    # finish_step here. recv(min_ready=) must not take its error for the caller's deadline and wait again.
    from torchwm.plugin_api import StepLost

    vec = torchwm.make_vec(
        "CartPole-v1", 4, backend="shmem", backend_kwargs={"num_workers": 2, "timeout": 30}
    )
    pids = vec.worker_pids
    vec.reset(seed=0)
    vec.send(np.zeros(4, dtype=np.int64))

    def lost(deadline):
        raise StepLost("worker 0 (a stand-in)")

    vec._stepper._handles[0].finish_step = lost
    with pytest.raises(
        EnvTimeoutError, match="this step cannot be waited for again, so this vector env is now"
    ):
        vec.recv(timeout=5, min_ready=min_ready)
    assert vec.closed
    with pytest.raises(ClosedEnvironmentError):
        vec.step(np.zeros(4, dtype=np.int64))
    wait_until_ended(pids, 30)
    assert leaked_segments() == []


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_a_vector_env_whose_construction_fails_after_its_workers_started_ends_them(backend, monkeypatch):
    import torchwm.vector.base
    from torchwm.bench.measure import _tree as process_tree  # this process and its descendants

    def refuse(space, n):
        raise RuntimeError("batch_space refused (a stand-in)")

    before = set(process_tree(os.getpid()))
    monkeypatch.setattr(torchwm.vector.base, "batch_space", refuse)
    with pytest.raises(RuntimeError, match="a stand-in") as caught:
        torchwm.make_vec(
            "CartPole-v1", 4, backend=backend, backend_kwargs={"num_workers": 2, "context": "fork"}
        )
    # While the error is held (its traceback holds the half-built env), as a debugger or a REPL holds it
    wait_until_ended(set(process_tree(os.getpid())) - before, 30)
    assert leaked_segments() == [] and mapped_segments() == [] and caught.traceback
