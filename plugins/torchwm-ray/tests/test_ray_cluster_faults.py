"""Faults that a Ray cluster has, on a real multi-node cluster (`cluster.LocalCluster`: a head and two worker
nodes on this machine, this test process its driver).

An actor's process killed or a node lost, with ``restart_on_crash`` (the envs come back truncated, with
``infos["worker_restarted"]``) and without (a `WorkerError` naming every lost actor, and nothing left running
after ``close()``); ``ray.shutdown()`` in the middle of a step; an actor no node can take; an actor whose envs
cannot be built on its node. Each error must come as torchwm's, before the env's timeout.
"""

# ruff: noqa: F811 - the fixtures imported from cluster.py are test arguments
import os
import signal
import sys
import textwrap
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import ray
from cluster import module_cluster, ray_cluster  # noqa: F401 - fixtures
from ray import cloudpickle
from support.processes import wait_until_ended
from torchwm_ray import driver

import torchwm
from torchwm.errors import AlreadyPendingCallError, EnvTimeoutError, WorkerError
from torchwm.testing import COUNTDOWN_ID, CountdownEnv

TIMEOUT = 90.0  # the env's timeout: generous for a loaded machine; every fault here is detected well before
ACTIONS = np.ones(4, dtype=np.int64)
SLOW_ID = "torchwm_ray_tests/SlowStep-v0"
SLOW_START_ID = "torchwm_ray_tests/SlowStart-v0"


class SlowStepEnv(CountdownEnv):
    """`CountdownEnv` whose steps take ``delay`` seconds (``set_attr("delay", ...)``)."""

    delay = 0.0

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)


class SlowStartEnv(CountdownEnv):
    """`CountdownEnv` that takes a minute to build."""

    def __init__(self, render_mode=None):
        time.sleep(60)
        super().__init__(render_mode)


if SLOW_ID not in gym.registry:
    gym.register(SLOW_ID, entry_point=SlowStepEnv)
    gym.register(SLOW_START_ID, entry_point=SlowStartEnv)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def make(cluster, env_id=COUNTDOWN_ID, **backend_kwargs):
    return torchwm.make_vec(
        env_id,
        4,
        backend="ray",
        seed=0,
        backend_kwargs={"address": cluster.address, "num_actors": 2, "timeout": TIMEOUT, **backend_kwargs},
    )


def actor_pids(envs):
    return [ray.get(actor.describe.remote(), timeout=60)["pid"] for actor in envs.actors]


def assert_restarted(result, restarted_envs):
    obs, rewards, terminations, truncations, infos = result
    flags = infos.get("worker_restarted", np.zeros(4, dtype=bool))
    assert flags.tolist() == [i in restarted_envs for i in range(4)]
    assert truncations[restarted_envs].all() and not terminations[restarted_envs].any()
    assert obs[restarted_envs, 3].tolist() == [0.0] * len(restarted_envs)  # a new episode: 0 steps done


# -- restart_on_crash ---------------------------------------------------------------------------------


def test_restart_on_crash_survives_actor_kills_one_after_another(ray_cluster):
    """The step right after a SIGKILL meets Ray still restarting the actor (ActorUnavailableError): torchwm
    waits through it, every time, and the envs come back truncated; when the restarts are used up the
    env says it lost the actor (not that a step is pending, not to pass an option it has)."""
    envs = make(ray_cluster, restart_on_crash=True, max_restarts=2)
    pids = []
    try:
        envs.reset(seed=1)
        envs.step(ACTIONS)
        for kill in ([0], [0, 1]):  # actor 0 restarts twice, actor 1 once
            pids += actor_pids(envs)
            for actor in kill:
                os.kill(envs.worker_pids[actor], signal.SIGKILL)
            restarted = [env for actor in kill for env in envs.actor_env_ids[actor]]
            assert_restarted(envs.step(ACTIONS), restarted)
            obs = envs.step(ACTIONS)[0]  # the step after a truncation is the reset step (next_step autoreset)
            assert obs[restarted, 3].tolist() == [0.0] * len(restarted)
            obs = envs.step(ACTIONS)[0]
            assert obs[restarted, 3].tolist() == [1.0] * len(restarted)
        pids += actor_pids(envs)
        os.kill(envs.worker_pids[0], signal.SIGKILL)  # once too often
        with pytest.raises(WorkerError, match=r"Ray actor 0 \(envs \[0, 1\]\) died") as caught:
            envs.step(ACTIONS)
        assert "max_restarts=2" in str(caught.value) and "pass restart_on_crash" not in str(caught.value)
        for later in (lambda: envs.step(ACTIONS), envs.reset):
            with pytest.raises(WorkerError, match="lost a worker earlier"):
                later()
    except AlreadyPendingCallError as stuck:
        pytest.fail(f"the env was left with a step pending: {stuck}")
    finally:
        envs.close()
    wait_until_ended(pids, 60)


def test_restart_on_crash_survives_the_loss_of_a_node(ray_cluster):
    """A worker node lost (a machine gone): Ray restarts its actors on the other one. (No CPU: an actor holds
    the one CPU of its node while it lives.)"""
    envs = make(
        ray_cluster, restart_on_crash=True, actor_options={"num_cpus": 0, "resources": {"worker": 0.5}}
    )
    try:
        envs.reset(seed=1)
        envs.step(ACTIONS)
        lost = ray_cluster.node(envs.actor_node_ids[1])
        on_lost = [a for a, node in enumerate(envs.actor_node_ids) if node == lost.node_id]
        ray_cluster.kill_node(lost)
        restarted = [env for actor in on_lost for env in envs.actor_env_ids[actor]]
        assert_restarted(envs.step(ACTIONS), restarted)
        assert lost.node_id not in {ray.get(a.describe.remote(), timeout=60)["node_id"] for a in envs.actors}
        envs.step(ACTIONS)
    finally:
        envs.close()


# -- without restarts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compiled_graph", [True, False], ids=["graph", "actor_calls"])
def test_a_lost_node_names_every_lost_actor_and_close_ends_them(ray_cluster, compiled_graph):
    """The raylet of the node both actors run on is killed, the machine running on: the error names both
    actors, comes from Ray's node health checks (not the env's timeout), and after close() none of the
    actors' processes runs, though Ray can no longer reach them (a compiled graph's loop would spin on)."""
    envs = make(
        ray_cluster,
        compiled_graph=compiled_graph,
        actor_options={"num_cpus": 0, "resources": {"node_1": 0.1}},
    )
    try:
        envs.reset(seed=1)
        envs.step(ACTIONS)
        assert envs.compiled_graph == compiled_graph
        pids = actor_pids(envs)
        ray_cluster.kill_node(ray_cluster.nodes[1], workers=False)
        deadline = time.monotonic() + TIMEOUT
        with pytest.raises(WorkerError) as caught:
            while time.monotonic() < deadline:  # Ray may answer a few steps before it counts the node lost
                envs.step(ACTIONS)
        message = str(caught.value)
        assert "Ray actor 0 (envs [0, 1])" in message and "Ray actor 1 (envs [2, 3])" in message, message
        assert "was lost" in message and "restart_on_crash=True" in message
        with pytest.raises(WorkerError, match="lost a worker earlier"):
            envs.reset()
    finally:
        envs.close()
    wait_until_ended(pids, 60)


# -- Ray going away -------------------------------------------------------------------------------------


@pytest.mark.parametrize("compiled_graph", [True, False], ids=["graph", "actor_calls"])
def test_ray_shutdown_during_a_step_is_a_worker_error(ray_cluster, compiled_graph):
    """Another thread calls ray.shutdown() while a step runs: WorkerError (the env cannot reach its actors
    any more, as when a worker dies; nothing the user did closed it), never SystemExit or AttributeError."""
    envs = make(ray_cluster, SLOW_ID, compiled_graph=compiled_graph)
    try:
        envs.reset(seed=1)
        envs.step(ACTIONS)
        pids = actor_pids(envs)
        envs.set_attr("delay", [1.5] * 4)
        timer = threading.Timer(0.5, ray.shutdown)
        timer.start()
        try:
            with pytest.raises(
                WorkerError, match=r"Ray was shut down \(ray.shutdown\(\)\) or this process lost"
            ):
                envs.step(ACTIONS)
        finally:
            timer.join()
        for later in (lambda: envs.step(ACTIONS), envs.reset, lambda: envs.get_attr("steps")):
            with pytest.raises(WorkerError, match="lost a worker earlier"):
                later()
    finally:
        envs.close()
    wait_until_ended(pids, 60)


# -- actors that never start ------------------------------------------------------------------------------


def test_an_actor_no_node_can_take_fails_at_once_naming_what_it_asked_for(ray_cluster):
    with pytest.raises(
        WorkerError,
        match=r"Ray cannot place it: it asks for \{'CPU': 1, 'gpu_x': 2\}.*"
        r"no alive node.*'node_1': 1",
    ):
        make(ray_cluster, actor_options={"resources": {"gpu_x": 2}})


def test_a_start_timeout_states_the_time_it_waited(ray_cluster, monkeypatch):
    """An actor's start gets at least driver.DEFAULT_TIMEOUT (scheduling, imports), more than timeout=2: the
    message says how long it waited, not 2 s."""
    monkeypatch.setattr(driver, "DEFAULT_TIMEOUT", 6.0)
    with pytest.raises(
        EnvTimeoutError, match=r"did not answer within [6-9] s \(timeout=2\) while starting its envs"
    ):
        make(ray_cluster, SLOW_START_ID, num_actors=1, timeout=2)


def test_an_env_module_a_node_lacks_is_named_in_the_error(ray_cluster, tmp_path, monkeypatch):
    """The env class comes from a module this driver imported and the nodes cannot (here: removed since): the
    error carries the actor's ImportError, not only that it died."""
    (tmp_path / "twm_driver_only_envs.py").write_text(
        textwrap.dedent("""
        from torchwm.testing import CountdownEnv

        class DriverOnlyEnv(CountdownEnv):
            pass
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import twm_driver_only_envs

    (tmp_path / "twm_driver_only_envs.py").unlink()
    env_id = "torchwm_ray_tests/DriverOnly-v0"
    gym.register(env_id, entry_point=twm_driver_only_envs.DriverOnlyEnv)
    try:
        with pytest.raises(
            WorkerError,
            match=r"Ray actor 0 \(envs \[0, 1\]\) raised ModuleNotFoundError\(\"No "
            r"module named 'twm_driver_only_envs'\"\) while starting its envs",
        ):
            make(ray_cluster, env_id)
    finally:
        gym.registry.pop(env_id, None)
        sys.modules.pop("twm_driver_only_envs", None)
