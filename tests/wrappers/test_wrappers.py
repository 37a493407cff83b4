"""The built-in wrappers: names and options, equality with Gymnasium's classes, Atari semantics, errors.

``episodic_life`` and ``fire_reset`` are checked on real games against the plain
Gymnasium stack driven by hand the way their semantics say (a no-op step instead
of a reset after a lost life; a FIRE step after a reset): Breakout (FIRE, 5 lives),
Freeway (no FIRE, no lives) and Pong (FIRE, no lives). They run through the
wrapper chain (``fused=False``); ``tests/atari/test_fused_atari.py`` shows the fused env
gives the same arrays.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import torchwm
from torchwm.names import register_ale

# The contract (docs/wrappers.md): name -> options with their defaults.
CONTRACT = {
    "atari_preprocessing": {
        "noop_max": 30,
        "frame_skip": 4,
        "screen_size": 84,
        "grayscale": True,
        "terminal_on_life_loss": False,
        "scale_obs": False,
        "grayscale_newaxis": False,
    },
    "frame_stack": {"stack_size": 4, "padding": "zero"},
    "episodic_life": {},
    "fire_reset": {},
    "clip_reward": {"min_reward": -1.0, "max_reward": 1.0},
    "pixels": {
        "width": None,
        "height": None,
        "render_only": True,
        "render_key": "pixels",
        "obs_key": "state",
    },
    "episode_statistics": {"buffer_length": 100},
}
PLAIN = ["atari_preprocessing"]  # the stack the Atari wrappers are compared against


def test_every_builtin_wrapper_is_registered_with_its_options():
    infos = {info.name: info for info in torchwm.list_wrappers()}
    for name, options in CONTRACT.items():
        assert infos[name].options == options, name
    assert set(infos["resize"].options) == {"width", "height"}
    spec = torchwm.make_vec("ALE/Pong-v5").spec
    assert [w.name for w in spec.wrappers] == ["atari_preprocessing", "frame_stack"]
    assert spec.wrappers[1].kwargs == {"stack_size": 4, "padding": "zero"}
    assert spec.env_kwargs["frameskip"] == 1


# --- generic wrappers: the same arrays as Gymnasium's classes put together by hand ---------------


def rollout(env, steps=40, seed=0):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    out = [(obs, 0.0)]
    for _ in range(steps):
        obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        out.append((obs, reward))
        if terminated or truncated:
            out.append((env.reset()[0], 0.0))
    return out


def assert_same_rollout(got_env, expected_env, steps=40):
    got, expected = rollout(got_env, steps), rollout(expected_env, steps)
    assert len(got) == len(expected)
    for (obs_a, rew_a), (obs_b, rew_b) in zip(got, expected, strict=True):
        assert np.array_equal(obs_a, obs_b) and rew_a == rew_b


@pytest.mark.parametrize("padding", ["zero", "reset"])
def test_frame_stack_is_gymnasium_frame_stack_observation(padding):
    env = torchwm.make_env(
        "CartPole-v1", wrappers=[{"name": "frame_stack", "stack_size": 3, "padding": padding}]
    )
    reference = gym.wrappers.FrameStackObservation(gym.make("CartPole-v1"), 3, padding_type=padding)
    assert env.observation_space == reference.observation_space
    assert_same_rollout(env, reference)


def test_frame_stack_refuses_a_stack_the_memory_cannot_hold_before_filling_it(monkeypatch):
    from torchwm.wrappers import generic

    monkeypatch.setattr(generic, "_available_memory", lambda: 2**30)
    # 2 * 10**7 CartPole observations of 16 bytes: three arrays of 298 MiB and the references, 1.19 GiB
    with pytest.raises(
        MemoryError,
        match=r"Unable to allocate 0\.298 GiB for an array with shape \(20000000, 4\) "
        r"and data type float32: .* 1\.19 GiB in all, and this machine has 1 GiB",
    ):
        torchwm.make_env("CartPole-v1", wrappers=[{"name": "frame_stack", "stack_size": 2 * 10**7}])
    # A Dict observation counts every subspace: 2 * 4 + 8 bytes (a Discrete is one int64)
    space = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Discrete(3)})
    assert generic._space_nbytes(space) == 16
    with pytest.raises(MemoryError, match=r"shape \(20000000\)"):
        generic._check_stack_fits(space, 2 * 10**7)
    # What fits is Gymnasium's wrapper, and values Gymnasium refuses keep its errors
    generic._check_stack_fits(space, 10**6)
    with pytest.raises(TypeError, match="stack_size is expected to be an integer"):
        generic.frame_stack(gym.make("CartPole-v1"), 2.0)


def test_clip_reward_is_gymnasium_clip_reward():
    # Pendulum's rewards lie in [-16.3, 0], so clipping to [-1, 1] changes most of them.
    env = torchwm.make_env("Pendulum-v1", wrappers=["clip_reward"])
    reference = gym.wrappers.ClipReward(gym.make("Pendulum-v1"), -1.0, 1.0)
    assert_same_rollout(env, reference)
    rewards = [r for _, r in rollout(env)[1:]]
    assert min(rewards) == -1.0 and max(rewards) <= 0.0


def test_pixels_and_resize_are_gymnasium_render_observation_and_resize():
    env = torchwm.make_env("CartPole-v1", wrappers=["pixels", {"name": "resize", "width": 32, "height": 24}])
    reference = gym.wrappers.ResizeObservation(
        gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"), render_only=True),
        (24, 32),
    )
    assert (
        env.observation_space == reference.observation_space == gym.spaces.Box(0, 255, (24, 32, 3), np.uint8)
    )
    assert_same_rollout(env, reference, steps=10)


def test_make_env_size_gives_resized_rendered_frames():
    env = torchwm.make_env("CartPole-v1", size=(48, 40))
    reference = gym.wrappers.ResizeObservation(
        gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"), render_only=True),
        (40, 48),
    )
    assert env.observation_space.shape == (40, 48, 3)
    assert_same_rollout(env, reference, steps=10)


def test_pixels_without_size_is_the_full_rendered_frame():
    env = torchwm.make_env("CartPole-v1", wrappers=["pixels"])
    obs, _ = env.reset(seed=0)
    assert np.array_equal(obs, env.render())
    assert obs.shape == (400, 600, 3)


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["atari_preprocessing", "episodic_life", "fire_reset"])
def test_atari_wrappers_refuse_other_envs_before_building(name):
    with pytest.raises(
        ValueError, match=rf"wrapper '{name}' works only on atari envs, and 'CartPole-v1' is not one"
    ):
        torchwm.make_vec("CartPole-v1", wrappers=[name])


@pytest.mark.parametrize("fused", [True, False])
def test_fire_reset_on_a_game_without_fire_raises(fused):
    with pytest.raises(
        ValueError,
        match=r"needs a game with a FIRE action, and 'freeway' has none \(its actions: NOOP, UP, DOWN\)",
    ):
        torchwm.make_env("ALE/Freeway-v5", wrappers=["atari_preprocessing", "fire_reset"], fused=fused)


@pytest.mark.parametrize(
    ("wrapper", "message"),
    [
        (
            {"name": "frame_stack", "stack_size": "4"},
            r"wrapper 'frame_stack': option 'stack_size' expected int, got '4'",
        ),
        (
            {"name": "frame_stack", "padding": "edge"},
            r"wrapper 'frame_stack': option 'padding' expected .*, got 'edge' "
            r"\(input should be 'zero' or 'reset'\)",
        ),
        (
            {"name": "clip_reward", "min_reward": "low"},
            r"wrapper 'clip_reward': option 'min_reward' expected float .*, got 'low'",
        ),
        ({"name": "resize", "width": 10}, r"wrapper 'resize': option 'height' is required"),
        (
            {"name": "pixels", "size": 3},
            r"wrapper 'pixels' has no option 'size'; its options are: width, height, render_only",
        ),
    ],
)
def test_wrong_options_are_refused_before_building(wrapper, message):
    with pytest.raises(TypeError, match=message):
        torchwm.make_vec("CartPole-v1", wrappers=[wrapper])


@pytest.mark.parametrize(
    ("env_id", "wrappers", "message"),
    [
        (
            "CartPole-v1",
            [{"name": "pixels", "width": 64}],
            r"'pixels' needs both width and height \(positive ints\) or neither, got width=64, height=None",
        ),
        (
            "CartPole-v1",
            ["pixels", {"name": "resize", "width": 0, "height": 8}],
            r"'resize' needs width and height as positive ints, got width=0",
        ),
    ],
)
def test_wrong_option_values_raise_at_construction(env_id, wrappers, message):
    with pytest.raises(ValueError, match=message):
        torchwm.make_env(env_id, wrappers=wrappers)


# --- the options of Gymnasium's wrappers, with its defaults and its errors ---------------------------


def reward_bounds_refusal(min_reward, max_reward):
    """The InvalidBound Gymnasium's ClipReward raises for these bounds (its message), or None."""
    try:
        gym.wrappers.ClipReward(gym.make("Pendulum-v1"), min_reward, max_reward)
    except gym.error.InvalidBound as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("min_reward", "max_reward"),
    [
        (1.0, -1.0),
        (None, None),
        (np.array([0.0, 1.0]), np.array([1.0, 0.5])),
        ([0.0, 1.0], [1.0, 0.5]),
    ],
    ids=["min>max", "both-none", "arrays", "lists-from-a-config-file"],
)
@pytest.mark.parametrize("env_id", ["Pendulum-v1", "ALE/Pong-v5"])
def test_clip_reward_refuses_with_gymnasiums_invalid_bound(env_id, min_reward, max_reward):
    expected = reward_bounds_refusal(
        *(np.asarray(b) if isinstance(b, list) else b for b in (min_reward, max_reward))
    )
    assert expected is not None
    wrappers = [{"name": "clip_reward", "min_reward": min_reward, "max_reward": max_reward}]
    if env_id.startswith("ALE/"):
        wrappers.insert(0, "atari_preprocessing")  # the fused env falls back to the chain, which refuses
    with pytest.raises(gym.error.InvalidBound) as caught:
        torchwm.make_env(env_id, wrappers=wrappers)
    assert str(caught.value) == expected


@pytest.mark.parametrize(
    ("min_reward", "max_reward"),
    [
        (None, -2.0),
        (-3.0, None),
        (np.array([-2.0]), np.array([-1.5])),
        ([-2.0], [-1.5]),
    ],
    ids=["no-min", "no-max", "arrays", "lists"],
)
def test_clip_reward_takes_none_and_array_bounds_as_gymnasium(min_reward, max_reward):
    env = torchwm.make_env(
        "Pendulum-v1", wrappers=[{"name": "clip_reward", "min_reward": min_reward, "max_reward": max_reward}]
    )
    bounds = [np.asarray(b) if isinstance(b, list) else b for b in (min_reward, max_reward)]
    reference = gym.wrappers.ClipReward(gym.make("Pendulum-v1"), *bounds)
    got, expected = rollout(env), rollout(reference)
    assert len(got) == len(expected)
    for (obs_a, rew_a), (obs_b, rew_b) in zip(got, expected, strict=True):
        assert np.array_equal(obs_a, obs_b) and np.array_equal(rew_a, rew_b)


@pytest.mark.parametrize("fused", [True, False])
def test_clip_reward_arrays_on_atari_equal_the_chain(fused):
    stack = ["atari_preprocessing", {"name": "clip_reward", "min_reward": None, "max_reward": [0.5]}]
    env = torchwm.make_env("ALE/Breakout-v5", wrappers=stack, fused=fused)
    chain = gym.wrappers.ClipReward(
        gym.wrappers.AtariPreprocessing(gym.make("ALE/Breakout-v5", frameskip=1)), None, np.array([0.5])
    )
    assert np.array_equal(env.reset(seed=0)[0], chain.reset(seed=0)[0])
    for action in np.random.default_rng(0).integers(4, size=150):
        got, expected = env.step(int(action)), chain.step(int(action))
        assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])


def test_episode_statistics_takes_gymnasiums_buffer_length():
    env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "episode_statistics", "buffer_length": 3}])
    reference = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"), buffer_length=3)
    for e in (env, reference):
        e.reset(seed=0)
        e.action_space.seed(0)
        for _ in range(200):
            if any(e.step(e.action_space.sample())[2:4]):
                e.reset()
    for name in ("return_queue", "length_queue"):
        assert env.get_wrapper_attr(name) == reference.get_wrapper_attr(name)
        assert env.get_wrapper_attr(name).maxlen == 3 and len(env.get_wrapper_attr(name)) == 3
    assert env.get_wrapper_attr("episode_count") == reference.episode_count > 3


@pytest.mark.parametrize(
    "options",
    [{}, {"render_only": False}, {"render_only": False, "render_key": "frame", "obs_key": "x"}],
    ids=["default", "dict", "keys"],
)
def test_pixels_takes_gymnasiums_options_and_defaults(options):
    env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "pixels", **options}])
    reference = gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array"), **options)
    assert env.observation_space == reference.observation_space
    got, expected = env.reset(seed=0)[0], reference.reset(seed=0)[0]
    for _ in range(5):
        assert gym.utils.env_checker.data_equivalence(got, expected)
        got, expected = env.step(1)[0], reference.step(1)[0]


def test_pixels_with_a_size_and_the_state_resizes_the_frame_only():
    env = torchwm.make_env(
        "CartPole-v1", wrappers=[{"name": "pixels", "render_only": False, "width": 48, "height": 32}]
    )
    reference = gym.wrappers.AddRenderObservation(
        gym.make("CartPole-v1", render_mode="rgb_array"), render_only=False
    )
    frames = gym.wrappers.ResizeObservation(
        gym.wrappers.AddRenderObservation(gym.make("CartPole-v1", render_mode="rgb_array")), (32, 48)
    )
    assert env.observation_space["pixels"] == frames.observation_space
    got, state, frame = env.reset(seed=0)[0], reference.reset(seed=0)[0]["state"], frames.reset(seed=0)[0]
    assert np.array_equal(got["state"], state) and np.array_equal(got["pixels"], frame)


# --- episodic_life ---------------------------------------------------------------------------------


def breakout(wrappers, **kwargs):
    return torchwm.make_env("ALE/Breakout-v5", wrappers=wrappers, fused=False, **kwargs)


def test_episodic_life_ends_the_episode_on_life_loss_and_the_game_goes_on():
    """Against the plain stack driven by hand: a no-op step where the learner resets after a lost life."""
    env = breakout([*PLAIN, "episodic_life"])
    plain = breakout(PLAIN)
    obs, info = env.reset(seed=2)
    plain_obs, _ = plain.reset(seed=2)
    assert np.array_equal(obs, plain_obs) and info["lives"] == 5
    rng = np.random.default_rng(2)
    life_losses = game_overs = 0
    lives = 5
    for _ in range(3000):
        action = int(rng.integers(4))
        obs, reward, terminated, truncated, info = env.step(action)
        plain_obs, plain_reward, plain_terminated, _, plain_info = plain.step(action)
        assert np.array_equal(obs, plain_obs) and reward == plain_reward and info == plain_info
        if info["lives"] < lives and info["lives"] > 0:
            # A lost life ends the learner's episode; the game itself has not ended.
            assert terminated and not plain_terminated
            frame = info["episode_frame_number"]
            obs, info = env.reset()
            plain_obs, _, _, _, plain_info = plain.step(0)
            assert np.array_equal(obs, plain_obs) and info == plain_info
            assert info["lives"] == lives - 1
            assert info["episode_frame_number"] == frame + 4  # one no-op step, no emulator reset
            life_losses += 1
        elif terminated:
            assert plain_terminated and info["lives"] == 0
            obs, info = env.reset()
            plain_obs, plain_info = plain.reset()
            assert np.array_equal(obs, plain_obs) and info == plain_info
            assert info["lives"] == 5 and info["episode_frame_number"] <= 30  # a real reset: only the no-ops
            game_overs += 1
        else:
            assert not plain_terminated
        lives = info["lives"]
        if game_overs == 2:
            break
    assert game_overs == 2 and life_losses == 8


def test_episodic_life_reset_with_a_seed_restarts_the_game():
    env = breakout([*PLAIN, "episodic_life"])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    while True:
        _, _, terminated, _, info = env.step(int(rng.integers(4)))
        if terminated:
            break
    assert info["lives"] == 4
    obs, info = env.reset(seed=9)
    fresh_obs, fresh_info = breakout(PLAIN).reset(seed=9)
    assert np.array_equal(obs, fresh_obs) and info == fresh_info and info["lives"] == 5


@pytest.mark.parametrize("env_id", ["ALE/Pong-v5", "ALE/Freeway-v5"])
def test_episodic_life_changes_nothing_in_games_without_lives(env_id):
    with_life = torchwm.make_env(env_id, wrappers=[*PLAIN, "episodic_life"], fused=False)
    plain = torchwm.make_env(env_id, wrappers=PLAIN, fused=False)
    assert_same_rollout(with_life, plain, steps=300)
    assert with_life.unwrapped.ale.lives() == 0


# --- fire_reset ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("env_id", "fire"), [("ALE/Breakout-v5", 1), ("ALE/Pong-v5", 1)])
def test_fire_reset_presses_fire_once_after_reset(env_id, fire):
    env = torchwm.make_env(env_id, wrappers=[*PLAIN, "fire_reset"], fused=False)
    plain = torchwm.make_env(env_id, wrappers=PLAIN, fused=False)
    obs, info = env.reset(seed=5)
    _, plain_reset_info = plain.reset(seed=5)
    plain_obs, _, _, _, plain_info = plain.step(fire)
    assert np.array_equal(obs, plain_obs)
    # One FIRE step of 4 frames and nothing else (no action 2, unlike stable-baselines3).
    assert info["episode_frame_number"] == plain_reset_info["episode_frame_number"] + 4
    assert info["lives"] == plain_info["lives"] and info["seeds"] == plain_reset_info["seeds"]
    for action in np.random.default_rng(5).integers(env.action_space.n, size=50):
        got, expected = env.step(int(action)), plain.step(int(action))
        assert np.array_equal(got[0], expected[0]) and got[1:] == expected[1:]


def lives_under_noop_policy(wrappers, steps=400):
    """Lives seen while only NOOP is played (Breakout serves the ball only on FIRE)."""
    env = breakout(wrappers, repeat_action_probability=0.0)
    _, info = env.reset(seed=0)
    seen = [info["lives"]]
    for _ in range(steps):
        _, _, terminated, truncated, info = env.step(0)
        seen.append(info["lives"])
        if terminated or truncated:
            if info["lives"] == 0:
                break
            _, info = env.reset()
    return seen


def test_breakout_needs_fire_and_fire_reset_serves_the_ball():
    assert set(lives_under_noop_policy(PLAIN)) == {5}  # the ball is never served
    assert min(lives_under_noop_policy([*PLAIN, "fire_reset"])) == 4  # served once, lost once


def test_fire_reset_above_episodic_life_fires_after_each_lost_life():
    assert lives_under_noop_policy([*PLAIN, "episodic_life", "fire_reset"])[-1] == 0  # every ball served
    # Below episodic_life, FIRE follows only real resets: the second ball is never served.
    assert min(lives_under_noop_policy([*PLAIN, "fire_reset", "episodic_life"])) == 4


# --- Gymnasium's env checker -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env_id", "wrappers", "fused"),
    [
        ("ALE/Breakout-v5", ["atari_preprocessing"], False),
        ("ALE/Breakout-v5", None, True),
        (
            "ALE/Breakout-v5",
            ["atari_preprocessing", "episodic_life", "fire_reset", "clip_reward", "frame_stack"],
            False,
        ),
        (
            "ALE/Breakout-v5",
            ["atari_preprocessing", "episodic_life", "fire_reset", "clip_reward", "frame_stack"],
            True,
        ),
        ("CartPole-v1", ["frame_stack"], False),
        ("Pendulum-v1", ["clip_reward"], False),
        ("CartPole-v1", ["pixels", {"name": "resize", "width": 32, "height": 24}], False),
    ],
)
def test_wrapped_envs_pass_gymnasium_check_env(env_id, wrappers, fused):
    register_ale()
    env = torchwm.make_env(env_id, wrappers=wrappers, fused=fused)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_env warns about wrapped envs and float bounds; errors fail
        check_env(env, skip_render_check=True)


@pytest.mark.parametrize("padding", ["zero", "reset"])
def test_the_atari_stack_with_either_padding_is_the_gymnasium_chain_a_user_migrates_from(padding):
    # docs/from-gymnasium.md: Gymnasium's FrameStackObservation repeats the reset frame by default
    # (padding_type="reset"); torchwm's frame_stack pads with zeros unless padding="reset" is given.
    env = torchwm.make_env(
        "ALE/Pong-v5",
        wrappers=["atari_preprocessing", {"name": "frame_stack", "stack_size": 4, "padding": padding}],
    )
    chain = gym.wrappers.AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1))
    reference = gym.wrappers.FrameStackObservation(
        chain, 4, **({} if padding == "reset" else {"padding_type": "zero"})
    )
    assert_same_rollout(env, reference, steps=12)
    differs = not np.array_equal(
        rollout(env, 2)[0][0],
        rollout(
            gym.wrappers.FrameStackObservation(
                gym.wrappers.AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1)), 4
            ),
            2,
        )[0][0],
    )
    assert differs == (padding == "zero")  # the zero default differs from Gymnasium's after a reset


def gymnasium_atari_chain(**frame_stack_options):
    """The chain of Gymnasium's Atari docs, AtariPreprocessing then FrameStackObservation(env, 4)."""
    register_ale()  # what a Gymnasium script's gym.register_envs(ale_py) does
    env = gym.wrappers.AtariPreprocessing(gym.make("ALE/Pong-v5", frameskip=1))
    return gym.wrappers.FrameStackObservation(env, 4, **frame_stack_options)


def vector_rollout(envs, steps=8):
    """The observations of a seeded reset then ``steps`` steps of fixed random actions."""
    observations = [envs.reset(seed=0)[0]]
    for actions in np.random.default_rng(0).integers(0, 6, (steps, envs.num_envs)):
        observations.append(envs.step(actions)[0])
    return observations


def torchwm_and_chain_rollouts(wrappers, backend="sync", **frame_stack_options):
    chain = gym.vector.SyncVectorEnv([lambda: gymnasium_atari_chain(**frame_stack_options)] * 2)
    try:
        with torchwm.make_vec("ALE/Pong-v5", 2, backend=backend, wrappers=wrappers, seed=0) as envs:
            got = vector_rollout(envs)
        return got, vector_rollout(chain)
    finally:
        chain.close()


@pytest.mark.parametrize("backend", ["sync", "shmem"])
@pytest.mark.parametrize("padding", ["zero", "reset"])
def test_the_vector_atari_stack_with_either_padding_is_gymnasiums_vector_chain(padding, backend):
    # The migration of docs/from-gymnasium.md: a SyncVectorEnv of the chain, with either padding_type.
    stack = ["atari_preprocessing", {"name": "frame_stack", "stack_size": 4, "padding": padding}]
    got, expected = torchwm_and_chain_rollouts(stack, backend, padding_type=padding)
    for step, (obs, reference) in enumerate(zip(got, expected, strict=True)):
        assert np.array_equal(obs, reference), f"step {step}"
    # What each padding puts before the reset frame: copies of it, or zeros.
    assert np.array_equal(got[0][:, 0], got[0][:, 3]) == (padding == "reset")
    assert (got[0][:, :3] == 0).all() == (padding == "zero")


def test_the_default_stack_differs_from_gymnasiums_default_chain_in_three_observations_an_episode():
    # docs/from-gymnasium.md: FrameStackObservation's default is padding_type="reset", torchwm's zeros;
    # from the fourth observation on, the stack holds real frames only.
    got, expected = torchwm_and_chain_rollouts(None)
    same = [np.array_equal(obs, reference) for obs, reference in zip(got, expected, strict=True)]
    assert same == [False] * 3 + [True] * 6
