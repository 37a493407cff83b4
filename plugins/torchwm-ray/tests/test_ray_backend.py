"""The ``ray`` backend beyond the conformance kit: Atari trajectories, actor layout, failures, restarts.

The tests of Ray's own channels (its compiled graph, actor calls, restarts Ray makes) pass
``shared_memory=False``: on the one-node Ray of these tests the backend would otherwise step through
a shared block (tests/test_ray_same_node.py).
"""

import time
from pathlib import Path

import numpy as np
import pytest
import ray
from support.processes import wait_until_ended
from torchwm_ray import actor, connection

import torchwm
import torchwm.testing
from torchwm.errors import WorkerError
from torchwm.plugins import registry
from torchwm.vector.transports.contract import split_envs


def test_backend_comes_from_the_plugin_entry_point():
    entry = registry("backend").get("ray")
    assert (entry.plugin, entry.distribution) == ("ray", "torchwm-ray")


def assert_steps_through_the_shared_block(envs) -> None:
    """The envs' actors are Ray's actor processes on this node, each mapping torchwm's shared block."""
    assert "steps='shared memory (every actor on this node)'" in repr(envs)
    assert envs.actor_node_ids == [ray.get_runtime_context().get_node_id()] * envs.num_workers
    for pid in envs.worker_pids:
        assert "SharedMemoryActor" in Path(f"/proc/{pid}/cmdline").read_text()  # Ray titles it so
        assert "/memfd:torchwm_" in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.parametrize("shared_memory", [None, False], ids=["shared_block", "compiled_graph"])
def test_pong_standard_stack_matches_sync(local_ray, shared_memory):
    """2 actors x 4 envs of Pong under the default stack give sync's arrays and infos for the same seed, on
    a one-node Ray's shared block (the default) and through Ray's compiled graph."""
    kwargs = {"num_actors": 2, "envs_per_actor": 4, "shared_memory": shared_memory}
    rng = np.random.default_rng(0)
    with (
        torchwm.make_vec("ALE/Pong-v5", 8, backend="ray", seed=3, backend_kwargs=kwargs) as envs,
        torchwm.make_vec("ALE/Pong-v5", 8, backend="sync", seed=3) as ref,
    ):
        if shared_memory is None:
            assert_steps_through_the_shared_block(envs)
        assert envs.actor_env_ids == [[0, 1, 2, 3], [4, 5, 6, 7]]
        got, want = envs.reset(), ref.reset()
        assert np.array_equal(got[0], want[0])
        for _ in range(20):
            actions = rng.integers(0, envs.single_action_space.n, size=8)
            got, want = envs.step(actions), ref.step(actions)
            for a, b in zip(got[:4], want[:4]):
                assert np.array_equal(a, b)
            assert got[4].keys() == want[4].keys()
            for key in want[4]:
                assert np.array_equal(got[4][key], want[4][key]), key
        # Rows of some envs only, across both actors (through the graph, their observations travel in chunks).
        got, want = envs.step([1, 2, 3], env_ids=[1, 4, 6]), ref.step([1, 2, 3], env_ids=[1, 4, 6])
        for a, b in zip(got[:4], want[:4]):
            assert np.array_equal(a, b)
        assert envs.reset(env_ids=[0, 5], seed=9)[0].tolist() == ref.reset(env_ids=[0, 5], seed=9)[0].tolist()
        # Steps of all envs went through the compiled graph where it is used; partial steps and resets
        # beside it did not disturb it, and it goes on after them.
        assert envs.compiled_graph == (shared_memory is False)
        actions = rng.integers(0, envs.single_action_space.n, size=8)
        for a, b in zip(envs.step(actions)[:4], ref.step(actions)[:4]):
            assert np.array_equal(a, b)


@pytest.mark.parametrize(
    ("num_envs", "num_actors", "envs_per_actor", "expected"),
    [
        (5, 2, None, [[0, 1, 2], [3, 4]]),
        (5, None, 2, [[0, 1], [2, 3], [4]]),
        (4, 4, 1, [[0], [1], [2], [3]]),
    ],
)
def test_envs_are_split_over_actors_in_order(num_envs, num_actors, envs_per_actor, expected):
    assert [list(r) for r in split_envs(num_envs, num_actors, envs_per_actor)] == expected


@pytest.mark.parametrize(
    ("backend_kwargs", "error", "words"),
    [
        (
            {"num_actors": 3, "envs_per_actor": 3},
            ValueError,
            "num_actors=3 and envs_per_actor=3 do not fit num_envs=4",
        ),
        ({"envs_per_actor": 0}, ValueError, "envs_per_actor must be an int >= 1"),
        ({"batch_size": 9}, ValueError, "batch_size must be an int from 1 to num_envs=4"),
        ({"address": 6379}, TypeError, "address must be a str"),
        ({"max_restarts": -1}, ValueError, "max_restarts must be an int >= 0"),
        ({"actors": 2}, TypeError, "actors"),
        ({"shared_memory": "yes"}, TypeError, "shared_memory must be None (where it can), True or False"),
    ],
)
def test_bad_options_fail_before_ray_is_touched(monkeypatch, backend_kwargs, error, words):
    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started or joined before the options were checked")

    monkeypatch.setattr(connection.LocalRay, "acquire", no_ray)
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        torchwm.make_vec("CartPole-v1", 4, backend="ray", backend_kwargs=backend_kwargs)


def test_an_env_that_raises_is_named(local_ray):
    with torchwm.make_vec(
        torchwm.testing.COUNTDOWN_ID, 4, backend="ray", seed=0, backend_kwargs={"num_actors": 2}
    ) as envs:
        envs.reset()
        # The countdown env compares its step count with `length`: a string makes env 1 raise.
        envs.set_attr("length", [5, "not a number", 5, 5])
        with pytest.raises(WorkerError, match="env 1 on Ray actor 0 .* raised") as caught:
            envs.step(np.zeros(4, dtype=np.int64))
        assert caught.value.env_index == 1 and caught.value.worker_index == 0
        assert "TypeError" in caught.value.remote_traceback


def test_a_dead_actor_raises_worker_error_naming_its_envs(local_ray):
    with torchwm.make_vec(
        torchwm.testing.COUNTDOWN_ID, 4, backend="ray", seed=0, backend_kwargs={"num_actors": 2}
    ) as envs:
        envs.reset()
        pid = envs.worker_pids[1]
        ray.kill(envs.actors[1], no_restart=True)
        wait_until_ended([pid], 30)  # ray.kill returns before it has ended
        with pytest.raises(WorkerError, match=r"Ray actor 1 \(envs \[2, 3\]\) died") as caught:
            envs.step(np.zeros(4, dtype=np.int64))
        assert caught.value.worker_index == 1
        assert "restart_on_crash" in str(caught.value)


def test_an_actor_that_dies_under_the_compiled_graph_is_named(local_ray):
    with torchwm.make_vec(
        torchwm.testing.COUNTDOWN_ID,
        4,
        backend="ray",
        seed=0,
        backend_kwargs={"num_actors": 2, "shared_memory": False},
    ) as envs:
        envs.reset()
        envs.step(np.zeros(4, dtype=np.int64))
        assert envs.compiled_graph
        pid = ray.get(envs.actors[0].describe.remote())["pid"]
        ray.kill(envs.actors[0], no_restart=True)
        wait_until_ended([pid], 30)
        with pytest.raises(WorkerError, match=r"Ray actor 0 \(envs \[0, 1\]\) died") as caught:
            envs.step(np.zeros(4, dtype=np.int64))
        assert caught.value.worker_index == 0
        assert not envs.compiled_graph, "a graph with a dead actor should be torn down"


@pytest.mark.parametrize(
    "backend_kwargs", [{"compiled_graph": False}, {"batch_size": 2}, {"restart_on_crash": True}]
)
def test_without_a_compiled_graph_steps_are_ordinary_actor_calls(local_ray, backend_kwargs):
    """Turned off, with async batches (results come as they are ready) or restarts (a graph dies with its
    actor)."""
    with (
        torchwm.make_vec(
            torchwm.testing.COUNTDOWN_ID,
            4,
            backend="ray",
            seed=0,
            backend_kwargs={"num_actors": 2, "shared_memory": False, **backend_kwargs},
        ) as envs,
        torchwm.make_vec(torchwm.testing.COUNTDOWN_ID, 4, backend="sync", seed=0) as ref,
    ):
        assert np.array_equal(envs.reset()[0], ref.reset()[0])
        for _ in range(3):
            actions = np.ones(4, dtype=np.int64)
            want = ref.step(actions)[0]
            envs.send(actions)
            got, received = np.zeros_like(want), 0
            while received < 4:  # with batch_size=2, in two batches
                obs, *_, infos = envs.recv()
                ids = infos.get("env_id", np.arange(4))
                got[ids] = obs
                received += len(ids)
            assert np.array_equal(got, want)
        assert not envs.compiled_graph


def test_a_crash_between_steps_is_noticed_at_the_next_step(local_ray):
    with torchwm.make_vec(
        torchwm.testing.COUNTDOWN_ID,
        4,
        backend="ray",
        seed=0,
        backend_kwargs={"num_actors": 2, "restart_on_crash": True, "shared_memory": False},
    ) as envs:
        envs.reset()
        pid = ray.get(envs.actors[0].describe.remote())["pid"]
        ray.kill(envs.actors[0], no_restart=False)
        wait_until_ended([pid], 30)
        deadline = time.monotonic() + 60
        while True:  # until Ray has restarted it, with new envs
            try:
                ray.get(envs.actors[0].describe.remote(), timeout=10)
                break
            except ray.exceptions.RayActorError:
                assert time.monotonic() < deadline, "Ray did not restart the actor within 60 s"
                time.sleep(0.1)
        *_, truncations, infos = envs.step(np.ones(4, dtype=np.int64))
        assert infos["worker_restarted"].tolist() == [True, True, False, False]
        assert truncations.tolist() == [True, True, False, False]


def test_restart_on_crash_truncates_the_interrupted_episodes(local_ray):
    with torchwm.make_vec(
        torchwm.testing.COUNTDOWN_ID,
        4,
        backend="ray",
        seed=0,
        backend_kwargs={"num_actors": 2, "restart_on_crash": True, "shared_memory": False},
    ) as envs:
        envs.reset()
        envs.step(np.ones(4, dtype=np.int64))
        pid = ray.get(envs.actors[1].describe.remote())["pid"]
        ray.kill(envs.actors[1], no_restart=False)
        wait_until_ended([pid], 30)
        obs, rewards, terminations, truncations, infos = envs.step(np.ones(4, dtype=np.int64))
        restarted = infos.get("worker_restarted", np.zeros(4, dtype=bool))
        assert restarted.tolist() == [False, False, True, True]
        assert truncations[2:].all() and not terminations[2:].any() and rewards[2:].tolist() == [0.0, 0.0]
        # Envs 2 and 3 show the first observation of a new episode: last action -1, 0 steps done.
        assert obs[2:, 2:].tolist() == [[-1.0, 0.0], [-1.0, 0.0]]
        # Envs 0 and 1 went on: this was their second step.
        assert obs[:2, 3].tolist() == [2.0, 2.0]
        # next_step autoreset, as on the process backends: the step after a truncation is those envs' reset
        # step.
        obs, rewards, *_ = envs.step(np.ones(4, dtype=np.int64))
        assert obs[2:, 3].tolist() == [0.0, 0.0] and rewards[2:].tolist() == [0.0, 0.0]
        obs, *_ = envs.step(np.ones(4, dtype=np.int64))
        assert obs[2:, 3].tolist() == [1.0, 1.0]


def test_large_observations_travel_in_chunks_under_rays_inline_limit():
    from gymnasium import spaces

    frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)  # 28,224 bytes an env
    assert actor.obs_chunks(frames, 3) == 0  # 84,672 bytes: inline as they are
    chunks = actor.obs_chunks(frames, 4)  # 112,896 bytes
    assert chunks == 2 and 112_896 / chunks <= actor.INLINE_BYTES
    assert actor.obs_chunks(spaces.Dict({"a": frames}), 64) == 0  # only plain arrays are split


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_evaluate_runs_each_envs_quota_as_on_sync(local_ray, mode):
    """`torchwm.evaluate` over Ray's actors: the same episodes as over sync (CountdownEnv's lengths come
    from each env's seed), each env's share fixed in advance as SB3's evaluate_policy fixes it."""

    def policy(obs):
        return obs[:, 3].astype(np.int64) % 3  # the step count: a policy that depends on the obs

    results = {}
    for backend in ("ray", "sync"):
        with torchwm.make_vec(torchwm.testing.COUNTDOWN_ID, 4, backend=backend, autoreset_mode=mode) as envs:
            results[backend] = torchwm.evaluate(envs, policy, n_episodes=10, seed=5)
    ray_result, sync_result = results["ray"], results["sync"]
    assert np.bincount(ray_result.env_ids, minlength=4).tolist() == [2, 2, 3, 3]
    np.testing.assert_array_equal(ray_result.env_ids, sync_result.env_ids)
    np.testing.assert_array_equal(ray_result.returns, sync_result.returns)
    np.testing.assert_array_equal(ray_result.lengths, sync_result.lengths)
