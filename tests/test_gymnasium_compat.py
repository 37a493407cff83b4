"""What a Gymnasium user meets: torchwm gives Gymnasium's arrays, values and exception types.

Non-array spaces batched as Gymnasium's SyncVectorEnv batches them, ``np_random_seed``,
the exception types of Gymnasium's vector envs (reset_mask, step_async/step_wait misuse,
timeouts, an env's own exception from a worker), and ``gymnasium.make_vec``'s arguments.
Process backends use the fork start method here: the test envs live in this module.
"""

from __future__ import annotations

import functools
import multiprocessing
import pickle
import re
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import concatenate, create_empty_array

import torchwm
from torchwm.errors import EnvTimeoutError, UnsupportedStackError, WorkerError

PROCESS_OPTIONS = {"num_workers": 2, "context": "fork", "timeout": 60}


def options_for(backend, **extra):
    return extra or None if backend == "sync" else {**PROCESS_OPTIONS, **extra}


# -- envs with spaces of every kind ---------------------------------------------------------------


class CustomSpace(gym.Space):
    """A space Gymnasium knows nothing about: batched as a tuple of values."""

    def __init__(self):
        super().__init__(None, None)

    def sample(self, mask=None, probability=None):
        return int(self.np_random.integers(0, 100))

    def contains(self, x):
        return isinstance(x, int)

    def __eq__(self, other):
        return isinstance(other, CustomSpace)


SPACES = {
    "text": lambda: spaces.Text(6),
    "graph": lambda: spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)),
    "sequence": lambda: spaces.Sequence(spaces.Discrete(4)),
    "oneof": lambda: spaces.OneOf([spaces.Discrete(3), spaces.Box(0, 1, (2,))]),
    "custom": CustomSpace,
    "dict_of_text": lambda: spaces.Dict({"text": spaces.Text(5), "box": spaces.Box(0, 1, (2,))}),
    "tuple_of_sequence": lambda: spaces.Tuple((spaces.Discrete(2), spaces.Sequence(spaces.Discrete(3)))),
}


class SpaceEnv(gym.Env):
    """Observations sampled from a space of kind ``kind``, drawn from the env's own seeded RNG."""

    def __init__(self, kind):
        self.observation_space = SPACES[kind]()
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return self.observation_space.sample(), {"t": self.t}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), float(action), self.t >= 3, False, {"t": self.t}


def assert_same(expected, actual, where=""):
    """Equal batches of any space: the same containers (tuple, dict, GraphInstance) and values."""
    assert type(actual) is type(expected), f"{where}: {type(actual)} != {type(expected)}"
    if isinstance(expected, dict):
        assert expected.keys() == actual.keys(), where
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, tuple):  # GraphInstance is a tuple too
        assert len(expected) == len(actual), where
        for k, (e, a) in enumerate(zip(expected, actual)):
            assert_same(e, a, f"{where}[{k}]")
    elif isinstance(expected, np.ndarray):
        assert expected.dtype == actual.dtype and np.array_equal(expected, actual), where
    else:
        assert expected == actual, where


def gym_rows(space, values):
    """Gymnasium's batch of ``values`` (one per env), as its vector envs build it."""
    return concatenate(space, values, create_empty_array(space, n=len(values)))


@pytest.mark.parametrize("backend", ["sync", "subproc"])
@pytest.mark.parametrize("kind", sorted(SPACES))
def test_non_array_spaces_are_batched_as_gymnasium_does(backend, kind):
    n = 3
    fns = [functools.partial(SpaceEnv, kind)] * n
    reference = gym.vector.SyncVectorEnv(fns)
    envs = torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options_for(backend))
    try:
        assert_same(reference.reset(seed=5)[0], envs.reset(seed=5)[0], "reset")
        actions = np.array([1, 0, 1])
        for t in range(5):  # past the end of the episodes: autoreset included
            expected, actual = reference.step(actions), envs.step(actions)
            assert_same(expected[0], actual[0], f"step {t}")
            for e, a in zip(expected[1:4], actual[1:4]):
                assert np.array_equal(e, a)
    finally:
        reference.close()
        envs.close()


@pytest.mark.parametrize("backend", ["sync", "subproc"])
@pytest.mark.parametrize("kind", ["text", "custom", "dict_of_text"])
def test_non_array_spaces_in_partial_and_batch_size_results(backend, kind):
    n = 4
    fns = [functools.partial(SpaceEnv, kind)] * n
    singles = [fn() for fn in fns]  # the reference: each env on its own, Gymnasium batching its rows
    space = singles[0].observation_space
    envs = torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options_for(backend, batch_size=2))
    try:
        for i, env in enumerate(singles):
            env.reset(seed=10 + i)
        envs.reset(seed=10)
        obs, _ = envs.reset(seed=[20, 22], env_ids=[2, 0])
        assert_same(
            gym_rows(space, [singles[2].reset(seed=20)[0], singles[0].reset(seed=22)[0]]), obs, "reset rows"
        )
        obs, _, _, _, infos = envs.step(np.array([1, 0]), env_ids=[3, 1])
        expected = gym_rows(space, [singles[3].step(1)[0], singles[1].step(0)[0]])
        assert infos["env_id"].tolist() == [3, 1]  # the order of env_ids
        assert_same(expected, obs, "step rows")
        envs.send(np.array([1, 1, 1, 1]))
        obs, _, _, _, infos = envs.recv()  # batch_size=2: the first two ready
        ready = infos["env_id"].tolist()
        assert len(ready) == 2
        stepped = {i: singles[i].step(1)[0] for i in range(n)}
        assert_same(gym_rows(space, [stepped[i] for i in ready]), obs, "batch_size rows")
        obs, _, _, _, infos = envs.recv()  # the other two
        assert_same(gym_rows(space, [stepped[i] for i in infos["env_id"].tolist()]), obs, "the rest")
    finally:
        envs.close()


def test_sync_copy_false_gives_gymnasiums_tuple_for_a_non_array_space():
    fns = [functools.partial(SpaceEnv, "text")] * 2
    envs = torchwm.make_vec_from_fns(fns, backend="sync", backend_kwargs={"copy": False})
    reference = gym.vector.SyncVectorEnv(fns, copy=False)
    try:
        assert_same(reference.reset(seed=1)[0], envs.reset(seed=1)[0])
    finally:
        envs.close()
        reference.close()


def test_shmem_refuses_a_non_array_space_and_names_subproc():
    fns = [functools.partial(SpaceEnv, "text")] * 2
    with pytest.raises(UnsupportedStackError, match="backend='subproc'"):
        torchwm.make_vec_from_fns(fns, backend="shmem", backend_kwargs=PROCESS_OPTIONS)


# -- np_random_seed --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_np_random_seed_is_the_tuple_of_the_envs_seeds(backend):
    reference = gym.make_vec("CartPole-v1", 4, vectorization_mode="sync")
    envs = torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs=options_for(backend))
    try:
        reference.reset(seed=42)
        envs.reset(seed=42)
        assert envs.np_random_seed == reference.np_random_seed == (42, 43, 44, 45)
        reference.reset()
        envs.reset()  # no seed: each env keeps its generator, and so its seed
        assert envs.np_random_seed == reference.np_random_seed
        envs.reset(seed=[7, None, 9, None])
        assert envs.np_random_seed == (7, 43, 9, 45)
    finally:
        reference.close()
        envs.close()


def test_np_random_seed_of_the_fused_atari_env():
    envs = torchwm.make_vec("ALE/Pong-v5", 2, backend="sync")
    try:
        envs.reset(seed=42)
        assert envs.np_random_seed == (42, 43)
    finally:
        envs.close()


# -- exception types ------------------------------------------------------------------------------


def gym_error(call):
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - the type is the answer
        return type(exc)
    return None


@pytest.mark.parametrize(
    "mask",
    [
        [True, False, True],  # a list, not an array
        np.array([1, 0, 1]),  # ints
        np.array([True, False]),  # the wrong shape
        np.zeros(3, dtype=bool),  # no env
        np.array([1.0, 0.0, 1.0]),
    ],
    ids=["list", "int_dtype", "shape", "none_selected", "float_dtype"],
)
@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_reset_mask_mistakes_raise_gymnasiums_exception_types(backend, mask):
    reference = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 3, autoreset_mode="Disabled")
    reference.reset(seed=0)
    expected = gym_error(lambda: reference.reset(options={"reset_mask": mask}))
    reference.close()
    assert expected is not None
    envs = torchwm.make_vec(
        "CartPole-v1", 3, backend=backend, autoreset_mode="disabled", backend_kwargs=options_for(backend)
    )
    try:
        envs.reset(seed=0)
        with pytest.raises(expected, match="reset_mask"):
            envs.reset(options={"reset_mask": mask})
    finally:
        envs.close()


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_async_misuse_raises_gymnasiums_exception_types(backend):
    envs = torchwm.make_vec("CartPole-v1", 2, backend=backend, backend_kwargs=options_for(backend))
    try:
        envs.reset(seed=0)
        with pytest.raises(gym.error.NoAsyncCallError, match="no action in flight"):
            envs.recv()
        with pytest.raises(gym.error.NoAsyncCallError):
            envs.step_wait()
        envs.step_async(np.array([0, 1]))
        with pytest.raises(gym.error.AlreadyPendingCallError, match="already have an action in flight"):
            envs.send(np.array([0, 1]))
        with pytest.raises(gym.error.AlreadyPendingCallError, match="recv"):
            envs.reset()
        with pytest.raises(gym.error.AlreadyPendingCallError, match="recv"):
            envs.get_attr("spec")
        obs = envs.step_wait()[0]
    finally:
        envs.close()
    # step_async/step_wait are send/recv: the same arrays as step
    reference = torchwm.make_vec("CartPole-v1", 2, backend="sync")
    reference.reset(seed=0)
    assert np.array_equal(obs, reference.step(np.array([0, 1]))[0])
    reference.close()


class SlowEnv(gym.Env):
    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        time.sleep(3 * int(action))
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_a_timeout_is_a_multiprocessing_timeout_error(backend):
    envs = torchwm.make_vec_from_fns(
        [SlowEnv] * 2, backend=backend, backend_kwargs={**PROCESS_OPTIONS, "inline": False}
    )
    try:
        envs.reset(seed=0)
        envs.timeout = 0.5  # after start-up and reset, which may take longer than that on a loaded machine
        envs.send(np.array([1, 1]))
        with pytest.raises(multiprocessing.TimeoutError) as caught:
            envs.recv()
        assert isinstance(caught.value, EnvTimeoutError) and isinstance(caught.value, TimeoutError)
    finally:
        envs.close()


class EnvSpecificError(Exception):
    """An exception type of the env's own, picklable by reference."""


class NeedsTwoArguments(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code


class RaisingEnv(gym.Env):
    """Action 1 raises ValueError, 2 an exception of the env's own type, 3 KeyError, 4 one that wants
    arguments."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if action == 1:
            raise ValueError("bad action value")
        if action == 2:
            raise EnvSpecificError("the env's own error")
        if action == 3:
            raise KeyError("missing")
        if action == 4:
            raise NeedsTwoArguments(7, "detail")
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("inline", [False, True], ids=["workers", "inline"])
@pytest.mark.parametrize("backend", ["subproc", "shmem"])
@pytest.mark.parametrize(("action", "original"), [(1, ValueError), (2, EnvSpecificError), (3, KeyError)])
def test_an_env_exception_is_caught_as_its_own_type_and_as_worker_error(backend, inline, action, original):
    envs = torchwm.make_vec_from_fns(
        [RaisingEnv] * 4, backend=backend, backend_kwargs={**PROCESS_OPTIONS, "inline": inline}
    )
    try:
        envs.reset(seed=0)
        bad = 1 if inline else 2  # under inline, env 1 is in the parent's share
        actions = np.zeros(4, dtype=np.int64)
        actions[bad] = action
        with pytest.raises(original) as caught:
            envs.step(actions)
        error = caught.value
        assert isinstance(error, WorkerError)
        assert error.env_index == bad and f"env {bad}" in str(error)
        assert original.__name__ in error.remote_traceback
        again = pickle.loads(pickle.dumps(error))
        assert isinstance(again, original) and isinstance(again, WorkerError)
        assert again.env_index == bad and str(again) == str(error)
        envs.reset(seed=0)  # still usable
        envs.step(np.zeros(4, dtype=np.int64))
    finally:
        envs.close()


def test_an_exception_type_with_its_own_init_gives_plain_worker_error():
    envs = torchwm.make_vec_from_fns([RaisingEnv] * 2, backend="subproc", backend_kwargs=PROCESS_OPTIONS)
    try:
        envs.reset(seed=0)
        with pytest.raises(WorkerError, match="NeedsTwoArguments") as caught:
            envs.step(np.array([0, 4]))
        # Its __init__ sets what its users read (``code``), which a WorkerError built from a message lacks.
        assert not isinstance(caught.value, NeedsTwoArguments)
        assert caught.value.env_index == 1
    finally:
        envs.close()


# -- gymnasium.make_vec's arguments ---------------------------------------------------------------


def first_obs(envs, seed=3):
    try:
        return envs.reset(seed=seed)[0]
    finally:
        envs.close()


def test_make_vec_takes_an_env_spec():
    assert np.array_equal(
        first_obs(torchwm.make_vec(gym.spec("CartPole-v1"), 2)), first_obs(torchwm.make_vec("CartPole-v1", 2))
    )
    # Its kwargs and max_episode_steps where they differ from the registration
    spec = gym.make("CartPole-v1", max_episode_steps=3).spec
    with torchwm.make_vec(spec, 2) as envs:
        envs.reset(seed=0)
        truncations = [envs.step(np.array([0, 0]))[3] for _ in range(3)]
        assert truncations[-1].all() and not truncations[0].any()
    # An ALE spec holds frameskip=4 from the registration: the default stack still gets frameskip=1
    assert (
        torchwm.make_vec(gym.spec("ALE/Pong-v5"), 2, backend="sync").spec
        == torchwm.make_vec("ALE/Pong-v5", 2, backend="sync").spec
    )
    # The spec of a Gymnasium vector env holds make_vec's own arguments
    gym_vec = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
    with torchwm.make_vec(gym_vec.spec) as envs:
        assert envs.num_envs == 3 and envs.spec.backend == "sync"
    gym_vec.close()


@pytest.mark.parametrize(
    ("mode", "vector_kwargs", "backend", "backend_kwargs"),
    [
        ("sync", None, "sync", {}),
        ("async", None, "shmem", {}),
        ("async", {"shared_memory": False}, "subproc", {}),
        (
            "async",
            {"copy": False, "context": "fork", "max_concurrency": 1},
            "shmem",
            {"copy": False, "context": "fork", "num_workers": 1},
        ),
        (gym.VectorizeMode.SYNC, {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}, "sync", {}),
    ],
)
def test_make_vec_takes_gymnasiums_vectorization_arguments(mode, vector_kwargs, backend, backend_kwargs):
    with torchwm.make_vec("CartPole-v1", 2, vectorization_mode=mode, vector_kwargs=vector_kwargs) as envs:
        assert envs.spec.backend == backend
        for key, value in backend_kwargs.items():
            assert envs.spec.backend_kwargs[key] == value
        if vector_kwargs and "autoreset_mode" in vector_kwargs:
            assert envs.autoreset_mode is gym.vector.AutoresetMode.SAME_STEP
        assert np.array_equal(envs.reset(seed=3)[0], first_obs(torchwm.make_vec("CartPole-v1", 2)))


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"vectorization_mode": "vector_entry_point"}, ValueError, "backend='ale-native'"),
        ({"vectorization_mode": "threads"}, ValueError, "backend="),
        ({"vectorization_mode": "async", "vector_kwargs": {"daemon": False}}, TypeError, "backend_kwargs="),
        ({"vector_kwargs": {"copy": False}}, ValueError, "backend_kwargs="),
        ({"vectorization_mode": "sync", "backend": "shmem"}, ValueError, "give one of them"),
    ],
)
def test_gymnasium_arguments_without_an_equivalent_fail_in_one_line(kwargs, error, names):
    with pytest.raises(error, match=names) as caught:
        torchwm.make_vec("CartPole-v1", 2, **kwargs)
    assert "\n" not in str(caught.value)


# -- what the ported Gymnasium suite found (tests/gymnasium_suite) --------------------------------

BACKENDS = ["sync", "subproc", "shmem"]


class ActionRecorder(gym.Env):
    """Returns the action it was given as its observation: what reached the env, value and type."""

    observation_space = spaces.Box(-100, 100, (1,), np.float64)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        time.sleep(getattr(self, "reset_seconds", 0.0))
        return np.zeros(1), {}

    def step(self, action):
        return np.array([float(action)]), 0.0, False, False, {}


class SlowResetRecorder(ActionRecorder):
    reset_seconds = 2.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_batched_action_space_keeps_env_0s_generator_as_in_gymnasium(backend):
    # Gymnasium's batch_space copies env 0's action-space generator: identically seeded envs give vector
    # envs that sample the same actions. A batched space seeded at random sampled differently each time.
    def seeded():
        env = gym.make("CartPole-v1")
        env.action_space.seed(123)
        return env

    reference = gym.vector.SyncVectorEnv([seeded] * 3)
    expected = [reference.action_space.sample() for _ in range(20)]
    reference.close()
    for _ in range(2):
        with torchwm.make_vec_from_fns(
            [seeded] * 3, backend=backend, backend_kwargs=options_for(backend)
        ) as envs:
            assert [envs.action_space.sample().tolist() for _ in range(20)] == [a.tolist() for a in expected]
    # A seed given to make_vec still seeds it (and so decides the samples).
    samples = []
    for _ in range(2):
        with torchwm.make_vec(
            "CartPole-v1", 3, backend=backend, seed=5, backend_kwargs=options_for(backend)
        ) as envs:
            samples.append([envs.action_space.sample().tolist() for _ in range(5)])
    assert samples[0] == samples[1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_discrete_action_values_reach_the_env_as_in_gymnasium(backend):
    # Gymnasium checks no action values: an env may take values outside its space (the suite's
    # test_final_obs_info steps Discrete(4) envs with 4). Count, shape and dtype are still checked.
    with torchwm.make_vec_from_fns(
        [ActionRecorder] * 2, backend=backend, backend_kwargs=options_for(backend)
    ) as envs:
        envs.reset(seed=0)
        obs = envs.step(np.array([7, -1]))[0]
        assert obs[:, 0].tolist() == [7.0, -1.0]
        with pytest.raises(ValueError, match="dtype bool"):
            envs.step(np.array([True, False]))


def test_action_values_are_checked_where_an_engine_would_crash():
    from torchwm.vector.batching import check_actions

    assert not torchwm.vector.stepper.Stepper.check_action_values
    with pytest.raises(ValueError, match="out of range"):
        check_actions(spaces.Discrete(4), np.array([1, 4]), 2)  # the default, which ale-native uses
    assert check_actions(spaces.Discrete(4), np.array([1, 4]), 2, check_range=False).tolist() == [1, 4]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_scalar_action_batch_is_a_type_error_and_a_value_error(backend):
    with torchwm.make_vec("CartPole-v1", 2, backend=backend, backend_kwargs=options_for(backend)) as envs:
        envs.reset(seed=0)
        with pytest.raises(TypeError, match=r"expected actions of shape \(2,\).*got shape \(\)") as caught:
            envs.step(0)
        assert isinstance(caught.value, ValueError)
        assert envs.step(np.array([0, 1]))[0].shape == (2, 4)  # refused before anything changed


def test_shmem_refuses_graph_and_sequence_with_gymnasiums_type_error():
    # Gymnasium's AsyncVectorEnv(shared_memory=True) raises TypeError with this phrase for both; its own
    # tests catch it. Text is refused by shmem but held by Gymnasium's shared memory: not that error.
    phrase = "has a dynamic shape so its not possible to make a static shared memory"
    for kind in ["graph", "sequence", "tuple_of_sequence"]:
        with pytest.raises(TypeError, match=phrase) as caught:
            torchwm.make_vec_from_fns(
                [functools.partial(SpaceEnv, kind)] * 2, backend="shmem", backend_kwargs=PROCESS_OPTIONS
            )
        assert isinstance(caught.value, UnsupportedStackError) and "backend='subproc'" in str(caught.value)
    with pytest.raises(UnsupportedStackError) as caught:
        torchwm.make_vec_from_fns(
            [functools.partial(SpaceEnv, "text")] * 2, backend="shmem", backend_kwargs=PROCESS_OPTIONS
        )
    assert not isinstance(caught.value, TypeError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_messages_start_with_gymnasiums_sentence(backend):
    with torchwm.make_vec(
        "CartPole-v1", 3, backend=backend, autoreset_mode="disabled", backend_kwargs=options_for(backend)
    ) as envs:
        envs.reset(seed=0)
        with pytest.raises(
            ValueError, match=re.escape("`options['reset_mask']` must have shape `(3,)`, got (1,)")
        ):
            envs.reset(options={"reset_mask": np.array([True])})
        with pytest.raises(
            TypeError, match=re.escape("`options['reset_mask']` must have `dtype=np.bool_`, got int64")
        ):
            envs.reset(options={"reset_mask": np.array([1, 1, 0])})
        with pytest.raises(
            ValueError, match=re.escape("at least one True value, got reset_mask=[False False False]")
        ):
            envs.reset(options={"reset_mask": np.zeros(3, dtype=bool)})
        with pytest.raises(
            gym.error.NoAsyncCallError,
            match=re.escape("Calling `step_wait` without any prior call to `step_async`."),
        ):
            envs.step_wait()
        envs.step_async(np.zeros(3, dtype=np.int64))
        with pytest.raises(
            gym.error.AlreadyPendingCallError,
            match=re.escape("Calling `step_async` while waiting for a pending call to `step` to complete"),
        ):
            envs.step_async(np.zeros(3, dtype=np.int64))
        envs.step_wait()
    odd = [lambda: gym.make("CartPole-v1"), lambda: gym.make("FrozenLake-v1")]
    cls = {"sync": "SyncVectorEnv", "subproc": "SubprocVectorEnv", "shmem": "ShmemVectorEnv"}[backend]
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            f"{cls}(..., observation_mode='same') however the sub-environments observation spaces "
            "are not equivalent. "
            f"(env 1 has observation space Discrete(16)"
        ),
    ):
        torchwm.make_vec_from_fns(odd, backend=backend, backend_kwargs=options_for(backend))


# -- reset_async / reset_wait, and close with a call pending --------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_async_and_reset_wait_follow_gymnasiums_rules(backend):
    with (
        torchwm.make_vec("CartPole-v1", 2, backend=backend, backend_kwargs=options_for(backend)) as envs,
        torchwm.make_vec("CartPole-v1", 2, backend="sync") as reference,
    ):
        with pytest.raises(
            gym.error.NoAsyncCallError, match="Calling `reset_wait` without any prior call to `reset_async`"
        ):
            envs.reset_wait()
        with pytest.raises(ValueError, match="seeds"):  # checked by reset_async, as Gymnasium does
            envs.reset_async(seed=[1, 2, 3])
        envs.reset_async(seed=4)
        for call in (
            lambda: envs.step_async(np.array([0, 1])),
            lambda: envs.reset_async(),
            lambda: envs.reset(),
            lambda: envs.get_attr("spec"),
            lambda: envs.set_attr("x", 1),
        ):
            with pytest.raises(gym.error.AlreadyPendingCallError, match="pending call to `reset`") as caught:
                call()
            assert caught.value.name == "reset"
        with pytest.raises(gym.error.NoAsyncCallError):
            envs.step_wait()
        obs, infos = envs.reset_wait()
        expected, _ = reference.reset(seed=4)
        assert np.array_equal(obs, expected)
        with pytest.raises(gym.error.NoAsyncCallError):  # one reset_wait per reset_async
            envs.reset_wait()
        assert np.array_equal(envs.step(np.array([0, 1]))[0], reference.step(np.array([0, 1]))[0])
        envs.step_async(np.array([1, 1]))
        with pytest.raises(
            gym.error.AlreadyPendingCallError,
            match=re.escape("Calling `reset_async` while waiting for a pending call to `step` to complete"),
        ):
            envs.reset_async()
        envs.step_wait()


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_reset_wait_keeps_its_own_timeout_and_the_env_works_after(backend):
    envs = torchwm.make_vec_from_fns([SlowResetRecorder] * 2, backend=backend, backend_kwargs=PROCESS_OPTIONS)
    try:
        envs.reset_async(seed=0)
        with pytest.raises(multiprocessing.TimeoutError, match="timeout") as caught:
            envs.reset_wait(timeout=0.3)
        assert isinstance(caught.value, EnvTimeoutError)
        assert envs.timeout == PROCESS_OPTIONS["timeout"]  # the backend's own timeout is unchanged
        envs.reset_async(seed=0)  # nothing pending after the timeout, as in Gymnasium
        obs, _ = envs.reset_wait(timeout=30)
        assert obs.tolist() == [[0.0], [0.0]]
        assert envs.step(np.array([2, 1]))[0][:, 0].tolist() == [2.0, 1.0]  # no stale reply taken
    finally:
        envs.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_warns_about_a_pending_call_as_gymnasium_does(backend):
    for pending, start in [
        ("step", lambda e: e.step_async(np.array([0, 1]))),
        ("reset", lambda e: e.reset_async()),
    ]:
        envs = torchwm.make_vec("CartPole-v1", 2, backend=backend, backend_kwargs=options_for(backend))
        envs.reset(seed=0)
        start(envs)
        with pytest.warns(
            UserWarning,
            match=re.escape(f"Calling `close` while waiting for a pending call to `{pending}` to complete."),
        ):
            envs.close(terminate=True)
        assert envs.closed
    with torchwm.make_vec("CartPole-v1", 2, backend=backend, backend_kwargs=options_for(backend)) as envs:
        envs.reset(seed=0)
        envs.step(np.array([0, 1]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            envs.close()  # nothing pending: no warning


# -- observation_mode ------------------------------------------------------------------------------


class BoundedBoxEnv(gym.Env):
    """Box(0, high, (2,)) observations: envs of one vector env may differ in ``high`` (domain
    randomisation)."""

    action_space = spaces.Discrete(2)

    def __init__(self, high, size=2):
        self.observation_space = spaces.Box(0, high, (size,), np.float32)

    def _obs(self):
        space = self.observation_space
        return self.np_random.uniform(space.low, space.high).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 1.0, False, False, {}


def bounded_fns(highs, sizes=None):
    return [
        functools.partial(BoundedBoxEnv, high, size) for high, size in zip(highs, sizes or [2] * len(highs))
    ]


@pytest.mark.parametrize(
    ("backend", "inline"),
    [("sync", False), ("subproc", False), ("subproc", True), ("shmem", False), ("shmem", True)],
)
def test_observation_mode_different_batches_as_gymnasium_does(backend, inline):
    fns = bounded_fns([1.0, 2.0, 3.0, 4.0])
    options = options_for(backend, observation_mode="different", **({"inline": True} if inline else {}))
    reference = gym.vector.SyncVectorEnv(fns, observation_mode="different")
    with torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options) as envs:
        assert envs.observation_space == reference.observation_space
        assert envs.single_observation_space == reference.single_observation_space
        assert np.array_equal(envs.reset(seed=3)[0], reference.reset(seed=3)[0])
        assert np.array_equal(
            envs.step(np.zeros(4, dtype=np.int64))[0], reference.step(np.zeros(4, dtype=np.int64))[0]
        )
    reference.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_observation_mode_is_checked_as_gymnasium_checks_it(backend):
    started = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="Invalid `observation_mode`"):
        torchwm.make_vec_from_fns(
            bounded_fns([1.0, 1.0]),
            backend=backend,
            backend_kwargs=options_for(backend, observation_mode="differnt"),
        )
    with pytest.raises(TypeError, match="both elements of observation_mode to be Spaces"):
        torchwm.make_vec_from_fns(
            bounded_fns([1.0, 1.0]),
            backend=backend,
            backend_kwargs=options_for(backend, observation_mode=("a", "b")),
        )
    assert set(multiprocessing.active_children()) == started  # refused before any worker started
    # Under "different", spaces of another shape; under "same", other bounds: RuntimeError naming the env.
    with pytest.raises(RuntimeError, match="do not share a common shape and dtype: env 2"):
        torchwm.make_vec_from_fns(
            bounded_fns([1.0, 1.0, 1.0], [2, 2, 3]),
            backend=backend,
            backend_kwargs=options_for(backend, observation_mode="different"),
        )
    with pytest.raises(RuntimeError, match="If this is intentional, use `observation_mode='different'`"):
        torchwm.make_vec_from_fns(
            bounded_fns([1.0, 2.0]), backend=backend, backend_kwargs=options_for(backend)
        )
    # A (batched, single) pair is taken as given, as Gymnasium takes it.
    batched, single = spaces.Box(0, 9, (2, 2), np.float32), spaces.Box(0, 9, (2,), np.float32)
    with torchwm.make_vec_from_fns(
        bounded_fns([1.0, 2.0]),
        backend=backend,
        backend_kwargs=options_for(backend, observation_mode=(batched, single)),
    ) as envs:
        assert envs.observation_space == batched and envs.single_observation_space == single
        assert envs.reset(seed=0)[0].shape == (2, 2)


def test_make_vec_maps_gymnasiums_observation_mode():
    with torchwm.make_vec(
        "CartPole-v1", 2, vectorization_mode="sync", vector_kwargs={"observation_mode": "different"}
    ) as envs:
        assert envs.spec.backend_kwargs["observation_mode"] == "different"
        assert envs.observation_space == gym.vector.utils.batch_differing_spaces(
            [envs.single_observation_space] * 2
        )


# -- infos of partial resets and of same-step autoresets --------------------------------------------


class InfoEnv(gym.Env):
    """Episodes of ``length`` steps; every reset and step reports infos (one key only some steps have)."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, length):
        self.length, self.t, self.resets = length, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.resets = 0, self.resets + 1
        return np.zeros(1, np.float32), {"resets": self.resets, "length": self.length}

    def step(self, action):
        self.t += 1
        info = {"t": self.t, **({"odd": float(self.t)} if self.t % 2 else {})}
        return np.full(1, self.t, np.float32), float(action), self.t >= self.length, False, info


def assert_infos_equal(got, expected):
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_infos_equal(got[key], value)
        else:
            assert np.asarray(got[key]).dtype == np.asarray(value).dtype, key
            assert np.array_equal(got[key], value), key


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_infos_of_envs_not_reset_are_not_reported_as_in_gymnasium(backend):
    """reset(options={"reset_mask": m}) reports the reset envs' infos only (masks ``_key`` = m), as
    Gymnasium's SyncVectorEnv does; the other envs' rows have no entry."""
    fns = [functools.partial(InfoEnv, length) for length in (2, 3, 4)]
    reference = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    envs = torchwm.make_vec_from_fns(
        fns, backend=backend, autoreset_mode="disabled", backend_kwargs=options_for(backend)
    )
    assert_infos_equal(envs.reset(seed=0)[1], reference.reset(seed=0)[1])
    for _ in range(4):
        got, expected = envs.step(np.ones(3, np.int64)), reference.step(np.ones(3, np.int64))
        assert_infos_equal(got[4], expected[4])
        ended = expected[2] | expected[3]
        if ended.any():
            got_obs, got_infos = envs.reset(options={"reset_mask": ended})
            expected_obs, expected_infos = reference.reset(options={"reset_mask": ended})
            assert np.array_equal(got_obs, expected_obs)
            assert_infos_equal(got_infos, expected_infos)
            assert got_infos["_resets"].tolist() == ended.tolist()
    envs.close()


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_final_info_and_final_obs_in_same_step_mode_as_in_gymnasium(backend):
    fns = [functools.partial(InfoEnv, length) for length in (2, 3, 4)]
    reference = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs = torchwm.make_vec_from_fns(
        fns, backend=backend, autoreset_mode="same_step", backend_kwargs=options_for(backend)
    )
    envs.reset(seed=0), reference.reset(seed=0)
    ends = 0
    for _ in range(5):
        got, expected = envs.step(np.ones(3, np.int64)), reference.step(np.ones(3, np.int64))
        for a, b in zip(got[:4], expected[:4], strict=True):
            assert np.array_equal(a, b)
        assert_infos_equal(got[4], expected[4])  # final_info, final_obs and their masks included
        ends += int("final_info" in expected[4])
        assert ("final_info" in got[4]) == bool((expected[2] | expected[3]).any())
    assert ends >= 2
    envs.close()
