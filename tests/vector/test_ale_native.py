"""The ``ale-native`` backend: mapping, refusals, equality with Gymnasium, semantics
(`make_atari_vector_env`, ALE's own vector env, is tests/test_atari_vector_env.py's)."""

from __future__ import annotations

import re

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
from support.ale import kwargs_of

import torchwm
from torchwm.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
    UnsupportedStackError,
)
from torchwm.factory import resolve_spec
from torchwm.vector.ale_native_spec import ale_vector_kwargs

gym.register_envs(ale_py)


# -- refusals, before anything starts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "make_kwargs", "message"),
    [
        ("ALE/Pong-v5", {"wrappers": ["atari_preprocessing", lambda env: env]}, "is a Python callable"),
        ("ALE/Pong-v5", {"wrappers": [{"name": "atari_preprocessing", "scale_obs": True}]}, "scale_obs=True"),
        (
            "ALE/Pong-v5",
            {"wrappers": ["atari_preprocessing", {"name": "frame_stack", "padding": "reset"}]},
            "padding='reset'",
        ),
        (
            "ALE/Pong-v5",
            {"wrappers": ["atari_preprocessing", {"name": "resize", "width": 42, "height": 42}]},
            "no equivalent of the wrapper 'resize'",
        ),
        ("ALE/Pong-v5", {"size": (64, 64)}, "does not start with atari_preprocessing"),
        ("ALE/Pong-v5", {"wrappers": []}, "does not start with atari_preprocessing"),
        (
            "ALE/Pong-v5",
            {"wrappers": ["atari_preprocessing", {"name": "clip_reward", "min_reward": -2.0}]},
            "clip_reward(-2.0, 1.0)",
        ),
        (
            "ALE/Breakout-v5",
            {"wrappers": ["atari_preprocessing", "frame_stack", "episodic_life"]},
            "frame_stack must be the last wrapper",
        ),
        (
            "ALE/Breakout-v5",
            {"wrappers": ["atari_preprocessing", "fire_reset", "fire_reset"]},
            "appears 2 times",
        ),
        ("ALE/Pong-v5", {"mode": 1}, "env option mode=1"),
        ("CartPole-v1", {}, "it is not an Atari (ALE) env"),
    ],
)
def test_refused_stacks_name_the_part_and_suggest_shmem(no_ale_start, env_id, make_kwargs, message):
    with pytest.raises(UnsupportedStackError) as info:
        torchwm.make_vec(env_id, 2, backend="ale-native", **make_kwargs)
    assert message in str(info.value)
    assert 'backend="shmem"' in str(info.value)


def test_refused_source(no_ale_start):
    spec = resolve_spec("ALE/Pong-v5", 2, backend="ale-native").replace(source="mysim")
    with pytest.raises(UnsupportedStackError, match="source 'mysim'"):
        ale_vector_kwargs(spec)


def test_unknown_backend_option_is_refused(no_ale_start):
    with pytest.raises(TypeError, match="has no option 'num_workers'; its options are: batch_size"):
        torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native", backend_kwargs={"num_workers": 2})


def test_its_options_are_listed_and_a_config_typo_is_named():
    from torchwm.config import ConfigError, validate_config
    from torchwm.listing import list_backends

    listed = next(info for info in list_backends() if info.name == "ale-native")
    assert listed.options == {"batch_size": None, "num_threads": 0, "thread_affinity_offset": -1}
    with pytest.raises(ConfigError, match="backend_kwargs.num_thread: .*did you mean 'num_threads'"):
        validate_config(
            {"id": "ALE/Pong-v5", "num_envs": 2, "backend": "ale-native", "backend_kwargs": {"num_thread": 2}}
        )


@pytest.mark.parametrize("backend_kwargs", [{"batch_size": 0}, {"batch_size": 5}, {"num_threads": -1}])
def test_bad_backend_option_values_are_refused(no_ale_start, backend_kwargs):
    with pytest.raises(ValueError, match=f"{next(iter(backend_kwargs))} must be an int"):
        torchwm.make_vec("ALE/Pong-v5", 4, backend="ale-native", backend_kwargs=backend_kwargs)


def test_disabled_autoreset_with_async_batches_is_refused(no_ale_start):
    with pytest.raises(UnsupportedStackError, match="'disabled' with batch_size < num_envs"):
        torchwm.make_vec(
            "ALE/Pong-v5",
            4,
            backend="ale-native",
            autoreset_mode="disabled",
            backend_kwargs={"batch_size": 2},
        )


def test_fire_reset_on_a_game_without_fire_is_an_error():
    with pytest.raises(ValueError, match="'freeway' has none"):
        torchwm.make_vec(
            "ALE/Freeway-v5",
            1,
            backend="ale-native",
            wrappers=["atari_preprocessing", "fire_reset", "frame_stack"],
        )


def rollout(envs, steps=40, seed=None, actions_seed=0, arrays=False):
    """Observations of a reset and ``steps`` random steps; with ``arrays``, rewards and flags too."""
    obs, _ = envs.reset(seed=seed)
    results = [[obs], [], [], []]
    rng = np.random.default_rng(actions_seed)
    for _ in range(steps):
        step = envs.step(rng.integers(0, envs.single_action_space.n, envs.num_envs))
        for kept, value in zip(results, step[:4]):
            kept.append(value)
    if arrays:
        return [np.stack(kept) for kept in results]
    return np.stack(results[0])


# -- equality with Gymnasium's wrapper chain -----------------------------------------------------------


def gymnasium_chain(
    env_id,
    noop_max=0,
    grayscale=True,
    terminal_on_life_loss=False,
    frames=1000,
    screen_size=84,
    grayscale_newaxis=False,
):
    def make():
        env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0, max_num_frames_per_episode=frames)
        env = AtariPreprocessing(
            env,
            noop_max=noop_max,
            grayscale_obs=grayscale,
            screen_size=screen_size,
            terminal_on_life_loss=terminal_on_life_loss,
            grayscale_newaxis=grayscale_newaxis,
        )
        return FrameStackObservation(env, 4, padding_type="zero")

    return make


def assert_same_rollout(env_id, steps, seed=3, num_envs=2, **options):
    """ale-native and Gymnasium's SyncVectorEnv of the chain give the same arrays, step by step."""
    pre = {
        "name": "atari_preprocessing",
        "noop_max": 0,
        "grayscale": options.get("grayscale", True),
        "terminal_on_life_loss": options.get("terminal_on_life_loss", False),
        "screen_size": options.get("screen_size", 84),
        "grayscale_newaxis": options.get("grayscale_newaxis", False),
    }
    frames = options.get("frames", 1000)
    reference = gym.vector.SyncVectorEnv([gymnasium_chain(env_id, **options)] * num_envs)
    native = torchwm.make_vec(
        env_id,
        num_envs,
        backend="ale-native",
        wrappers=[pre, "frame_stack"],
        repeat_action_probability=0.0,
        max_num_frames_per_episode=frames,
    )
    rng = np.random.default_rng(seed)
    ends = 0
    try:
        assert native.observation_space == reference.observation_space
        ref_obs, _ = reference.reset(seed=seed)
        obs, _ = native.reset(seed=seed)
        assert np.array_equal(obs, ref_obs)
        for step in range(steps):
            actions = rng.integers(0, native.single_action_space.n, num_envs)
            expected = reference.step(actions)
            got = native.step(actions)
            for name, a, b in zip(
                ("obs", "rewards", "terminations", "truncations"), got[:4], expected[:4], strict=True
            ):
                assert np.array_equal(a, b), f"{name} differ at step {step}"
            assert np.array_equal(got[4]["lives"], expected[4]["lives"])
            ends += int(np.sum(got[2] | got[3]))
    finally:
        reference.close()
        native.close()
    return ends


def test_equals_gymnasium_chain_on_breakout_across_episode_ends():
    # No no-ops (ALE draws them with another RNG) and no sticky actions: the rest is the same arithmetic.
    assert assert_same_rollout("ALE/Breakout-v5", 600) >= 4


def test_equals_gymnasium_chain_on_pong_with_truncation():
    assert assert_same_rollout("ALE/Pong-v5", 300, frames=600) >= 2


def test_terminal_on_life_loss_equals_gymnasium_chain():
    assert assert_same_rollout("ALE/Breakout-v5", 300, terminal_on_life_loss=True) >= 4


def test_rgb_equals_gymnasium_chain():
    assert_same_rollout("ALE/Breakout-v5", 30, grayscale=False)


@pytest.mark.parametrize(
    ("screen_size", "options"),
    [
        ((64, 96), {}),
        ((96, 64), {"grayscale_newaxis": True}),
        ((160, 210), {}),
        ((72, 100), {"grayscale": False}),
    ],
    ids=["64x96", "96x64-newaxis", "160x210", "72x100-rgb"],
)
def test_any_screen_size_equals_gymnasium_chain(screen_size, options):
    """screen_size=(width, height) as Gymnasium reads it: ALE's img_width and img_height."""
    width, height = screen_size
    assert (
        kwargs_of("ALE/Breakout-v5", wrappers=[{"name": "atari_preprocessing", "screen_size": screen_size}])[
            "img_height"
        ]
        == height
    )
    assert assert_same_rollout("ALE/Breakout-v5", 250, screen_size=screen_size, frames=500, **options) >= 2


@pytest.mark.parametrize(
    "stack",
    [
        [{"name": "atari_preprocessing", "noop_max": 0}, "clip_reward", "frame_stack"],
        [{"name": "atari_preprocessing", "noop_max": 0, "terminal_on_life_loss": True}, "clip_reward"],
    ],
    ids=["clip_reward+frame_stack", "life_loss+clip_reward,no_frame_stack"],
)
def test_equals_the_sync_backend_where_streams_can_match(stack):
    # Breakout scores 1, 4 and 7 points a brick row: clipping shows. No no-ops, no sticky actions.
    results = []
    for backend in ("sync", "ale-native"):
        with torchwm.make_vec(
            "ALE/Breakout-v5",
            2,
            backend=backend,
            wrappers=stack,
            seed=2,
            repeat_action_probability=0.0,
            max_num_frames_per_episode=1000,
        ) as envs:
            results.append(rollout(envs, steps=300, actions_seed=2, arrays=True))
    for name, a, b in zip(("obs", "rewards", "terminations", "truncations"), *results, strict=True):
        assert np.array_equal(a, b), name
    assert results[1][1].max() == 1.0


def test_ale_no_ops_are_drawn_from_zero_to_noop_max_minus_one():
    # The documented difference: Gymnasium's AtariPreprocessing takes 1..noop_max no-ops, ALE 0..noop_max-1.
    with torchwm.make_vec(
        "ALE/Breakout-v5",
        12,
        backend="ale-native",
        repeat_action_probability=0.0,
        wrappers=[{"name": "atari_preprocessing", "noop_max": 3}],
    ) as envs:
        _, infos = envs.reset(seed=0)
    assert set(infos["episode_frame_number"].tolist()) == {0, 1, 2}


# -- seeds ---------------------------------------------------------------------------------------------


def test_reset_seed_s_gives_env_i_seed_s_plus_i():
    with torchwm.make_vec("ALE/Breakout-v5", 3, backend="ale-native") as three:
        rng = np.random.default_rng(1)
        actions = rng.integers(0, 4, (40, 3))
        obs, _ = three.reset(seed=10)
        trio = [obs] + [three.step(a)[0] for a in actions]
    with torchwm.make_vec("ALE/Breakout-v5", 1, backend="ale-native") as one:
        obs, _ = one.reset(seed=12)
        solo = [obs] + [one.step(a[2:3])[0] for a in actions]
    assert np.array_equal(np.stack(trio)[:, 2], np.stack(solo)[:, 0])


def test_make_vec_seed_makes_runs_repeat_with_sticky_actions():
    runs = []
    for _ in range(2):
        with torchwm.make_vec("ALE/Breakout-v5", 2, backend="ale-native", seed=5) as envs:
            runs.append(rollout(envs))
    assert np.array_equal(runs[0], runs[1])
    with torchwm.make_vec("ALE/Breakout-v5", 2, backend="ale-native", seed=6) as envs:
        assert not np.array_equal(runs[0], rollout(envs))


def test_seeds_outside_ales_range_are_refused():
    with torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native") as envs:
        with pytest.raises(ValueError, match=r"seeds must be ints in \[0, 2147483647\]"):
            envs.reset(seed=2**31 - 1)


NOT_A_SEED = r"seed(?: of a list)? must be an int >= 0"  # the check every backend shares (Gymnasium's rule)
ALE_RANGE = r"seeds must be ints in \[0, 2147483647\]"  # what ALE adds: a C int


@pytest.mark.parametrize(
    ("seed", "error", "message"),
    [
        (-1, ValueError, NOT_A_SEED),
        ([3, -1], ValueError, NOT_A_SEED),
        ([3, "4"], TypeError, NOT_A_SEED),
        ([3, True], TypeError, NOT_A_SEED),
        (2**31 - 1, ValueError, ALE_RANGE),
        ([3, 2**31], ValueError, ALE_RANGE),
    ],
)
def test_a_refused_reset_seed_changes_nothing(seed, error, message):
    """ALE reads -1 as "no seed": refused (with what is expected) before the make_vec seed is used up."""
    with torchwm.make_vec("ALE/Breakout-v5", 2, backend="ale-native", seed=5) as envs:
        with pytest.raises(error, match=message):
            envs.reset(seed=seed)
        after_refusal = rollout(envs)
    with torchwm.make_vec("ALE/Breakout-v5", 2, backend="ale-native", seed=5) as fresh:
        assert np.array_equal(after_refusal, rollout(fresh))


def test_a_make_vec_seed_whose_envs_leave_ales_range_is_refused_before_ale_starts(no_ale_start):
    with pytest.raises(
        ValueError, match=r"seed must be an int in \[0, 2147483646\] with 2 envs.*got 2147483647"
    ):
        torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native", seed=2**31 - 1)


# -- Breakout: episodic_life and fire_reset ------------------------------------------------------------


def test_episodic_life_ends_the_episode_and_the_game_goes_on():
    stack = ["atari_preprocessing", "episodic_life", "fire_reset", "frame_stack"]
    with torchwm.make_vec(
        "ALE/Breakout-v5", 1, backend="ale-native", wrappers=stack, seed=0, repeat_action_probability=0.0
    ) as envs:
        _, infos = envs.reset()
        lives, frame = int(infos["lives"][0]), int(infos["episode_frame_number"][0])
        life_losses = 0
        rng = np.random.default_rng(0)
        for _ in range(3000):
            _, _, terminated, truncated, infos = envs.step(rng.integers(0, 4, 1))
            now_lives, now_frame = int(infos["lives"][0]), int(infos["episode_frame_number"][0])
            if now_lives == 0 or truncated[0]:
                assert terminated[0] or truncated[0]
                break
            assert now_frame > frame, "the emulator was reset after a lost life"
            assert terminated[0] == (now_lives < lives)
            life_losses += now_lives < lives
            lives, frame = now_lives, now_frame
        assert life_losses == 4
        # At game over the next step is the real reset: the game starts again with every life.
        _, _, _, _, infos = envs.step(np.zeros(1, dtype=np.int64))
        assert int(infos["lives"][0]) == 5 and int(infos["episode_frame_number"][0]) < frame


@pytest.mark.parametrize("fire", [False, True])
def test_fire_reset_serves_the_ball_in_breakout(fire):
    stack = [{"name": "atari_preprocessing", "noop_max": 0}, *(["fire_reset"] if fire else []), "frame_stack"]
    with torchwm.make_vec(
        "ALE/Breakout-v5", 1, backend="ale-native", wrappers=stack, seed=0, repeat_action_probability=0.0
    ) as envs:
        _, infos = envs.reset()
        # FIRE is one emulator frame of the reset.
        assert int(infos["episode_frame_number"][0]) == int(fire)
        noop = np.zeros(1, dtype=np.int64)
        lives = [int(envs.step(noop)[4]["lives"][0]) for _ in range(300)]
    # Served, the ball is missed by a paddle that never moves; never served, no life is lost.
    assert (min(lives) < 5) == fire


# -- the vector contract where ALE's engine bounds it --------------------------------------------------


@pytest.fixture
def breakout():
    envs = torchwm.make_vec(
        "ALE/Breakout-v5",
        3,
        backend="ale-native",
        seed=0,
        repeat_action_probability=0.0,
        max_num_frames_per_episode=40,
    )
    yield envs
    envs.close()


def test_spaces_spec_and_dtypes(breakout):
    obs, infos = breakout.reset()
    assert breakout.observation_space.contains(obs) and breakout.single_observation_space.shape == (4, 84, 84)
    assert (
        breakout.spec.backend == "ale-native"
        and breakout.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
    )
    _, rewards, terminations, truncations, infos = breakout.step(np.ones(3, dtype=np.int64))
    assert rewards.dtype == np.float64 and terminations.dtype == truncations.dtype == np.bool_
    assert np.array_equal(infos["env_id"], [0, 1, 2]) and infos["_lives"].all()


def test_actions_are_checked_before_they_reach_ale(breakout):
    breakout.reset()
    for bad, message in [
        (np.zeros(2, dtype=np.int64), r"shape \(3,\)"),
        (np.array([0, 1, 4]), "out of range"),
        (np.full(3, 0.5, dtype=np.float32), "integer actions.*whole numbers"),
    ]:
        with pytest.raises(ValueError, match=message):
            breakout.step(bad)
    assert breakout.step([0, 1, 2])[0].shape == (3, 4, 84, 84)  # a list is fine


def test_step_before_reset_needs_a_reset(breakout):
    with pytest.raises(gym.error.ResetNeeded):
        breakout.step(np.zeros(3, dtype=np.int64))


def test_misuse_raises_gymnasiums_error_types(breakout):
    """The same types as the base class (and Gymnasium's AsyncVectorEnv) for the same misuse."""
    with pytest.raises(gym.error.NoAsyncCallError, match="no action in flight") as caught:
        breakout.recv()
    assert isinstance(caught.value, NoAsyncCallError) and caught.value.name == "step"
    breakout.reset()
    breakout.send(np.zeros(3, dtype=np.int64))
    with pytest.raises(gym.error.AlreadyPendingCallError, match="recv\\(\\) first") as caught:
        breakout.send(np.zeros(3, dtype=np.int64))
    assert isinstance(caught.value, AlreadyPendingCallError) and caught.value.name == "step"
    with pytest.raises(gym.error.AlreadyPendingCallError, match="recv\\(\\) first") as caught:
        breakout.reset()
    assert caught.value.name == "step"  # the call still pending, as Gymnasium names it
    assert breakout.recv()[0].shape == (3, 4, 84, 84)  # the refused calls changed nothing
    with pytest.raises(gym.error.NoAsyncCallError):
        breakout.recv()


BAD_RECV_ARGUMENTS = [
    {"timeout": 0},
    {"timeout": -1},
    {"timeout": float("nan")},
    {"timeout": "1"},
    {"timeout": True},
    {"min_ready": 0},
    {"min_ready": -1},
    {"min_ready": 1.5},
    {"min_ready": True},
]


def _recv_error(envs, kwargs):
    """The error of ``recv(**kwargs)`` after a send, and the observations of the recv() after it."""
    envs.reset(seed=0)
    envs.send(np.zeros(envs.num_envs, dtype=np.int64))
    with pytest.raises(Exception) as caught:
        envs.recv(**kwargs)
    return caught.value, envs.recv()[0]


@pytest.mark.parametrize("kwargs", BAD_RECV_ARGUMENTS, ids=repr)
def test_bad_recv_arguments_are_refused_as_the_pool_backends_refuse_them(breakout, kwargs):
    """ALE cannot time out, but a recv(timeout=, min_ready=) it could not honour anywhere else is refused
    with the pool backends' exception and words; the batch stays in flight."""
    with torchwm.make_vec(
        "CartPole-v1", 3, backend="subproc", backend_kwargs={"num_workers": 1, "context": "fork"}
    ) as pool:
        expected, _ = _recv_error(pool, kwargs)
    assert isinstance(expected, (TypeError, ValueError))
    error, obs = _recv_error(breakout, kwargs)
    assert type(error) is type(expected) and str(error) == str(expected)
    assert obs.shape == (3, 4, 84, 84)  # the refused recv changed nothing: the batch came after it


def test_np_random_seed_is_the_seed_each_env_was_reset_with(breakout):
    breakout.reset()  # make_vec(seed=0)
    assert breakout.np_random_seed == (0, 1, 2)
    breakout.reset(seed=[7, None, 9])
    assert breakout.np_random_seed == (7, 1, 9)  # as Gymnasium: an unseeded reset keeps the env's seed
    breakout.reset(seed=None)
    assert breakout.np_random_seed == (7, 1, 9)
    breakout.reset(seed=42, env_ids=[1])
    assert breakout.np_random_seed == (7, 43, 9)


def test_env_ids_in_another_order_follow_their_actions():
    results = []
    for env_ids, actions in [(None, [0, 1, 3]), ([2, 0, 1], [3, 0, 1])]:
        with torchwm.make_vec("ALE/Breakout-v5", 3, backend="ale-native", seed=1) as envs:
            envs.reset()
            for _ in range(10):
                obs = envs.step(np.array(actions), env_ids=env_ids)[0]
            results.append(obs)
    assert np.array_equal(results[0][[2, 0, 1]], results[1])  # rows in the order of env_ids


def test_partial_step_is_refused_and_partial_reset_returns_its_rows(breakout):
    breakout.reset()
    with pytest.raises(NotImplementedError, match="cannot step env_ids=\\[1\\]"):
        breakout.step(np.array([0]), env_ids=[1])
    for _ in range(3):
        breakout.step(np.ones(3, dtype=np.int64))
    obs, infos = breakout.reset(env_ids=[1], seed=4)
    assert obs.shape == (1, 4, 84, 84) and infos["env_id"].tolist() == [1]
    assert int(infos["episode_frame_number"][0]) < 12  # env 1 restarted, at most noop_max - 1 frames in
    with torchwm.make_vec("ALE/Breakout-v5", 1, backend="ale-native", repeat_action_probability=0.0) as solo:
        assert np.array_equal(solo.reset(seed=4)[0], obs)


def test_next_step_autoreset(breakout):
    breakout.reset()
    for _ in range(10):
        obs, _, terminations, truncations, infos = breakout.step(np.zeros(3, dtype=np.int64))
    assert truncations.all() and not terminations.any()  # 40 frames = 10 steps of 4
    obs, rewards, terminations, truncations, infos = breakout.step(np.zeros(3, dtype=np.int64))
    assert not (terminations | truncations).any() and (rewards == 0).all()
    assert (infos["episode_frame_number"] < 30).all()  # the reset step: noops only
    assert not obs[:, :3].any()  # a fresh stack is zero-padded


def test_same_step_autoreset_gives_final_obs():
    with torchwm.make_vec(
        "ALE/Breakout-v5",
        2,
        backend="ale-native",
        seed=0,
        autoreset_mode="same_step",
        max_num_frames_per_episode=40,
    ) as envs:
        envs.reset()
        for _ in range(9):
            previous = envs.step(np.zeros(2, dtype=np.int64))[0]
        obs, _, _, truncations, infos = envs.step(np.zeros(2, dtype=np.int64))
    assert truncations.all() and infos["_final_obs"].all()
    assert not obs[:, :3].any()  # already the reset obs
    for i in range(2):
        # The final stack is the previous one moved on by a frame.
        assert np.array_equal(infos["final_obs"][i][:3], previous[i][1:])


def test_disabled_autoreset_wants_a_reset_mask():
    with torchwm.make_vec(
        "ALE/Breakout-v5",
        2,
        backend="ale-native",
        seed=0,
        autoreset_mode="disabled",
        max_num_frames_per_episode=40,
    ) as envs:
        envs.reset()
        for _ in range(10):
            _, _, _, truncations, _ = envs.step(np.zeros(2, dtype=np.int64))
        assert truncations.all()
        with pytest.raises(ValueError, match="autoreset_mode is 'disabled'"):
            envs.step(np.zeros(2, dtype=np.int64))
        obs, infos = envs.reset(options={"reset_mask": np.array([True, True])})
        assert not obs[:, :3].any()
        _, _, _, truncations, _ = envs.step(np.zeros(2, dtype=np.int64))
        assert not truncations.any()


def test_batch_size_is_ales_asynchronous_mode():
    with torchwm.make_vec(
        "ALE/Breakout-v5", 4, backend="ale-native", seed=0, backend_kwargs={"batch_size": 2}
    ) as envs:
        obs, infos = envs.reset()
        assert obs.shape == (2, 4, 84, 84) and envs.action_space.shape == (2,)
        seen = set(infos["env_id"].tolist())
        with pytest.raises(NotImplementedError, match="exactly the envs of the last result"):
            envs.send(np.zeros(2, dtype=np.int64), env_ids=sorted({0, 1, 2, 3} - seen))
        for _ in range(6):
            envs.send(np.zeros(2, dtype=np.int64), env_ids=infos["env_id"][::-1])
            obs, _, _, _, infos = envs.recv()
            # The first two envs ready, whichever they are (ALE does not promise to cycle through all).
            assert obs.shape == (2, 4, 84, 84) and len(set(infos["env_id"].tolist())) == 2
            assert set(infos["env_id"].tolist()) <= {0, 1, 2, 3}


def test_attributes_and_close():
    envs = torchwm.make_vec("ALE/Breakout-v5", 2, backend="ale-native")
    assert envs.get_attr("get_action_meanings") == (["NOOP", "FIRE", "RIGHT", "LEFT"],) * 2
    assert envs.get_attr("observation_space")[0] == envs.single_observation_space
    with pytest.raises(NotImplementedError, match="cannot call 'ale'"):
        envs.get_attr("ale")
    with pytest.raises(NotImplementedError, match="cannot set 'frameskip'"):
        envs.set_attr("frameskip", 2)
    with pytest.raises(NotImplementedError, match="does not render"):
        envs.render()
    envs.close()
    envs.close()
    with pytest.raises(ClosedEnvironmentError):
        envs.reset()


@pytest.mark.parametrize("frameskip", [0, -1, 4.0])
def test_a_bad_frameskip_is_gymnasium_error_as_ale_raises_it(frameskip):
    with pytest.raises(gym.error.Error, match="frameskip") as reference:  # ALE's own check
        AtariVectorEnv("pong", 1, frameskip=frameskip)
    # ALE's words ("Invalid frameskip of 0, frameskip must be positive."), which its tests match.
    with pytest.raises(gym.error.Error, match=re.escape(str(reference.value))):
        torchwm.make_atari_vector_env("pong", frameskip=frameskip)
    if frameskip <= 0:
        # On ale-native, ALE's frameskip is atari_preprocessing's frame_skip: its error names both.
        wrappers = [{"name": "atari_preprocessing", "frame_skip": frameskip}, "frame_stack"]
        with pytest.raises(gym.error.Error, match=r"frame_skip=.*frameskip"):
            torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native", wrappers=wrappers)
    # On ale-native the emulator's frameskip must stay 1 (atari_preprocessing skips frames): any other is
    # refused.
    with pytest.raises(gym.error.Error, match=f"env frameskip={frameskip}"):
        torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native", frameskip=frameskip)


@pytest.mark.parametrize(
    ("option", "value", "error"),
    [
        ("frame_skip", 0, "frame_skip must be >= 1"),
        ("noop_max", -1, "noop_max must be >= 0"),
        ("screen_size", (0, 84), "screen_size must be a positive int or (width, height)"),
        ("frame_skip", 4.0, "option 'frame_skip' expected int"),
    ],
)
def test_bad_preprocessing_options_on_ale_native_are_gymnasium_errors_naming_the_option(option, value, error):
    with pytest.raises(gym.error.Error) as caught:
        torchwm.make_vec(
            "ALE/Pong-v5", 2, backend="ale-native", wrappers=[{"name": "atari_preprocessing", option: value}]
        )
    assert error in str(caught.value) and isinstance(caught.value, ValueError)


def test_attributes_wait_for_the_step_in_flight_as_in_gymnasium(breakout):
    """call/get_attr/set_attr/render are the base class's: refused while a step is pending, as every backend
    does."""
    breakout.reset()
    breakout.send(np.zeros(3, dtype=np.int64))
    for calling, attempt in [
        ("call_async", lambda: breakout.get_attr("observation_space")),
        ("call_async", lambda: breakout.call("get_action_meanings")),
        ("set_attr", lambda: breakout.set_attr("frameskip", 2)),
    ]:
        with pytest.raises(gym.error.AlreadyPendingCallError, match=f"Calling `{calling}`.*recv\\(\\) first"):
            attempt()
    assert breakout.recv()[0].shape == (3, 4, 84, 84)  # the refused calls changed nothing
    assert breakout.get_attr("action_space") == (breakout.single_action_space,) * 3
