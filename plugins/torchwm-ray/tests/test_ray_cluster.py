"""A real three-node Ray cluster on this machine, started with the commands of docs/cluster.md.

The module's fixture runs the ``ray start`` lines of the page's first ``bash`` block (a head and
two worker nodes, one CPU and one custom resource each), with what a shared machine needs on
top: free ports instead of 6379 and 10001, a temporary directory of their own, no dashboard.
Afterwards it ends exactly the processes it started: every process whose command line names
that directory, and their children. ``ray stop`` is not used, because it would stop every Ray
on the machine, not only these nodes. Each test connects to the cluster and leaves it, but for the
last ones, which share one connection (`connected`).
"""

import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import ray
from cluster import end, processes_started_under
from support.processes import process_running

import torchwm
from torchwm.errors import EnvTimeoutError, WorkerError

RAY_CLI = str(Path(sys.executable).with_name("ray"))
DOCS = Path(__file__).resolve().parents[3] / "docs" / "cluster.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def docs_blocks(language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(DOCS.read_text()) if lang == language]


def docs_file(name: str) -> str:
    """The ``text`` block that follows the page's mention of ``name`` (``myenvs/__init__.py``,
    ``train.py``)."""
    text = DOCS.read_text()
    return BLOCK.search(text, text.index(f"`{name}`")).group(2)


class Cluster:
    """The docs' cluster, on free ports, in a temporary directory of its own."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir
        self.port, self.client_port = _free_port(), _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.client_address = f"ray://127.0.0.1:{self.client_port}"
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}

    def localize(self, line: str) -> str:
        return line.replace("6379", str(self.port)).replace("10001", str(self.client_port))

    def run_docs_commands(self, block: str) -> None:
        """Each line of a docs bash block: ``export`` into this cluster's environment, ``ray start`` run."""
        for line in block.splitlines():
            words = shlex.split(self.localize(line), comments=True)
            if not words:
                continue
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                self.env[name] = value
            elif words[:2] == ["ray", "start"]:
                extra = [f"--temp-dir={self.temp_dir}", "--disable-usage-stats"]
                if "--head" in words:
                    extra.append("--include-dashboard=false")
                done = subprocess.run(
                    [RAY_CLI, *words[1:], *extra], env=self.env, capture_output=True, text=True, timeout=180
                )
                assert done.returncode == 0, f"{line!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    def nodes(self) -> dict[str, dict]:
        """Node id -> resources of the live nodes (connected)."""
        return {node["NodeID"]: node["Resources"] for node in ray.nodes() if node["Alive"]}

    def node_with(self, resource: str) -> str:
        return next(node for node, resources in self.nodes().items() if resource in resources)


@pytest.fixture(scope="module")
def cluster():
    temp_dir = tempfile.mkdtemp(prefix="twmray-")
    try:
        nodes = Cluster(temp_dir)
        start = docs_blocks("bash")[0]
        assert start.count("ray start") == 3, "docs/cluster.md should start a head and two worker nodes"
        nodes.run_docs_commands(start)
        assert nodes.env.get("RAY_AUTH_MODE") == os.environ["RAY_AUTH_MODE"], "as conftest.py"
        yield nodes
    finally:
        if ray.is_initialized():
            ray.shutdown()
        end(processes_started_under(temp_dir))
        left = [p for p in processes_started_under(temp_dir) if process_running(p)]
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"Ray processes of the test cluster still running: {left}"


@pytest.fixture(scope="module")
def connected(cluster):
    """The driver connected to the cluster itself (so that a test can look at it after the env closes), once
    for the module's last tests: a connection costs seconds, and the tests before connect their own way."""
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        yield cluster
    finally:
        ray.shutdown()


def assert_matches_sync(envs, env_id: str, steps: int = 10) -> None:
    with torchwm.make_vec(env_id, envs.num_envs, backend="sync") as ref:
        assert np.array_equal(envs.reset(seed=0)[0], ref.reset(seed=0)[0])
        for _ in range(steps):
            actions = envs.action_space.sample()
            for got, want in zip(envs.step(actions)[:4], ref.step(actions)[:4]):
                assert np.array_equal(got, want)


def test_address_none_joins_the_cluster_in_ray_address_with_one_actor_per_cluster_cpu(cluster, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    with torchwm.make_vec("CartPole-v1", 4, backend="ray", backend_kwargs={"compiled_graph": False}) as envs:
        # Ray names the node by its address, not 127.0.0.1: the port says which cluster it is.
        assert ray.get_runtime_context().gcs_address.endswith(f":{cluster.port}")
        # Three nodes of one CPU: three actors (this machine's CPU count is not the cluster's).
        assert len(envs.actors) == 3
        assert set(envs.actor_node_ids) <= set(cluster.nodes())
        assert_matches_sync(envs, "CartPole-v1", steps=3)
    assert not ray.is_initialized(), "the env joined the cluster, so closing it should disconnect"


def test_address_none_never_joins_a_cluster_through_rays_session_file(cluster, monkeypatch):
    """Without RAY_ADDRESS, a bare ray.init() would join the last `ray start` cluster of the machine, which
    Ray reads from <temp dir>/ray/ray_current_cluster: torchwm starts a private Ray instead."""
    private = tempfile.mkdtemp(prefix="twmtmp-")  # short: Ray's socket paths must fit 107 characters
    try:
        (Path(private) / "ray").mkdir()
        (Path(private) / "ray" / "ray_current_cluster").write_text(cluster.address)
        monkeypatch.setenv("RAY_TMPDIR", private)
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        with torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"num_actors": 1}) as envs:
            assert not ray.get_runtime_context().gcs_address.endswith(f":{cluster.port}")
            assert not set(envs.actor_node_ids) & set(cluster_nodes_by_gcs(cluster))
            envs.reset(seed=0)
        assert not ray.is_initialized()
        assert not [p for p in processes_started_under(private) if process_running(p)], (
            "the private Ray should be stopped"
        )
    finally:
        end(processes_started_under(private))
        shutil.rmtree(private, ignore_errors=True)


def cluster_nodes_by_gcs(cluster) -> list[str]:
    """The cluster's node ids, read through its GCS without connecting this process."""
    from ray._raylet import GcsClient

    client = GcsClient(address=cluster.address)
    return [node.node_id.hex() for node in client.get_all_node_info(timeout=30).values()]


def test_ray_client_steps_by_actor_calls_and_says_so(cluster, caplog):
    kwargs = {"address": cluster.client_address, "num_actors": 2}
    with caplog.at_level(logging.INFO, logger="torchwm_ray"):
        for attempt in range(3):
            try:
                envs = torchwm.make_vec("CartPole-v1", 4, backend="ray", backend_kwargs=kwargs)
                break
            except ConnectionAbortedError as error:
                # Ray's client server can fail to start on a loaded machine (its process exits while
                # starting, or is a zombie when Ray reads its command line); the connection failed
                # cleanly, so another try is a fresh one.
                assert "Initialization failure from server" in str(error) and attempt < 2, error
                time.sleep(10)
    try:
        assert "steps='actor calls (Ray Client: no compiled graph)'" in repr(envs)
        assert any("Ray Client" in record.getMessage() for record in caplog.records)
        assert_matches_sync(envs, "CartPole-v1")
        assert not envs.compiled_graph
        # A second env asking for another cluster is refused, naming both.
        with pytest.raises(ValueError, match=rf"address='{cluster.address}'.*\({cluster.client_address}\)"):
            torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"address": cluster.address})
    finally:
        envs.close()
    assert not ray.is_initialized()


def test_runtime_env_py_modules_ships_an_env_package_the_nodes_do_not_have(cluster, monkeypatch):
    project = Path(tempfile.mkdtemp(prefix="twmpkg-"))
    try:
        (project / "shipped_envs").mkdir()
        (project / "shipped_envs" / "__init__.py").write_text(
            textwrap.dedent("""
            import gymnasium as gym

            class Counter(gym.Env):
                observation_space = gym.spaces.Discrete(100)
                action_space = gym.spaces.Discrete(2)

                def reset(self, *, seed=None, options=None):
                    super().reset(seed=seed)
                    self.n = 0
                    return self.n, {}

                def step(self, action):
                    self.n += 1 + int(action)
                    return self.n, 1.0, self.n > 20, False, {}

            gym.register("ShippedEnvs/Counter-v0", entry_point="shipped_envs:Counter")
        """)
        )
        monkeypatch.syspath_prepend(str(project))  # this process imports it; the nodes' sys.path lacks it
        import shipped_envs

        kwargs = {"address": cluster.address, "num_actors": 1, "timeout": 60}
        with pytest.raises(WorkerError, match="No module named 'shipped_envs'"):
            torchwm.make_vec("ShippedEnvs/Counter-v0", 2, backend="ray", backend_kwargs=kwargs)
        assert not ray.is_initialized()
        kwargs["runtime_env"] = {"py_modules": [shipped_envs]}
        with torchwm.make_vec("ShippedEnvs/Counter-v0", 2, backend="ray", backend_kwargs=kwargs) as envs:
            assert envs.reset(seed=0)[0].tolist() == [0, 0]
            assert envs.step(np.array([0, 1]))[0].tolist() == [1, 2]
    finally:
        import gymnasium as gym

        gym.registry.pop("ShippedEnvs/Counter-v0", None)
        sys.modules.pop("shipped_envs", None)
        shutil.rmtree(project, ignore_errors=True)


def test_the_docs_steps_run_pong_on_three_nodes_with_the_users_env_package(cluster, tmp_path):
    (tmp_path / "myenvs").mkdir()
    (tmp_path / "myenvs" / "__init__.py").write_text(docs_file("myenvs/__init__.py"))
    (tmp_path / "train.py").write_text(docs_file("train.py"))
    [run] = [block for block in docs_blocks("bash") if "python train.py" in block]
    env = dict(cluster.env)
    commands = []
    for line in run.splitlines():
        words = shlex.split(cluster.localize(line), comments=True)
        if words and words[0] == "export":
            name, _, value = words[1].partition("=")
            env[name] = value
        elif words:
            commands.append(words)
    assert env["RAY_ADDRESS"] == cluster.address
    assert commands == [["python", "train.py"]]
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "3 nodes (6, 210, 160, 3)"


# The tests of a connected driver come last: `connected` stays connected until the module ends.


def test_strict_spread_puts_one_actor_on_each_node_and_close_removes_the_group(connected):
    kwargs = {"placement": "STRICT_SPREAD"}
    with torchwm.make_vec("CartPole-v1", 6, backend="ray", backend_kwargs=kwargs) as envs:
        group = envs.placement_group
        assert envs.actor_env_ids == [[0, 1], [2, 3], [4, 5]]
        assert sorted(envs.actor_node_ids) == sorted(connected.nodes()), (
            "one actor on each of the three nodes"
        )
    assert ray.util.placement_group_table(group)["state"] == "REMOVED"


def test_strict_pack_puts_every_actor_on_one_node(connected):
    # The address this process connected with is the same cluster as Ray's name for it (its node's IP).
    kwargs = {
        "num_actors": 3,
        "placement": "STRICT_PACK",
        "actor_options": {"num_cpus": 0.3},
        "address": connected.address,
    }
    with torchwm.make_vec("CartPole-v1", 3, backend="ray", backend_kwargs=kwargs) as envs:
        assert len(set(envs.actor_node_ids)) == 1


def test_shared_memory_is_refused_on_a_ray_of_several_nodes(connected):
    with pytest.raises(
        ValueError, match=r"shared_memory=True needs every actor on the driver's machine.* 3 alive"
    ):
        torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs={"shared_memory": True})


def test_a_list_of_actor_options_pins_each_actor(connected):
    kwargs = {"actor_options": [{"resources": {"node_c": 0.01}}, {"resources": {"head": 0.01}}]}
    with torchwm.make_vec("CartPole-v1", 4, backend="ray", backend_kwargs=kwargs) as envs:
        assert envs.actor_node_ids == [connected.node_with("node_c"), connected.node_with("head")]


def test_a_placement_the_cluster_cannot_hold_fails_after_the_timeout_naming_the_bundles(connected):
    kwargs = {"num_actors": 4, "placement": "STRICT_SPREAD", "timeout": 3}
    with pytest.raises(
        EnvTimeoutError, match=r"placement='STRICT_SPREAD' \(4 bundles: .*'CPU': 1\.0.*within \d+ s"
    ):
        torchwm.make_vec("CartPole-v1", 4, backend="ray", backend_kwargs=kwargs)
    assert {group["state"] for group in ray.util.placement_group_table().values()} <= {"REMOVED"}
    ray.shutdown()
    # Connected by torchwm for that env alone: the failed env leaves the cluster again.
    with pytest.raises(EnvTimeoutError, match="STRICT_SPREAD needs a node per actor"):
        torchwm.make_vec(
            "CartPole-v1", 4, backend="ray", backend_kwargs={**kwargs, "address": connected.address}
        )
    assert not ray.is_initialized()
