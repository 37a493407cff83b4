"""A multi-node Ray cluster on this machine for one test module, and the faults a real cluster has.

`LocalCluster` runs `ray.cluster_utils.Cluster` (a head node and worker nodes, one CPU each) in a
child process, so that the test process is the driver, as a user's program is: it can lose a
node (`LocalCluster.kill_node`) or one actor's process (`LocalCluster.kill_process`) and go on.
Every node listens on loopback, keeps its files in a private temporary directory (also the
``RAY_TMPDIR`` of the child, so the cluster never writes the machine's shared "current cluster"
file that a plain ``ray.init()`` elsewhere would join) and runs with token authentication and
usage stats off, as conftest.py sets for the test process. Each worker node ``i`` (from 1) has the
custom resources ``{"node_<i>": 1, "worker": 1}`` for tests to place actors with; the head has
``{"head": 1}``. Node death is detected quickly (`HEALTH_CHECK`).

`LocalCluster.close` ends every process the cluster started (the child asks Ray to, then whatever
is left is ended: every process whose command line names the temporary directory, and the
descendants of those and of the child) and reports any that survived.

Usage: ``with LocalCluster(workers=2) as cluster: ... cluster.address ...``; the ``ray_cluster``
fixture below gives each test the test module's cluster (import both fixtures into the module:
``from cluster import module_cluster, ray_cluster``), whole again after the test: a worker node it
killed is replaced, and the driver disconnected.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.processes import process_running, wait_until_ended

# Ray's GCS declares a node dead after this many failed health checks, one a period. A killed raylet
# fails each check at once, so the cluster notices a lost node after about threshold * period.
HEALTH_CHECK = {
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 4,
    "health_check_timeout_ms": 3000,
}
START_TIMEOUT = 180.0  # seconds for the cluster, or one node, to start on a loaded machine
MARK = "TWM-CLUSTER "  # the child's replies on its stdout start with this (Ray may print there too)
# Ray on Linux takes 127.0.0.1 in an address for "this machine" and replaces it by the address other machines
# reach it at, where nodes that listen on loopback only do not answer; "0" keeps 127.0.0.1 (the setting is for
# one-machine clusters on Windows and macOS, where it is Ray's default).
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
CHILD_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", **LOOPBACK_ENV}


@dataclass
class NodeInfo:
    """One node of the cluster, as the child started it."""

    index: int  # 0: the head; worker nodes from 1
    node_id: str  # Ray's node id (hex), as `ray.nodes()` and `get_node_id()` give it
    raylet_pid: int
    resources: dict[str, float] = field(default_factory=dict)  # the custom resources it was given
    alive: bool = True


# -- the child: runs the cluster and answers commands on its stdin ---------------------------------


def _serve(temp_dir: str, workers: int) -> None:
    import ray
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    ray_dir = os.path.join(temp_dir, "ray")  # where Ray's own default would be, under RAY_TMPDIR
    os.makedirs(ray_dir, exist_ok=True)
    common = {
        "num_cpus": 1,
        "node_ip_address": "127.0.0.1",
        "temp_dir": ray_dir,
        "object_store_memory": 80 * 1024 * 1024,
        "include_dashboard": False,
    }
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**common, "resources": {"head": 1}, "_system_config": dict(HEALTH_CHECK)},
    )
    nodes: dict[int, Any] = {}

    def describe(index: int, node: Any, resources: dict[str, float]) -> dict[str, Any]:
        raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process
        return {"index": index, "node_id": node.node_id, "raylet_pid": raylet.pid, "resources": resources}

    def add(index: int) -> dict[str, Any]:
        resources = {f"node_{index}": 1.0, "worker": 1.0}
        nodes[index] = cluster.add_node(**common, resources=resources)
        return describe(index, nodes[index], resources)

    described = [describe(0, cluster.head_node, {"head": 1.0})] + [add(i) for i in range(1, workers + 1)]
    cluster.wait_for_nodes(timeout=START_TIMEOUT)

    def reply(value: Any) -> None:
        sys.stdout.write(MARK + json.dumps(value) + "\n")
        sys.stdout.flush()

    reply({"address": cluster.address, "nodes": described})
    for line in sys.stdin:
        command = json.loads(line)
        if command["do"] == "add":
            reply(add(command["index"]))
            cluster.wait_for_nodes(timeout=START_TIMEOUT)
        elif command["do"] == "forget":  # a node the driver killed: Ray must not try to end it again
            cluster.worker_nodes.discard(nodes.pop(command["index"]))
            reply(None)
        elif command["do"] == "stop":
            break
    try:
        cluster.shutdown()
    finally:
        reply("stopped")
        del ray


# -- the driver's side -------------------------------------------------------------------------------


def processes_started_under(mark: str, roots: set[int] = frozenset()) -> set[int]:  # type: ignore[assignment]
    """Pids of ``roots``, of processes whose command line contains ``mark``, and of all their descendants."""
    parents: dict[int, int] = {}
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if mark in args or int(entry) in roots:
            found.add(int(entry))
    return found | descendants(found, parents)


def descendants(pids: set[int], parents: dict[int, int] | None = None) -> set[int]:
    """Every descendant of ``pids`` (not ``pids`` themselves)."""
    if parents is None:
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    parents[int(entry)] = int(
                        Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
                    )
                except (OSError, ValueError, IndexError):
                    continue
    found = set(pids)
    grew = True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in found and pid not in found:
                found.add(pid)
                grew = True
    return found - set(pids)


def end(pids: set[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, each of ``pids`` still running."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(process_running(p) for p in pids):
            time.sleep(0.1)


def keep_loopback(on: bool = True) -> None:
    """Make this process (the driver) reach the cluster on 127.0.0.1 (see `LOOPBACK_ENV`), or stop: the
    setting must not outlive the cluster, as a later ``ray start`` of the same test process would refuse
    to join a head ("Multi-node Ray clusters are not supported on Windows and OSX")."""
    from ray._private import ray_constants

    if on:
        os.environ.update(LOOPBACK_ENV)
    else:
        for name in LOOPBACK_ENV:
            os.environ.pop(name, None)
    ray_constants.ENABLE_RAY_CLUSTER = not on  # read when an address is resolved; the variable only at import


class LocalCluster:
    """A head node and ``workers`` worker nodes of one CPU each, run by a child process (see the module)."""

    def __init__(self, workers: int = 2) -> None:
        keep_loopback()
        self.temp_dir = tempfile.mkdtemp(prefix="twmrc-")  # short: Ray's socket paths live under it
        self.nodes: list[NodeInfo] = []
        self.address = ""
        log = open(Path(self.temp_dir) / "cluster-child.log", "wb")  # noqa: SIM115 - the child's lifetime
        env = {**os.environ, **CHILD_ENV, "RAY_TMPDIR": self.temp_dir}
        env.pop("RAY_ADDRESS", None)
        try:
            self.child = subprocess.Popen(
                [sys.executable, __file__, self.temp_dir, str(workers)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self.temp_dir,
            )
        finally:
            log.close()
        try:
            started = self._read(START_TIMEOUT)
        except BaseException:
            self.close()
            raise
        self.address = started["address"]
        self.nodes = [NodeInfo(**node) for node in started["nodes"]]

    def _read(self, timeout: float) -> Any:
        """The child's next reply, within ``timeout``."""
        assert self.child.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"the test cluster did not answer within {timeout:g} s; see {self.log_tail()}"
                )
            if select.select([self.child.stdout], [], [], left)[0]:
                line = self.child.stdout.readline().decode(errors="replace")
                if not line:
                    raise RuntimeError(f"the test cluster's process ended; its log: {self.log_tail()}")
                if line.startswith(MARK):
                    return json.loads(line[len(MARK) :])

    def _send(self, command: dict[str, Any]) -> None:
        assert self.child.stdin is not None
        self.child.stdin.write((json.dumps(command) + "\n").encode())
        self.child.stdin.flush()

    def log_tail(self) -> str:
        try:
            return (Path(self.temp_dir) / "cluster-child.log").read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    # -- what tests use --------------------------------------------------------------------------------

    @property
    def workers(self) -> list[NodeInfo]:
        """The worker nodes still alive, in order."""
        return [node for node in self.nodes if node.index > 0 and node.alive]

    def node(self, node_id: str) -> NodeInfo:
        return next(node for node in self.nodes if node.node_id == node_id)

    def node_processes(self, node: NodeInfo) -> set[int]:
        """The pids of a node's raylet and of everything it started (its actors' worker processes, agents)."""
        return {node.raylet_pid} | descendants({node.raylet_pid})

    def kill_node(self, node: NodeInfo, workers: bool = True) -> set[int]:
        """Lose a worker node: SIGKILL its raylet and (``workers``: a lost machine) every process it started;
        ``workers=False`` kills the raylet alone (a raylet crash), leaving its workers to notice.
        Returns the pids of the node's processes."""
        assert node.index > 0, "the head node holds the cluster's state: kill a worker node"
        pids = self.node_processes(node)
        for pid in sorted(pids) if workers else [node.raylet_pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        node.alive = False
        self._send({"do": "forget", "index": node.index})
        self._read(30)
        return pids

    @staticmethod
    def kill_process(pid: int) -> None:
        """SIGKILL one process (an actor's, from ``envs.worker_pids``) and wait for it to end."""
        os.kill(pid, signal.SIGKILL)
        wait_until_ended([pid], 30)

    def replace_lost_nodes(self) -> None:
        """Start a new worker node (same index and resources) for each one a test killed."""
        for node in [n for n in self.nodes if not n.alive]:
            self._send({"do": "add", "index": node.index})
            self.nodes[self.nodes.index(node)] = NodeInfo(**self._read(START_TIMEOUT))

    def close(self) -> None:
        """End the cluster and every process it started; raises if any is left."""
        try:
            if self.child.poll() is None:
                try:
                    self._send({"do": "stop"})
                    self._read(60)
                except (OSError, RuntimeError, TimeoutError):
                    pass
        finally:
            keep_loopback(False)
            try:
                self.child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            end(processes_started_under(self.temp_dir, {self.child.pid}))
            self.child.wait(timeout=10)
            left = [p for p in processes_started_under(self.temp_dir) if process_running(p)]
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            assert not left, f"processes of the test cluster still running: {left}"

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _disconnect() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


try:
    import pytest
except ImportError:  # the child process runs without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="module")
    def module_cluster():
        """A head node and two worker nodes for the test module; a node a test killed is replaced after it."""
        import ray

        assert not ray.is_initialized(), "a previous test left Ray connected"
        with LocalCluster(workers=2) as cluster:
            yield cluster
            _disconnect()

    @pytest.fixture
    def ray_cluster(module_cluster):
        """The module's cluster, whole again after the test (its lost nodes replaced), the driver
        disconnected."""
        yield module_cluster
        _disconnect()
        module_cluster.replace_lost_nodes()


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]))
