"""Faults in the parallel backends: an env that raises, a worker killed or hung, restart_on_crash, cleanup.

After every fault, no worker process and no torchwm shared-memory segment may be left.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.errors import EnvTimeoutError, WorkerError
from torchwm.vector.shared_memory import leaked_segments

BACKENDS = ["subproc", "shmem"]
OK, HANG, RAISE, SEGFAULT = 0, 1, 2, 3


class FaultyEnv(gym.Env):
    """The action says what goes wrong: 0 nothing, 1 hang (sleep 60 s), 2 raise, 3 segfault."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 1000, (1,), np.float32)
        self.action_space = spaces.Discrete(4)
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
        elif action == SEGFAULT:
            faulthandler.disable()  # pytest's handler, inherited by fork, would print a dump
            os.kill(os.getpid(), signal.SIGSEGV)
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, self.t >= 5, {}


gym.register("TorchwmTest/Faulty-v0", entry_point=FaultyEnv)


def make(backend, **kwargs):
    options = {"num_workers": 2, "context": "fork", "timeout": 30, **kwargs}
    return torchwm.make_vec("TorchwmTest/Faulty-v0", 4, backend=backend, seed=0, backend_kwargs=options)


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def assert_cleaned_up(vec, pids):
    vec.close()
    assert all(gone(pid) for pid in pids), "a worker outlived close()"
    assert leaked_segments() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_exception_names_env_worker_and_traceback(backend):
    vec = make(backend)
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
    assert_cleaned_up(vec, pids)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inline", [False, True])
def test_replies_stay_in_step_after_many_env_errors(backend, inline):
    # An error in one worker while the other answers (subproc: a reply, then its raw observation
    # bytes) must leave nothing unread: a stale message would shift every later step's rows.
    vec = make(backend, inline=inline)
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_at_construction_is_reported_with_its_traceback(backend):
    def broken_factory():
        raise RuntimeError("cannot build this env")

    with pytest.raises(WorkerError, match="cannot build this env"):
        torchwm.TorchVectorizedEnv(broken_factory, num_workers=2, backend=backend, context="fork")
    assert leaked_segments() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_worker_killed_mid_step_raises_instead_of_hanging(backend):
    vec = make(backend)  # timeout 30 s: a WorkerError (not EnvTimeoutError) shows the death was detected
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
    assert_cleaned_up(vec, pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_segfault_in_an_env_is_reported(backend):
    vec = make(backend)
    pids = vec.worker_pids
    vec.reset()
    with pytest.raises(WorkerError, match="SIGSEGV"):
        vec.step(np.array([SEGFAULT, OK, OK, OK]))
    assert_cleaned_up(vec, pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hung_worker_times_out_and_close_kills_it(backend):
    vec = make(backend, timeout=0.5)
    pids = vec.worker_pids
    vec.reset()
    with pytest.raises(EnvTimeoutError, match=r"envs \[.*2.*\] did not finish"):
        vec.step(np.array([OK, OK, HANG, OK]))
    # recv(timeout=) on the same envs times out again rather than waiting for ever.
    with pytest.raises(EnvTimeoutError):
        vec.recv(timeout=0.2)
    assert_cleaned_up(vec, pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_on_crash_carries_on(backend):
    vec = make(backend, restart_on_crash=True)
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
    assert_cleaned_up(vec, pids + new_pids)


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_ignore_sigint(backend):
    vec = make(backend)
    pids = vec.worker_pids
    vec.reset()
    os.kill(pids[0], signal.SIGINT)
    time.sleep(0.1)
    obs, *_ = vec.step(np.zeros(4, dtype=np.int64))
    assert np.array_equal(obs[:, 0], [1, 1, 1, 1])
    assert_cleaned_up(vec, pids)


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


@pytest.mark.parametrize("backend", BACKENDS)
def test_ctrl_c_gives_one_keyboard_interrupt_and_cleans_up(backend, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_SCRIPT)
    # SIGINT's default action restored in the child: a test run started in the background inherits it
    # ignored, and Python then installs no KeyboardInterrupt handler at all.
    child = subprocess.Popen([sys.executable, str(script), backend], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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

INTERRUPT_SCRIPT = r'''
import json, os, signal, sys, threading, time
import gymnasium as gym, numpy as np, torchwm
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
    envs = torchwm.make_vec_from_fns([SlowStepEnv] * 4, backend=sys.argv[1],
                                     backend_kwargs={"num_workers": 2, "inline": sys.argv[2] == "1", "timeout": 20})
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
    report["children_left"] = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and
                               open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
'''


def run_script(tmp_path, text, *args, timeout=120):
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(text)
    # SIGINT's default action restored in the child: a test run started in the background inherits it
    # ignored, and Python then installs no KeyboardInterrupt handler at all.
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inline", [False, True])
def test_ctrl_c_mid_step_then_carry_on(backend, inline, tmp_path):
    import json

    done = run_script(tmp_path, INTERRUPT_SCRIPT, backend, int(inline), tmp_path / "sleeping")
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

    text = (Path(__file__).parent.parent / "README.md").read_text()
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_readme_example_runs_as_a_script_without_a_main_guard(backend, tmp_path):
    example = readme_example()
    assert "__main__" not in example and 'backend="shmem"' in example
    done = run_script(tmp_path, example.replace('backend="shmem"', f'backend="{backend}"') + "print('done')\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "done"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("context", [None, "fork"])
def test_script_with_its_own_env_class_needs_no_main_guard(backend, context, tmp_path):
    options = {} if context is None else {"context": context}
    done = run_script(tmp_path, f"BACKEND, OPTIONS = {backend!r}, {options!r}\n" + NO_GUARD_SCRIPT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "obs [1.0, 1.0, 1.0, 1.0]"


def test_spawn_without_a_main_guard_says_so_in_one_line(tmp_path):
    done = run_script(tmp_path, "BACKEND, OPTIONS = 'subproc', {'context': 'spawn', 'num_workers': 2}\n" + NO_GUARD_SCRIPT)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("torchwm.errors.WorkerError") and "'spawn'" in last and "if __name__ == '__main__':" in last


def exit_at_construction():
    os._exit(0)


@pytest.mark.parametrize("backend", BACKENDS)
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
    print(envs._batch.layout.name, *envs.worker_pids, flush=True)
    time.sleep(60)
"""


def test_sigkill_of_the_whole_process_group_leaves_no_segment(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "hold.py"
    script.write_text(SIGKILL_SCRIPT)
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        name, *pids = child.stdout.readline().split()
        os.killpg(child.pid, signal.SIGKILL)  # the parent, its workers, the resource tracker, the forkserver
        child.wait(timeout=30)
    finally:
        child.kill()
    deadline = time.monotonic() + 10
    while not all(gone(int(pid)) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert name.startswith("torchwm_") and all(gone(int(pid)) for pid in pids)
    assert not os.path.exists(f"/dev/shm/{name}")
