"""Fault injection: every fault against every process backend, and the Ray plugin when it is installed.

Each backend runs in its DEFAULT configuration (default backend options, except a short timeout), as
a user gets it from `torchwm.make_vec`. The env itself injects the fault when it gets a given action
(or an attribute that cannot be pickled), so the same fault reaches every backend the same way:

- an exception in ``step``;
- a ``step`` that hangs past the timeout;
- SIGKILL of the process that runs the env, a real segfault in the env's step (SIGSEGV raised by the
  kernel in the stepping thread: ``os.kill`` would deliver it to any thread of a Ray worker), and
  ``os._exit(0)`` in the env;
- a ``get_attr`` whose value cannot be pickled (a lock);
- Ctrl-C (SIGINT to the user's own process) while an env's step runs, in a child Python so that
  the test runner is safe.

For each, the test checks: a clear error (type and message) within a deadline; then either a usable
vector env (a reset and steps give the same arrays as a fresh ``sync`` env with the same seed) or a
clearly closed one (an error that says the env is lost or must be closed); no stale data on the next
call; and no process or shared-memory block left after ``close()``. Where the backends' documented
contracts differ (docs/backends.md, "Faults"), each is held to its own: after a timed-out step a
process backend waits again (and times out again), while Ray's compiled graph, whose step can be
collected only once, closes the env and says so; the env whose step raised must be reset on Ray
before it steps again.

Ray actors cannot import this module: the env is registered with its class as entry point, and the
module is pickled by value (with Ray's own cloudpickle too, see ``ray_instance``).
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError, WorkerError
from torchwm.vector.shared_memory import SharedBatch, leaked_segments, mapped_segments

FAULT_ID = "TorchwmTest/FaultInjection-v0"
NUM_ENVS = 4
FAULTY_ENV = 2  # on the last worker (or actor) of the default split on two cores or more
TIMEOUT = 1.5  # the backends' timeout: short, so that a hang is noticed quickly
DEADLINE = 20.0  # seconds within which any fault must be reported: generous for a loaded machine
OK, RAISE, HANG, SIGKILL, SIGSEGV, EXIT, SLEEP = range(7)

BACKENDS = ["subproc", "shmem"] + (["ray"] if importlib.util.find_spec("torchwm_ray") else [])


class FaultEnv(gym.Env):
    """The action says which fault to inject; the observation depends on the seed, to compare arrays."""

    sleeping_marker = ""  # a file SLEEP creates, to say it sleeps (set by the Ctrl-C test; travels with the class)

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
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
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
    """The default configuration, with a short timeout once started (starting may take longer on a loaded machine)."""
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
        block = envs._batch.layout.name if isinstance(getattr(envs, "_batch", None), SharedBatch) else None
        return [pid for pid in envs.worker_pids if pid is not None], block
    import ray

    return [ray.get(actor.describe.remote(), timeout=30)["pid"] for actor in envs.actors], None


def running(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def assert_cleaned_up(envs, pids, block):
    envs.close()
    deadline = time.monotonic() + 30  # Ray ends its actors' processes after close() returns
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if running(pid)], "a process outlived close()"
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
    assert error.seconds < DEADLINE and error.env_index == FAULTY_ENV and "the env broke on purpose" in error.text
    # Every backend's contract: the env that raised has no valid state until it is reset, and says so.
    refused = timed(lambda: envs.step(actions()))
    assert issubclass(refused.type, gym.error.ResetNeeded) and f"envs [{FAULTY_ENV}]" in refused.text, refused
    assert_usable(envs)
    assert_cleaned_up(envs, pids, block)


def test_a_hang_past_the_timeout_raises_then_close_ends_it(backend):
    envs = make(backend)
    pids, block = processes_of(envs)
    envs.reset(seed=0)
    envs.step(actions())  # the hang is in a running env (on Ray the first step also starts the compiled graph)
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
    assert "env 0" in error.text and error.env_index == 0, error  # names the first env whose value cannot travel
    assert processes_of(envs)[0] == pids, "no process may die or restart for an unpicklable value"
    assert envs.get_attr("t") == (0,) * NUM_ENVS
    assert_usable(envs)
    assert_cleaned_up(envs, pids, block)


INTERRUPT_SCRIPT = r"""
import json, os, signal, sys, threading, time
sys.path.insert(0, sys.argv[2])
import numpy as np, gymnasium as gym, torchwm
import test_fault_injection as tfi

def interrupt_when_an_env_sleeps():
    while not os.path.exists(os.environ["TORCHWM_TEST_SLEEPING"]):
        time.sleep(0.01)
    time.sleep(0.2)
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
started = time.monotonic()
try:
    envs.step(tfi.actions(tfi.SLEEP))
    report["first"] = "no KeyboardInterrupt"
except KeyboardInterrupt:
    report["first"] = "KeyboardInterrupt"
report["seconds"] = time.monotonic() - started
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
time.sleep(0.5)
report["left"] = [pid for pid in pids if tfi.running(pid)]
print(json.dumps(report))
"""


def test_ctrl_c_mid_step_leaves_an_env_that_asks_for_a_reset_then_works(backend, tmp_path):
    address = ""
    if backend == "ray":
        import ray

        address = ray.get_runtime_context().gcs_address
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT_SCRIPT)
    env = {**os.environ, "TORCHWM_TEST_SLEEPING": str(tmp_path / "sleeping")}
    done = subprocess.run([sys.executable, str(script), backend, str(Path(__file__).parent), address],
                          capture_output=True, text=True, timeout=100, env=env, cwd=tmp_path,
                          # SIGINT's default action, in case this run inherited it ignored
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["first"] == "KeyboardInterrupt" and report["seconds"] < DEADLINE, report
    # The interrupted step's envs were not reset: the next step must say so, not return stale rows.
    assert report["next"].startswith("ResetNeeded") and "interrupted" in report["next"], report
    assert report["usable"] is True, report
    assert report["left"] == [], report
