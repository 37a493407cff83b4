"""The ``ray`` backend keeps Gymnasium's contract as the process backends do.

Non-array observation spaces batched as Gymnasium batches them (a tuple of one value per env),
an env's exception catchable as its own type, Gymnasium's error types for misuse,
``np_random_seed`` as the tuple of the envs' seeds, and timeouts checked by the shared rule.

The envs are defined here and travel to the actors by value (Ray's cloudpickle), since the
actor processes cannot import this test module.
"""

import math
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from ray import cloudpickle
from torchwm_ray import connection

import torchwm
from torchwm.errors import AlreadyPendingCallError, NoAsyncCallError, WorkerError
from torchwm.testing import COUNTDOWN_ID

TEXT_ID = "torchwm_ray_tests/Text-v0"
SEEDLESS_ID = "torchwm_ray_tests/Seedless-v0"


class InjectedError(Exception):
    """An env's own exception type, unknown to torchwm and to the actor processes' imports."""


class TextEnv(gym.Env):
    """Text observations (a space without fixed shape), drawn from the env's seeded RNG; ``boom`` raises."""

    def __init__(self):
        self.observation_space = spaces.Dict({"text": spaces.Text(6), "box": spaces.Box(0, 1, (2,))})
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.boom = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return self.observation_space.sample(), {"t": self.t}

    def step(self, action):
        if self.boom:
            raise InjectedError("the env's own error")
        self.t += 1
        return self.observation_space.sample(), float(action), self.t >= 3, False, {"t": self.t}


class SeedlessEnv(TextEnv):
    """An env that cannot report a seed (``np_random_seed`` raises AttributeError, as a read-only one
    does)."""

    @property
    def np_random_seed(self):
        raise AttributeError("this env has no np_random_seed")


for env_id, cls in ((TEXT_ID, TextEnv), (SEEDLESS_ID, SeedlessEnv)):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=cls)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ACTOR_CALLS = {"num_actors": 2, "compiled_graph": False}


def assert_same_batch(expected, actual, where):
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert expected.keys() == actual.keys(), where
        for key in expected:
            assert_same_batch(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, np.ndarray):
        assert expected.dtype == actual.dtype and np.array_equal(expected, actual), where
    else:
        assert expected == actual, where


@pytest.mark.parametrize(
    "backend_kwargs",
    [{"num_actors": 2}, ACTOR_CALLS, {"num_actors": 2, "batch_size": 2}],
    ids=["graph", "actor_calls", "batch_size"],
)
def test_non_array_spaces_are_batched_as_gymnasium_does(local_ray, backend_kwargs):
    reference = gym.vector.SyncVectorEnv([TextEnv] * 4)
    with torchwm.make_vec(TEXT_ID, 4, backend="ray", backend_kwargs=backend_kwargs) as envs:
        expected, actual = reference.reset(seed=5)[0], envs.reset(seed=5)[0]
        assert isinstance(actual["text"], tuple)  # Gymnasium's batch of a Text space
        assert_same_batch(expected, actual, "reset")
        actions = np.array([1, 0, 1, 1])
        for t in range(5):  # past the end of the episodes: autoreset included
            want = reference.step(actions)
            if envs.batch_size == 4:
                got = envs.step(actions)
                assert_same_batch(want[0], got[0], f"step {t}")
                assert np.array_equal(want[1], got[1]) and np.array_equal(want[2], got[2])
                # A shared block cannot hold a Text space: by default the steps go through Ray's graph.
                assert envs.compiled_graph == ("compiled_graph" not in backend_kwargs)
                continue
            envs.send(actions)
            seen = []
            while len(seen) < 4:  # the first two ready, then the other two
                obs, rewards, _, _, infos = envs.recv()
                assert isinstance(obs["text"], tuple) and len(obs["text"]) == 2
                for row, i in enumerate(infos["env_id"].tolist()):
                    assert obs["text"][row] == want[0]["text"][i] and rewards[row] == want[1][i]
                    assert np.array_equal(obs["box"][row], want[0]["box"][i])
                seen += infos["env_id"].tolist()
            assert sorted(seen) == [0, 1, 2, 3]
    reference.close()


def test_an_env_error_is_its_own_type_too(local_ray):
    for backend_kwargs in ({"num_actors": 2}, ACTOR_CALLS):
        with torchwm.make_vec(TEXT_ID, 4, backend="ray", seed=0, backend_kwargs=backend_kwargs) as envs:
            envs.reset()
            envs.set_attr("boom", [False, False, True, False])
            with pytest.raises(InjectedError, match=r"env 2 on Ray actor 1 .* raised") as caught:
                envs.step(np.zeros(4, dtype=np.int64))
            assert isinstance(caught.value, WorkerError) and caught.value.env_index == 2
            # Outside a step too: call() of a method that raises.
            with pytest.raises(
                AttributeError, match=r"env 0 on Ray actor 0 .* while calling 'no_such_method'"
            ):
                envs.call("no_such_method")


def test_misuse_raises_gymnasiums_error_types(local_ray):
    with torchwm.make_vec(COUNTDOWN_ID, 4, backend="ray", seed=0, backend_kwargs={"num_actors": 2}) as envs:
        with pytest.raises(gym.error.NoAsyncCallError) as caught:
            envs.recv()
        assert isinstance(caught.value, NoAsyncCallError)
        envs.reset()
        envs.send(np.zeros(4, dtype=np.int64))
        # Each names the call still pending (a step), as Gymnasium's AlreadyPendingCallError does.
        for misuse in (
            lambda: envs.send(np.zeros(4, dtype=np.int64)),
            envs.reset,
            lambda: envs.get_attr("steps"),
        ):
            with pytest.raises(gym.error.AlreadyPendingCallError) as caught:
                misuse()
            assert isinstance(caught.value, AlreadyPendingCallError) and caught.value.name == "step"
        assert envs.recv()[0].shape == (4, 4)  # the refused calls changed nothing


def test_np_random_seed_is_the_tuple_of_the_envs_seeds(local_ray):
    with torchwm.make_vec(COUNTDOWN_ID, 4, backend="ray", backend_kwargs={"num_actors": 2}) as envs:
        envs.reset(seed=42)
        envs.reset()
        assert envs.np_random_seed == (42, 43, 44, 45)
    # Envs that cannot report theirs: the seeds the vector env gave them, as on the process backends.
    with torchwm.make_vec(SEEDLESS_ID, 4, backend="ray", backend_kwargs={"num_actors": 2}) as envs:
        envs.reset(seed=[7, None, 9, None])
        assert envs.np_random_seed == (7, -1, 9, -1)


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(math.nan, ValueError), (-1, ValueError), (0, ValueError), ("a", TypeError), (True, TypeError)],
)
def test_bad_timeouts_are_refused_by_the_shared_check_before_ray_is_touched(monkeypatch, timeout, error):
    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started or joined before the options were checked")

    monkeypatch.setattr(connection.LocalRay, "acquire", no_ray)
    with pytest.raises(error, match="timeout must be a number of seconds > 0, or None for no limit"):
        torchwm.make_vec(COUNTDOWN_ID, 2, backend="ray", backend_kwargs={"timeout": timeout})


def test_an_infinite_timeout_is_no_limit_and_recv_checks_its_own(local_ray):
    with torchwm.make_vec(
        COUNTDOWN_ID, 2, backend="ray", seed=0, backend_kwargs={"num_actors": 2, "timeout": math.inf}
    ) as envs:
        assert envs.timeout is None
        envs.reset()
        envs.send(np.zeros(2, dtype=np.int64))
        for bad, error in ((-1, ValueError), (math.nan, ValueError), ("a", TypeError)):
            with pytest.raises(error, match=r"recv\(timeout=\) must be a number of seconds > 0"):
                envs.recv(timeout=bad)
        assert envs.recv(timeout=math.inf)[0].shape == (2, 4)


def test_a_space_the_shared_block_cannot_hold_leaves_one_placement_group(local_ray):
    # One node: the first try is the shared block, which a Text space makes fail once the actors have
    # built their envs; the env then starts again over Ray's channels. The first try's placement group
    # goes with it, so that the second one can reserve the same CPUs.
    import ray.util

    def created():
        return [g for g in ray.util.placement_group_table().values() if g["state"] == "CREATED"]

    before = len(created())
    options = {"num_actors": 2, "placement": "PACK"}
    with torchwm.make_vec(TEXT_ID, 4, backend="ray", seed=0, backend_kwargs=options) as envs:
        assert envs.compiled_graph is False and "steps='compiled graph'" in repr(envs)
        assert len(created()) == before + 1
        assert envs.placement_group is not None
        assert isinstance(envs.reset()[0]["text"], tuple)
    assert len(created()) == before
