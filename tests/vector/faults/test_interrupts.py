"""Ctrl-C (SIGINT) while an env steps, while workers start, in a reset beside steps in flight, and sent to a
worker: one `KeyboardInterrupt` in the user's process, envs that ask for a reset where a step was cut,
then work, and no worker or shared block left. Run in child Pythons, so that the test runner is safe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cloudpickle
import numpy as np
import pytest
from fault_envs import (
    DEADLINE,
    PROCESS_BACKENDS,
    assert_workers_gone,
    countdown_pool,
    make_faulty,
    run_script,
)

import torchwm

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


RAY_INTERRUPT_SCRIPT = r"""
import json, os, signal, sys, threading, time
sys.path.insert(0, sys.argv[2])
import numpy as np, gymnasium as gym, torchwm
import fault_envs as tfi

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


INLINE_INTERRUPT_SCRIPT = r'''
import json, os, signal, sys, threading, time
import gymnasium as gym, numpy as np, torchwm
from support.processes import process_running
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


START_INTERRUPT_SCRIPT = r"""
import contextlib, gc, io, json, os, signal, sys, threading, time, traceback
import torchwm
import torchwm.cli
import torchwm.cli.setup

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
    build = torchwm.cli.setup.make_vec_from_spec  # where the commands build their envs

    def armed_build(spec):
        arm()
        return build(spec)

    torchwm.cli.setup.make_vec_from_spec = armed_build
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = torchwm.cli.main([
                "run", "CartPole-v1", "--num-envs", "4", "--backend", BACKEND, "--steps", "1",
                "--no-progress", "--set", "backend_kwargs.num_workers=2",
                "--set", f"backend_kwargs.context={METHOD}",
            ])
    finally:
        torchwm.cli.setup.make_vec_from_spec = build
    return f"{status} {err.getvalue().strip()!r}"


if __name__ == "__main__":
    # The plugins and ids loaded first: a SIGINT in the middle of importing a C extension (ale_py) can
    # leave it half-made, which no vector env can help.
    torchwm.load_config({"id": "CartPole-v1", "num_envs": 4, "backend": BACKEND})
    report = []
    for METHOD, delays in DELAYS.items():
        for delay in delays:
            report.append([METHOD, delay, "make_vec", *interrupted(make_and_close, delay)])
    # spawn: its workers take a new Python's start, so a SIGINT 0.02 s in lands while they start on any
    # machine. Under forkserver, whose server the cases above have started, the build could end first;
    # under fork, Python may drop a SIGINT that comes in os.fork (below).
    METHOD = "spawn"
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
