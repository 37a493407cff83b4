"""`make_atari_vector_env` (`torchwm.atari_vector_env`): ALE's own vector env from any spelling of a game's
name, with the arguments ALE's constructor takes, each checked before ALE starts.
"""

from __future__ import annotations

import inspect

import gymnasium as gym
import numpy as np
import pytest
from ale_py.vector_env import AtariVectorEnv

import torchwm
from torchwm.atari_vector_env import ALE_ARGUMENT_CHECKS
from torchwm.errors import UnknownNameError

SEED_DOC_ARGS = dict(
    game="pong",
    num_envs=16,
    obs_type="rgb",
    frameskip=4,
    repeat_action_probability=0.25,
    full_action_space=False,
    seed=0,
)


def first_steps(envs, steps=5):
    obs, _ = envs.reset()
    frames = [obs]
    for _ in range(steps):
        frames.append(envs.step(np.full(envs.num_envs, 2, dtype=np.int64))[0])
    envs.close()
    return np.stack(frames)


def test_make_atari_vector_env_refuses_a_bad_reset_seed_and_keeps_its_own():
    envs = torchwm.make_atari_vector_env("pong", 2, seed=3)
    with pytest.raises(ValueError, match=r"seeds must be ints in \[0, 2147483647\]"):
        envs.reset(seed=-1)
    assert np.array_equal(first_steps(envs), first_steps(torchwm.make_atari_vector_env("pong", 2, seed=3)))


def test_make_atari_vector_env_with_the_documented_arguments():
    envs = torchwm.make_atari_vector_env(**SEED_DOC_ARGS)
    assert isinstance(envs, AtariVectorEnv)
    assert envs.single_observation_space.shape == (4, 84, 84, 3)
    frames = first_steps(envs)
    assert frames.shape == (6, 16, 4, 84, 84, 3) and frames.dtype == np.uint8
    # RGB: the colour channels are not copies of one another.
    assert not np.array_equal(frames[..., 0], frames[..., 1])
    assert np.array_equal(frames, first_steps(torchwm.make_atari_vector_env(**SEED_DOC_ARGS)))


def test_make_atari_vector_env_grayscale_and_names():
    frames = first_steps(torchwm.make_atari_vector_env("Pong", 2, seed=3))
    assert frames.shape == (6, 2, 4, 84, 84)
    for name in ("pong", "ALE/Pong-v5", "PongNoFrameskip-v4"):
        assert np.array_equal(frames, first_steps(torchwm.make_atari_vector_env(name, 2, seed=3)))
    for name in ("space_invaders", "SpaceInvaders", "ALE/SpaceInvaders-v5"):
        envs = torchwm.make_atari_vector_env(name, 1)
        assert envs.single_action_space.n == 6
        envs.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"game": "pong", "obs_type": "ram"}, ValueError, "obs_type must be one of"),
        ({"game": "pongg"}, UnknownNameError, "Did you mean"),
        ({"game": "CartPole-v1"}, ValueError, "must be an Atari game"),
        ({"game": "pong", "num_envs": 0}, ValueError, "num_envs must be an int >= 1, got 0"),
        ({"game": "pong", "seed": -1}, ValueError, r"seeds must be ints in \[0, 2147483647\].*got -1"),
        ({"game": "pong", "stack_size": 4}, TypeError, "no option 'stack_size'; AtariVectorEnv takes"),
        ({"game": "pong", "grayscale": False}, TypeError, "obs_type='rgb'"),
    ],
)
def test_make_atari_vector_env_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        torchwm.make_atari_vector_env(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        # Each of these used to build, then hang at the first reset, or run with a meaningless value.
        (
            {"num_envs": 2, "batch_size": 5},
            ValueError,
            r"batch_size must be 0 \(every env\) or an int from 1 to "
            r"num_envs=2, got 5",
        ),
        ({"stack_num": 0}, ValueError, "stack_num must be an int >= 1, got 0"),
        ({"img_height": 0}, ValueError, "img_height must be an int >= 1, got 0"),
        ({"img_width": -84}, ValueError, "img_width must be an int >= 1, got -84"),
        ({"frameskip": 0}, ValueError, "frameskip must be an int >= 1, got 0"),
        ({"frameskip": 4.0}, TypeError, "frameskip must be an int, got 4.0"),
        (
            {"repeat_action_probability": 1.5},
            ValueError,
            r"repeat_action_probability must be a number in \[0, 1\]",
        ),
        (
            {"repeat_action_probability": float("nan")},
            ValueError,
            "repeat_action_probability must be a number",
        ),
        (
            {"continuous_action_threshold": 2},
            ValueError,
            r"continuous_action_threshold must be a number in \[0, 1\]",
        ),
        ({"noop_max": -1}, ValueError, "noop_max must be an int >= 0, got -1"),
        ({"num_threads": -1}, ValueError, "num_threads must be an int >= 0, got -1"),
        ({"thread_affinity_offset": -2}, ValueError, "thread_affinity_offset must be an int >= -1, got -2"),
        (
            {"max_num_frames_per_episode": 0},
            ValueError,
            "max_num_frames_per_episode must be an int >= 1, got 0",
        ),
        ({"full_action_space": 1}, TypeError, "full_action_space must be True or False, got 1"),
        ({"reward_clipping": "no"}, TypeError, "reward_clipping must be True or False"),
        (
            {"autoreset_mode": "Disabled"},
            ValueError,
            r"autoreset_mode must be one of \['NextStep', 'SameStep'\]",
        ),
        (
            {"num_envs": 2, "seed": 2**31 - 1},
            ValueError,
            r"seed must be an int in \[0, 2147483646\] with 2 envs",
        ),
        ({"seed": True}, TypeError, "seeds must be ints"),
    ],
)
def test_make_atari_vector_env_checks_every_argument_before_ale(no_ale_start, kwargs, error, message):
    with pytest.raises(error, match=message) as caught:
        torchwm.make_atari_vector_env("pong", **kwargs)
    option = next(iter(key for key in kwargs if key != "num_envs"))
    if option != "seed":
        # What ALE raises for its own check (of frameskip), naming the option.
        assert isinstance(caught.value, gym.error.Error) and caught.value.option == option


def test_every_argument_of_ales_vector_env_has_a_check():
    """A new AtariVectorEnv argument must get a check (else make_atari_vector_env refuses it as unknown)."""
    parameters = set(inspect.signature(AtariVectorEnv.__init__).parameters) - {"self", "game", "num_envs"}
    assert parameters == set(ALE_ARGUMENT_CHECKS) | {"batch_size"}


def test_make_atari_vector_env_takes_numpy_ints():
    envs = torchwm.make_atari_vector_env("pong", np.int64(2), seed=np.int64(3), stack_num=np.int32(2))
    assert envs.reset()[0].shape == (2, 2, 84, 84)
    envs.close()
