"""Connecting and shipping code on one machine: which Ray an env uses, factories, ``runtime_env``.

The tests that need a real cluster (``RAY_ADDRESS``, Ray's session file, Ray Client, placement)
are in test_ray_cluster.py.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import gymnasium as gym
import numpy as np
import pytest
import ray
from torchwm_ray import connection

import torchwm


class CountingEnv(gym.Env):
    """An env only this test module defines: the actors cannot import it, so it must travel by value."""

    observation_space = gym.spaces.Box(0, 1000, (2,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 10))
        return self._obs(), {}

    def step(self, action):
        self.t += int(action) + 1
        return self._obs(), float(self.t % 3), self.t > 40, False, {"t": self.t}

    def _obs(self):
        return np.array([self.t, self.offset], dtype=np.float32)


def make_counting(offset: int):
    return lambda: CountingEnv(offset)


def assert_same_run(envs, ref, steps: int = 30) -> None:
    rng = np.random.default_rng(1)
    for got, want in zip(envs.reset(seed=5), ref.reset(seed=5)):
        assert np.array_equal(got, want) if isinstance(got, np.ndarray) else got.keys() == want.keys()
    for _ in range(steps):
        actions = rng.integers(0, 3, size=envs.num_envs)
        got, want = envs.step(actions), ref.step(actions)
        for a, b in zip(got[:4], want[:4]):
            assert np.array_equal(a, b)


def test_make_vec_from_fns_runs_a_test_module_class_on_the_actors(local_ray):
    fns = [make_counting(i) for i in range(4)]
    with (
        torchwm.make_vec_from_fns(fns, backend="ray", backend_kwargs={"num_actors": 2}) as envs,
        torchwm.make_vec_from_fns(fns, backend="sync") as ref,
    ):
        assert envs.spec.env_fns == tuple(fns)
        assert_same_run(envs, ref)
        assert envs.reset(seed=0)[0][:, 1].tolist() == [0, 1, 2, 3]


def test_env_fn_option_runs_on_the_actors(local_ray):
    kwargs = {"num_actors": 2, "env_fn": CountingEnv, "compiled_graph": False}
    with (
        torchwm.make_vec("CartPole-v1", 3, backend="ray", backend_kwargs=kwargs) as envs,
        torchwm.make_vec_from_fns([CountingEnv] * 3, backend="sync") as ref,
    ):
        assert envs.spec.env_fns == (CountingEnv,) * 3
        assert_same_run(envs, ref)


def test_a_second_env_asking_for_another_address_is_refused_before_it_starts(local_ray, monkeypatch):
    def no_actor(*args, **kwargs):
        raise AssertionError("an actor was started")

    monkeypatch.setattr(connection.LocalRay, "connect", no_actor)
    current = ray.get_runtime_context().gcs_address
    with pytest.raises(ValueError, match=rf"address='127.0.0.1:1'.*another Ray.*\({current}\)"):
        torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"address": "127.0.0.1:1"})
    with pytest.raises(ValueError, match=r"ray://127.0.0.1:1"):
        torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"address": "ray://127.0.0.1:1"})
    # The Ray this process is connected to, by its own address or as the local Ray it started, is accepted.
    for address in (current, "local", None):
        connection.check_address(address)


def test_address_none_with_a_connection_uses_it_even_when_ray_address_is_set(local_ray, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    current = ray.get_runtime_context().gcs_address
    with torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"num_actors": 1}) as envs:
        envs.reset(seed=0)
        assert ray.get_runtime_context().gcs_address == current


def test_bad_placement_options_fail_before_ray_is_touched(monkeypatch):
    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started or joined before the options were checked")

    monkeypatch.setattr(connection.LocalRay, "connect", no_ray)
    cases = [
        ({"placement": "EVERYWHERE"}, ValueError, "placement must be one of"),
        ({"actor_options": [{}, 3]}, TypeError, "one such dict per actor"),
        (
            {"actor_options": [{}, {}, {}], "num_actors": 2},
            ValueError,
            "3 dicts, one per actor, but there are 2",
        ),
        ({"placement": "PACK", "actor_options": {"scheduling_strategy": "SPREAD"}}, ValueError, "not both"),
        ({"runtime_env": ["py_modules"]}, TypeError, "runtime_env must be a dict"),
        ({"runtime_env": {}, "init_kwargs": {"runtime_env": {}}}, ValueError, "give runtime_env once"),
    ]
    for backend_kwargs, error, words in cases:
        with pytest.raises(error, match=words):
            torchwm.make_vec("CartPole-v1", 4, backend="ray", backend_kwargs=backend_kwargs)


def test_a_private_local_ray_is_started_with_address_local_and_never_given_to_a_cluster(monkeypatch):
    """``address=None`` without ``RAY_ADDRESS`` calls ``ray.init(address="local", num_cpus=...)``; with it
    set, ``ray.init(address=<it>)`` and no resources (which Ray refuses for an existing cluster)."""
    calls = []

    def fake_init(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("stop here")

    shutdowns = []
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # whether or not this module's Ray runs
    # A failed ray.init is undone with ray.shutdown(); the real one would stop this module's Ray.
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(True))
    for address, environ, expected in (
        (None, None, "local"),
        ("local", "10.0.0.1:6379", "local"),
        (None, "10.0.0.1:6379", "10.0.0.1:6379"),
        ("auto", None, "auto"),
    ):
        if environ is None:
            monkeypatch.delenv("RAY_ADDRESS", raising=False)
        else:
            monkeypatch.setenv("RAY_ADDRESS", environ)
        with pytest.raises(RuntimeError, match="stop here"):
            connection.LocalRay.connect(address, {})
        assert calls[-1]["address"] == expected
        assert ("num_cpus" in calls[-1]) == (expected == "local"), calls[-1]
        assert len(shutdowns) == len(calls)


def test_a_local_ray_that_timed_out_during_startup_is_started_once_more(monkeypatch, caplog):
    """Ray gives a local raylet 30 s to register: a busy machine can miss it. Only that failure of a new
    local Ray is retried, once, after undoing the first start."""
    events = []

    def fake_init(**kwargs):
        events.append(("init", kwargs["address"]))
        if len([e for e in events if e[0] == "init"]) % 2:  # every first attempt
            raise Exception("The current node timed out during startup. This could happen because ...")

    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: events.append(("shutdown", None)))
    monkeypatch.setattr(connection.LocalRay, "started", False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with caplog.at_level("WARNING", logger="torchwm_ray.connection"):
        connection.LocalRay.connect(None, {})
    assert events == [("init", "local"), ("shutdown", None), ("init", "local")]
    assert "did not start in time" in caplog.text
    # A cluster's address is not retried: there the same words mean something else is wrong.
    events.clear()
    with pytest.raises(Exception, match="timed out during startup"):
        connection.LocalRay.connect("10.0.0.1:6379", {})
    assert events == [("init", "10.0.0.1:6379"), ("shutdown", None)]


def test_runtime_env_once_connected_is_refused(local_ray):
    # Ray takes local code (py_modules) only in ray.init's runtime_env: it cannot apply to this connection.
    with pytest.raises(
        ValueError, match=r"runtime_env=\{'py_modules': \['x'\]\} applies when torchwm connects"
    ):
        torchwm.make_vec(
            "CartPole-v1", 2, backend="ray", backend_kwargs={"runtime_env": {"py_modules": ["x"]}}
        )


FAILED_CLIENT_SCRIPT = """
import socket, sys
import torchwm

with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
try:
    torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"address": f"ray://127.0.0.1:{port}"})
    sys.exit("connected to a port nothing listens on")
except ConnectionError as error:
    print("refused:", type(error).__name__)
# The failed Ray Client connection left no client mode behind: a local Ray starts.
with torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"address": "local"}) as envs:
    envs.reset(seed=0)
    print("local steps:", envs.step(envs.action_space.sample())[0].shape)
"""


def test_a_failed_ray_client_connection_leaves_the_process_able_to_start_ray(tmp_path):
    """Ray leaves a process whose Ray Client connection failed in client mode (every later ray.init fails
    with a bare AssertionError); torchwm undoes it."""
    ray_dir = tempfile.mkdtemp(prefix="twm", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = {
        **os.environ,
        # Ray Client's connection attempts, shortened: the port is closed, waiting longer shows nothing.
        "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": "1",
        "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": "1",
        "RAY_TMPDIR": ray_dir,
    }
    env.pop("RAY_ADDRESS", None)
    try:
        done = subprocess.run(
            [sys.executable, "-c", FAILED_CLIENT_SCRIPT],
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
            cwd=tmp_path,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: ConnectionError" in done.stdout and "local steps: (2, 4)" in done.stdout, done.stdout


def test_the_plugin_installs_what_ray_client_needs():
    # docs/cluster.md's first command starts Ray Client's server (`ray start --ray-client-server-port`),
    # which Ray refuses without its [client] extra; the plugin depends on ray[client], so its install
    # brings it. Ray's own check of that extra:
    import importlib.metadata

    from packaging.requirements import Requirement
    from ray._private.utils import get_ray_client_dependency_error

    (ray_requirement,) = [
        r for r in map(Requirement, importlib.metadata.requires("torchwm-ray")) if r.name == "ray"
    ]
    assert "client" in ray_requirement.extras
    assert get_ray_client_dependency_error() is None
