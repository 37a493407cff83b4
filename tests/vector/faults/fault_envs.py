"""What every fault test of the vector backends shares: the envs that inject the faults, and the checks.

After every fault the vector env must say what happened (a clear error of the right type, within a
deadline), then either work (a reset and steps give the arrays of a fresh ``sync`` env with the same
seed) or say it is closed; and after ``close()`` no worker process, actor or shared-memory block may
be left. docs/backends.md ("Faults") states the contract these tests hold each backend to; the tests
are in this folder, one file per kind of fault.

Two test envs inject the faults when they get a given action (`OK`, `RAISE`, `HANG`, ...):

- `FaultEnv`, in each backend's DEFAULT configuration (default backend options, except a short
  timeout), as a user gets it from `torchwm.make_vec` (`make`), on every process backend and on Ray
  when the plugin is installed (the ``backend`` fixture of conftest.py).
- `FaultyEnv`, on the process backends with two workers under ``fork`` (`make_faulty`).

Ray actors and spawned workers cannot import this module: the envs are registered with their class as
entry point, and the module is pickled by value (with Ray's own cloudpickle too, see ``ray_instance``).
A test's subprocess script imports it by putting this folder on ``sys.path``."""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import importlib.util
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
from support.processes import leaked_segments, mapped_segments, process_running, wait_until_ended

import torchwm
from torchwm.errors import ClosedEnvironmentError, WorkerError
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
