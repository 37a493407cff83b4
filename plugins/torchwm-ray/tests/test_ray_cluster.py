"""A real two-node Ray cluster on this machine: the ``ray`` backend spreads its actors over both nodes.

The fixture starts a head node and a second node with ``ray start`` (loopback only, one CPU
each, their own temporary directory), and afterwards ends exactly the processes it started:
every process whose command line names that directory, and their children. ``ray stop``
is not used, because it would stop every Ray on the machine, not only these two nodes.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import ray

import torchwm

RAY_CLI = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes_started_under(mark: str) -> set[int]:
    """Pids of processes whose command line contains ``mark``, and of all their descendants."""
    parents: dict[int, int] = {}
    roots = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if mark in args:
            roots.add(int(entry))
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's bookkeeping is left


def _end(pids: set[int]) -> None:
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)


@pytest.fixture
def two_node_cluster():
    temp_dir = tempfile.mkdtemp(prefix="twmray-")
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}  # as conftest.py
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    try:
        subprocess.run([RAY_CLI, "start", "--head", f"--port={port}", "--include-dashboard=false",
                        '--resources={"head_node": 1}', *common], env=env, check=True, capture_output=True, timeout=120)
        subprocess.run([RAY_CLI, "start", f"--address=127.0.0.1:{port}", '--resources={"node_b": 1}', *common],
                       env=env, check=True, capture_output=True, timeout=120)
        yield f"127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        _end(_processes_started_under(temp_dir))
        left = [p for p in _processes_started_under(temp_dir) if _alive(p)]
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"Ray processes of the test cluster still running: {left}"


def test_actors_run_on_both_nodes_of_a_cluster(two_node_cluster):
    backend_kwargs = {"address": two_node_cluster, "num_actors": 2, "actor_options": {"num_cpus": 1}}
    with torchwm.make_vec("CartPole-v1", 4, backend="ray", seed=0, backend_kwargs=backend_kwargs) as envs, \
            torchwm.make_vec("CartPole-v1", 4, backend="sync", seed=0) as ref:
        nodes = {node["NodeID"]: node["Resources"] for node in ray.nodes() if node["Alive"]}
        assert len(nodes) == 2
        assert sorted(envs.actor_node_ids) == sorted(nodes), "the two actors should run on the two nodes"
        assert np.array_equal(envs.reset()[0], ref.reset()[0])
        for _ in range(10):
            actions = envs.action_space.sample()
            assert np.array_equal(envs.step(actions)[0], ref.step(actions)[0])
    assert not ray.is_initialized(), "the env joined the cluster, so closing it should disconnect"
