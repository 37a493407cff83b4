"""A vector env that cannot start: an env constructor that raises or exits, envs of different spaces, an env
without spaces, an id the workers cannot see, a script without a main guard: a clear error (with the hint
that applies), every env that was built closed, and no worker or shared block left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from fault_envs import PROCESS_BACKENDS, run_script
from gymnasium import spaces
from support.processes import leaked_segments, mapped_segments, wait_until_ended

import torchwm
from torchwm.errors import WorkerError

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
def test_exception_at_construction_is_reported_with_its_traceback(backend):
    def broken_factory():
        raise RuntimeError("cannot build this env")

    with pytest.raises(WorkerError, match="cannot build this env"):
        torchwm.TorchVectorizedEnv(broken_factory, num_workers=2, backend=backend, context="fork")
    assert leaked_segments() == []


def readme_example():
    """The first ```python block of the README, as a user would copy it."""
    from pathlib import Path

    text = (Path(__file__).parents[3] / "README.md").read_text()
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
