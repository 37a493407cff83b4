"""Bad input, refused up front with a clear error, and a refused call changes nothing.

Seeds as Gymnasium's seeding takes them, timeouts checked before any worker starts,
the env that returned a bad value named, bool actions for a Discrete space refused
alike on every backend, clear messages for ``options``/``recv(timeout=)`` mistakes, and Atari frame
skips (ALE's ``frameskip``, ``atari_preprocessing``'s ``frame_skip``) refused with the reference's
exception type on every backend before any env is built.
"""

from __future__ import annotations

import importlib.util
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.errors import WorkerError
from torchwm.vector.transports import processes

BACKENDS = ["sync", "subproc", "shmem"]
PROCESS_OPTIONS = {"num_workers": 2, "context": "fork", "timeout": 60}


def make(backend, env_id="CartPole-v1", num_envs=3, **kwargs):
    options = None if backend == "sync" else {**PROCESS_OPTIONS, **kwargs.pop("backend_kwargs", {})}
    return torchwm.make_vec(env_id, num_envs, backend=backend, backend_kwargs=options, **kwargs)


# -- seeds ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("bad_call", "error"),
    [
        (lambda envs: envs.reset(seed=[1]), ValueError),  # one seed for three envs
        (lambda envs: envs.reset(seed=-1), ValueError),
        (lambda envs: envs.reset(seed=[1, -2, 3]), ValueError),
        (lambda envs: envs.reset(seed=1.5), TypeError),
        (lambda envs: envs.reset(seed=[1, "2", 3]), TypeError),
        (lambda envs: envs.reset(options="x"), TypeError),
        (lambda envs: envs.reset(options={"reset_mask": [True]}), TypeError),
    ],
    ids=["length", "negative", "negative_in_list", "float", "str_in_list", "options", "reset_mask"],
)
def test_a_refused_reset_keeps_the_make_vec_seed(backend, bad_call, error):
    with make(backend, seed=7) as reference:
        expected = reference.reset()[0]
    with make(backend, seed=7) as envs:
        with pytest.raises(error):
            bad_call(envs)
        assert np.array_equal(envs.reset()[0], expected)


def test_a_negative_seed_is_a_value_error_and_gymnasiums_error():
    with make("sync") as envs:
        with pytest.raises(ValueError, match="seed must be an int >= 0") as caught:
            envs.reset(seed=-1)
        assert isinstance(caught.value, gym.error.Error)  # what an env's own reset(seed=-1) raises
    with pytest.raises(ValueError, match="seed must be an int >= 0") as caught:
        torchwm.make_vec("CartPole-v1", 2, seed=-1)
    assert isinstance(caught.value, gym.error.Error)


def test_numpy_integers_are_accepted_for_num_envs_and_seeds():
    with torchwm.make_vec("CartPole-v1", np.int64(2), seed=np.int64(3)) as envs:
        assert envs.num_envs == 2 and isinstance(envs.num_envs, int)
        obs = envs.reset()[0]
        assert np.array_equal(envs.reset(seed=np.int32(3))[0], obs)
        assert np.array_equal(envs.reset(seed=[np.int64(3), np.uint8(4)])[0], obs)
        assert np.array_equal(envs.reset(seed=np.array([3, 4]))[0], obs)
    with torchwm.make_vec("CartPole-v1", 2, seed=3) as envs:
        assert np.array_equal(envs.reset()[0], obs)
    with pytest.raises(TypeError, match="num_envs must be an int"):
        torchwm.make_vec("CartPole-v1", True)


def test_large_seeds_are_taken_as_gymnasium_takes_them():
    reference = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    with torchwm.make_vec("CartPole-v1", 2) as envs:
        for seed in (2**32 - 1, 2**40):
            assert np.array_equal(envs.reset(seed=seed)[0], reference.reset(seed=seed)[0])
    reference.close()


# -- timeouts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
@pytest.mark.parametrize(
    ("timeout", "error"),
    [(float("nan"), ValueError), (-1, ValueError), (0, ValueError), ("a", TypeError), (True, TypeError)],
)
def test_a_bad_backend_timeout_is_refused_before_any_worker_starts(backend, timeout, error, monkeypatch):
    def no_worker(*args, **kwargs):
        raise AssertionError("a worker was started")

    monkeypatch.setattr(processes.ProcessHandle, "start", no_worker)
    with pytest.raises(error, match=f"{backend}: timeout must be a number of seconds > 0"):
        make(backend, backend_kwargs={"timeout": timeout})


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_an_infinite_timeout_means_no_limit(backend):
    with make(backend, backend_kwargs={"timeout": float("inf")}) as envs:
        assert envs.timeout is None
        envs.reset(seed=0)
        envs.step(np.zeros(3, dtype=np.int64))


def test_the_sync_timeout_is_checked_too():
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0"):
        torchwm.make_vec("CartPole-v1", 2, backend_kwargs={"timeout": float("nan")})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("timeout", "error"), [(-1, ValueError), (float("nan"), ValueError), ("a", TypeError)]
)
def test_a_bad_recv_timeout_is_refused_and_the_step_stays_in_flight(backend, timeout, error):
    with make(backend) as envs, make("sync") as reference:
        envs.reset(seed=0)
        reference.reset(seed=0)
        actions = np.array([0, 1, 0])
        envs.send(actions)
        with pytest.raises(error, match=r"recv\(timeout=\) must be a number of seconds > 0"):
            envs.recv(timeout=timeout)
        assert np.array_equal(envs.recv(timeout=30)[0], reference.step(actions)[0])


# -- the env that returned a bad value is the one named -------------------------------------------


class BadRewardEnv(gym.Env):
    """Action 1 returns a reward that is no number."""

    observation_space = spaces.Box(0, 1, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        return np.zeros(1, np.float32), ("not a number" if action == 1 else 1.0), False, False, {}


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
@pytest.mark.parametrize(
    ("options", "bad_env"),
    [
        ({"num_workers": 1}, 2),
        ({"num_workers": 2, "inline": True}, 2),
        ({"num_workers": 2, "inline": True}, 0),
    ],
    ids=["one_worker", "worker_next_to_inline", "inline_share"],
)
def test_a_bad_reward_names_the_env_that_returned_it(backend, options, bad_env):
    envs = torchwm.make_vec_from_fns(
        [BadRewardEnv] * 4, backend=backend, backend_kwargs={**PROCESS_OPTIONS, **options}
    )
    try:
        envs.reset(seed=0)
        actions = np.zeros(4, dtype=np.int64)
        actions[bad_env] = 1
        with pytest.raises(WorkerError, match=f"env {bad_env} on worker") as caught:
            envs.step(actions)
        assert caught.value.env_index == bad_env
    finally:
        envs.close()


# -- bool actions for a Discrete space -------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_bool_actions_for_a_discrete_space_are_refused_on_every_backend(backend):
    # Gymnasium's Discrete(2).contains(np.bool_(True)) is False: a bool is not one of its actions.
    assert not spaces.Discrete(2).contains(np.bool_(True))
    with make(backend) as envs, make("sync") as reference:
        envs.reset(seed=0)
        reference.reset(seed=0)
        with pytest.raises(ValueError, match="expected integer actions for Discrete.*got dtype bool"):
            envs.step(np.array([True, False, True]))
        actions = np.array([1, 0, 1])  # nothing was sent: the next step is the first
        assert np.array_equal(envs.step(actions)[0], reference.step(actions)[0])


def test_bool_actions_stay_valid_where_gymnasium_takes_them():
    multi_binary = spaces.MultiBinary(3)
    assert multi_binary.contains(np.array([True, False, True]))
    from torchwm.vector.batching import check_actions

    assert check_actions(multi_binary, np.array([[True, False, True]]), 1).dtype == np.bool_
    assert check_actions(spaces.MultiDiscrete([2, 2]), np.array([[True, False]]), 1).dtype == np.bool_


# -- float actions for discrete spaces ---------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_whole_float_actions_for_a_discrete_space_step_as_their_integers(backend):
    # Tianshou's policies and test envs send float arrays of whole numbers; Gymnasium's vector envs pass
    # them on, and torchwm casts them exactly.
    with make(backend) as envs, make("sync") as reference:
        envs.reset(seed=0)
        reference.reset(seed=0)
        got = envs.step(np.array([1.0, 0.0, 1.0]))
        want = reference.step(np.array([1, 0, 1]))
        for a, b in zip(got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match=r"whole numbers.*1\.5.*env 2"):
            envs.step(np.array([0.0, 1.5]), env_ids=[0, 2])
        # Whole numbers no int64 holds: numpy would cast them to -9223372036854775808.
        for huge in (1e20, 2.0**63, -1e19):
            with pytest.raises(ValueError, match=r"whole numbers that int64 holds.*env 2"):
                envs.step(np.array([0.0, huge]), env_ids=[0, 2])
        actions = np.array([1, 0, 1])  # the refused step sent nothing
        np.testing.assert_array_equal(envs.step(actions)[0], reference.step(actions)[0])


def test_float_actions_are_cast_exactly_or_refused():
    from torchwm.vector.batching import check_actions

    multi = spaces.MultiDiscrete([3, 4])
    cast = check_actions(multi, np.array([[2.0, 3.0]]), 1)
    assert cast.dtype == multi.dtype and cast.tolist() == [[2, 3]]
    for bad in (np.nan, np.inf, -0.5):
        with pytest.raises(ValueError, match="whole numbers"):
            check_actions(spaces.Discrete(3), np.array([bad]), 1)


# -- Atari frame skips ----------------------------------------------------------------------------

ALL_BACKENDS = [*BACKENDS, "ale-native"]
# ALE's AtariEnv refuses each of these with gymnasium.error.Error when it is built.
BAD_FRAMESKIPS = [0, -1, 4.0, (3, 2), (0, 3), (2,), (2, 3, 4), [2, 5]]


@pytest.fixture
def no_process_starts(monkeypatch):
    """Fails the test if a worker process starts: bad input is refused before."""
    started = []
    monkeypatch.setattr(processes.ProcessHandle, "start", lambda *args, **kwargs: started.append(args))
    yield
    assert started == [], "a worker process was started"


@pytest.mark.parametrize("frameskip", BAD_FRAMESKIPS, ids=repr)
def test_a_bad_ale_frameskip_is_ales_error_before_any_env_is_built(frameskip, no_process_starts):
    torchwm.names.register_ale()
    with pytest.raises(gym.error.Error, match="frameskip"):  # the reference: ALE's own check
        gym.make("ALE/Pong-v5", frameskip=frameskip)
    built = []
    for call in (
        lambda: torchwm.make_env("ALE/Pong-v5", frameskip=frameskip, wrappers=[]),
        lambda: torchwm.make_env("ALE/Pong-v5", frameskip=frameskip),  # under the default stack
        *(
            lambda backend=backend: make(backend, "ALE/Pong-v5", 2, frameskip=frameskip, wrappers=[])
            for backend in ALL_BACKENDS
        ),
    ):
        with pytest.raises(gym.error.Error, match=re.escape(f"env frameskip={frameskip!r}")) as caught:
            built.append(call())
        assert caught.value.option == "frameskip"
    assert built == []


@pytest.mark.parametrize("frameskip", [0, -1, (2, 5)], ids=repr)
def test_make_atari_vector_env_refuses_a_bad_frameskip_as_ale_does(frameskip):
    from ale_py.vector_env import AtariVectorEnv

    with pytest.raises(gym.error.Error, match="frameskip"):  # the reference: ALE's vector env
        AtariVectorEnv("pong", 1, frameskip=frameskip)
    with pytest.raises(gym.error.Error, match="frameskip"):
        torchwm.make_atari_vector_env("pong", 2, frameskip=frameskip)


def test_a_good_stochastic_frameskip_still_runs():
    with torchwm.make_vec("ALE/Pong-v5", 2, frameskip=(2, 5), wrappers=[], seed=0) as envs:
        assert envs.reset()[0].shape == (2, 210, 160, 3)


@pytest.mark.parametrize(
    ("option", "value"),
    [("frame_skip", 0), ("frame_skip", -1), ("noop_max", -1), ("screen_size", 0), ("screen_size", (84, 0))],
)
@pytest.mark.parametrize("fused", [True, False])
def test_a_bad_preprocessing_option_is_gymnasiums_value_error_before_any_worker_starts(
    option, value, fused, no_process_starts
):
    from gymnasium.wrappers import AtariPreprocessing

    torchwm.names.register_ale()
    with pytest.raises(ValueError) as reference:  # Gymnasium's own check, once the env is built
        AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1), **{option: value})
    # Gymnasium's sentence ("Expect the `screen_size` to be positive, actually: 0"), which its tests match.
    words = re.escape(str(reference.value))
    wrappers = [{"name": "atari_preprocessing", option: value}, "frame_stack"]
    with pytest.raises(ValueError, match=rf"atari_preprocessing\({option}=.*{words}") as caught:
        torchwm.make_env("ALE/Pong-v5", wrappers=wrappers, fused=fused)
    assert caught.value.option == option
    for backend in ALL_BACKENDS:
        with pytest.raises(ValueError, match=rf"{words}.*{option} must be"):
            make(backend, "ALE/Pong-v5", 2, wrappers=wrappers, fused=fused)


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        ("screen_size", -1, "Expect the `screen_size` to be positive, actually: -1"),
        ("frame_skip", 0, "Expect the `frame_skip` to be positive, actually: 0"),
        ("noop_max", -1, "Expect the `noop_max` to be non-negative, actually: -1"),
    ],
)
def test_a_bad_preprocessing_option_has_the_words_gymnasiums_wrapper_tests_match(option, value, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        torchwm.make_env("ALE/Pong-v5", wrappers=[{"name": "atari_preprocessing", option: value}])


def test_a_spec_changed_by_hand_is_checked_again_before_the_backend_gets_it(no_process_starts):
    spec = torchwm.factory.resolve_spec("ALE/Pong-v5", 2, backend="shmem")
    bad_stack = tuple(
        w.__class__(w.name, {**w.kwargs, "frame_skip": 0}) if w.name == "atari_preprocessing" else w
        for w in spec.wrappers
    )
    with pytest.raises(ValueError, match=r"atari_preprocessing\(frame_skip=0\)"):
        torchwm.make_vec_from_spec(spec.replace(wrappers=bad_stack, fused=False))
    with pytest.raises(gym.error.Error, match="env frameskip=0"):
        torchwm.make_vec_from_spec(spec.replace(env_kwargs={**spec.env_kwargs, "frameskip": 0}))


def test_the_fused_core_refuses_a_bad_frame_skip_as_atari_preprocessing_does():
    from ale_py.env import AtariEnv

    from torchwm.wrappers.atari_fused import AtariPreprocessingCore

    options = dict(noop_max=30, screen_size=84, grayscale=True, terminal_on_life_loss=False, scale_obs=False)
    ale_env = AtariEnv("pong", frameskip=1)
    try:
        with pytest.raises(ValueError, match="frame_skip must be >= 1"):
            AtariPreprocessingCore(ale_env, frame_skip=0, grayscale_newaxis=False, **options)
    finally:
        ale_env.close()


@pytest.mark.parametrize("backend", ["sync", "shmem", "ale-native"])
def test_an_env_frameskip_under_the_preprocessing_frame_skip_is_refused_before_any_worker(backend):
    # Gymnasium's AtariPreprocessing refuses an env that skips frames itself, with a ValueError, once built.
    with pytest.raises(ValueError, match=r"env frameskip=4 with atari_preprocessing frame_skip=4"):
        torchwm.make_vec("ALE/Pong-v5", 2, backend=backend, frameskip=4)
    if backend != "ale-native":  # which runs the standard stack only
        with torchwm.make_vec("ALE/Pong-v5", 2, backend=backend, frameskip=4, wrappers=[]) as envs:
            assert envs.reset(seed=0)[0].shape[0] == 2  # ALE's own frameskip without the stack is fine


# -- multi-agent and vector envs where one gymnasium.Env is expected (issue 52) -------------------------


def _pettingzoo_env():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env()


# SuperSuit is in the test extra, not in the fast part's that other Pythons install (.ci/run).
needs_supersuit = pytest.mark.skipif(
    importlib.util.find_spec("supersuit") is None, reason="SuperSuit is not installed"
)


def _supersuit_vector_env():
    import supersuit

    return supersuit.pettingzoo_env_to_vec_env_v1(_pettingzoo_env())


@pytest.mark.parametrize(
    "call",
    [
        lambda env: torchwm.make_vec(env, 2),
        lambda env: torchwm.make_vec_from_fns(env),
        lambda env: torchwm.make_vec_from_fns([env, env]),
        lambda env: torchwm.TorchVectorizedEnv(env, num_workers=1),
    ],
    ids=["make_vec", "make_vec_from_fns", "make_vec_from_fns-list", "TorchVectorizedEnv"],
)
def test_a_pettingzoo_instance_is_refused_before_any_worker_starts_naming_multiagent(call, monkeypatch):
    built = []  # every backend is built through make_vec_from_spec
    monkeypatch.setattr("torchwm.factory.make_vec_from_spec", lambda spec: built.append(spec))
    with pytest.raises(TypeError, match=r"torchwm\.multiagent\.make_vec"):
        call(_pettingzoo_env())
    assert built == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("factory", "words"),
    [
        (_pettingzoo_env, r"a PettingZoo env .*torchwm\.multiagent\.make_vec"),
        pytest.param(_supersuit_vector_env, "a vector env", marks=needs_supersuit),
    ],
    ids=["pettingzoo", "supersuit-vector-env"],
)
def test_a_factory_of_a_pettingzoo_or_vector_env_is_refused_at_construction(backend, factory, words):
    options = None if backend == "sync" else PROCESS_OPTIONS
    with pytest.raises(TypeError, match=words):
        torchwm.make_vec_from_fns([factory] * 2, backend=backend, backend_kwargs=options)


@needs_supersuit
def test_a_vector_env_factory_is_refused_by_torch_vectorized_env_at_construction():
    with pytest.raises(TypeError, match="a vector env"):
        torchwm.TorchVectorizedEnv(_supersuit_vector_env, num_workers=1, backend="sync")
