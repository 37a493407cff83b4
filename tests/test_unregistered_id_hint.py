"""An env id the script registered but a worker does not know: the error says why, and what to do.

The migration from ``AsyncVectorEnv(fns)`` (which forks on Linux) to ``make_vec_from_fns(fns,
backend="shmem")`` (forkserver by default) meets it first: Gymnasium's own message ("Have you installed
the proper package?") blames an install that is fine.
"""

import subprocess
import sys

import gymnasium as gym
import pytest

from torchwm.errors import WorkerError
from torchwm.vector.pool_faults import worker_error

HELPER = """\
import gymnasium as gym


def make():
    return gym.make("MyNS/Thing-v0")  # registered by the script's top level only
"""

REGISTERING_HELPER = """\
import gymnasium as gym

gym.register("Helper/Thing-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")


def make():
    return gym.make("Helper/Thing-v0")
"""

SCRIPT = """\
import gymnasium as gym
import torchwm

import registering_factory
import thing_factory

gym.register("MyNS/Thing-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")


def build(fn, **options):
    try:
        with torchwm.make_vec_from_fns(
            [fn] * 2, backend="shmem", backend_kwargs={"num_workers": 2, "timeout": 60, **options}
        ) as envs:
            return f"built {envs.reset(seed=0)[0].shape}"
    except gym.error.NamespaceNotFound as error:
        assert isinstance(error, torchwm.WorkerError)
        return f"{type(error).__name__}: {str(error).split(chr(10))[0]}"


if __name__ == "__main__":
    print(build(thing_factory.make))  # the default start method, forkserver
    print(build(thing_factory.make, context="fork"))
    print(build(registering_factory.make))
"""


def test_a_shmem_factory_missing_an_id_the_script_registered_says_why_and_each_advice_works(tmp_path):
    (tmp_path / "thing_factory.py").write_text(HELPER)
    (tmp_path / "registering_factory.py").write_text(REGISTERING_HELPER)
    (tmp_path / "train.py").write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    default, forked, registered_in_module = done.stdout.strip().splitlines()[-3:]
    assert default.startswith("WorkerError[NamespaceNotFound]: shmem: ")
    assert "Namespace MyNS not found" in default  # Gymnasium's sentence first, then why and what to do
    # The pool knows its workers' start method: the message names that one only.
    assert default.endswith(
        "If your script registers this id (gym.register(...), gym.register_envs(ale_py)): this worker was "
        "started by the 'forkserver' start method (torchwm's default), which runs none of your script's top "
        "level, so the id is unknown there. Register it inside the env factory (or at the top of the module "
        "that defines the factory, if that is not your script), or pass backend_kwargs={'context': 'fork'}: "
        "forked workers start with every id registered before the vector env was made"
    ), default
    assert forked == "built (2, 4)"
    assert registered_in_module == "built (2, 4)"


@pytest.mark.parametrize(
    ("start_method", "why"),
    [
        (
            "forkserver",
            "this worker was started by the 'forkserver' start method (torchwm's default), which ",
        ),
        ("spawn", "this worker was started by the 'spawn' start method, which runs your script's top level "),
        (None, "a worker started by the 'forkserver' start method (torchwm's default) runs none of your "),
    ],
)
@pytest.mark.parametrize(
    "original_type", [gym.error.NamespaceNotFound, gym.error.NameNotFound, gym.error.VersionNotFound]
)
def test_the_hint_names_the_start_method_where_it_is_known(start_method, why, original_type):
    error = worker_error(
        "shmem: env 0 raised it", original_type=original_type, start_method=start_method, env_index=0
    )
    assert isinstance(error, WorkerError) and isinstance(error, original_type) and error.env_index == 0
    message = str(error)
    assert message.startswith("shmem: env 0 raised it. If your script registers this id ")
    assert why in message and "backend_kwargs={'context': 'fork'}" in message


def test_a_forked_worker_or_another_error_gets_no_hint():
    # A forked worker has every id the parent registered before it started: the hint would mislead.
    forked = worker_error("raised it", original_type=gym.error.NamespaceNotFound, start_method="fork")
    other = worker_error("raised it", original_type=ValueError)
    assert str(forked) == str(other) == "raised it"
