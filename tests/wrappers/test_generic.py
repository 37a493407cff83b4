"""The generic wrappers (`torchwm.wrappers.generic`: ``frame_stack``, ``clip_reward``, ``pixels``,
``resize``): the same arrays as Gymnasium's classes put together by hand, Gymnasium's options with its
defaults and its errors, and the Atari stack's ``frame_stack`` padding against the chain a user migrates
from.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.names import register_ale
from wrappers.rollouts import assert_same_rollout, rollout


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
