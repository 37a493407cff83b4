"""What of a spec ALE's own vector env runs (`torchwm.vector.ale_native_spec`): the mapping of a `VecSpec`
and its wrapper stack onto `ale_py.vector_env.AtariVectorEnv`'s arguments, every one of them given."""

from __future__ import annotations

import inspect

import ale_py
import gymnasium as gym
from ale_py.vector_env import AtariVectorEnv
from support.ale import kwargs_of

from torchwm.vector.ale_native_spec import NO_FRAME_LIMIT

gym.register_envs(ale_py)


DEFAULT_STACK_OFF = {
    "episodic_life": False,
    "life_loss_info": False,
    "reward_clipping": False,
    "use_fire_reset": False,
}


def test_default_stack_maps_every_argument_explicitly():
    kwargs = kwargs_of("ALE/Pong-v5", 8)
    expected = {
        "game": "pong",
        "num_envs": 8,
        "frameskip": 4,
        "maxpool": True,
        "img_height": 84,
        "img_width": 84,
        "grayscale": True,
        "stack_num": 4,
        "noop_max": 30,
        "repeat_action_probability": 0.25,
        "full_action_space": False,
        "max_num_frames_per_episode": 108000,
        "continuous": False,
        "batch_size": 0,
        "num_threads": 0,
        "thread_affinity_offset": -1,
        "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP,
        **DEFAULT_STACK_OFF,
    }
    assert {k: kwargs[k] for k in expected} == expected
    # Every AtariVectorEnv argument is given, so none of ALE's own defaults applies.

    params = set(inspect.signature(AtariVectorEnv.__init__).parameters) - {"self"}
    assert params == set(kwargs)


def test_v4_id_has_no_sticky_actions():
    assert kwargs_of("PongNoFrameskip-v4")["repeat_action_probability"] == 0.0


def test_stack_with_episodic_life_fire_reset_clip_reward():
    stack = [
        {
            "name": "atari_preprocessing",
            "noop_max": 7,
            "frame_skip": 3,
            "screen_size": 64,
            "grayscale": False,
        },
        "episodic_life",
        "fire_reset",
        "clip_reward",
        {"name": "frame_stack", "stack_size": 2},
    ]
    kwargs = kwargs_of(
        "ALE/Breakout-v5",
        wrappers=stack,
        repeat_action_probability=0.1,
        full_action_space=True,
        max_num_frames_per_episode=500,
        autoreset_mode="same_step",
        backend_kwargs={"num_threads": 1},
    )
    expected = {
        "game": "breakout",
        "noop_max": 7,
        "frameskip": 3,
        "img_height": 64,
        "img_width": 64,
        "grayscale": False,
        "stack_num": 2,
        "life_loss_info": True,
        "episodic_life": False,
        "use_fire_reset": True,
        "reward_clipping": True,
        "repeat_action_probability": 0.1,
        "full_action_space": True,
        "max_num_frames_per_episode": 500,
        "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP,
    }
    assert {k: kwargs[k] for k in expected} == expected


def test_terminal_on_life_loss_is_ales_episodic_life_and_no_frame_stack_is_one_frame():
    kwargs = kwargs_of(
        "ALE/Breakout-v5",
        wrappers=[{"name": "atari_preprocessing", "terminal_on_life_loss": True, "frame_skip": 1}],
    )
    assert (kwargs["episodic_life"], kwargs["life_loss_info"], kwargs["stack_num"], kwargs["maxpool"]) == (
        True,
        False,
        1,
        False,
    )


def test_frame_limit_comes_from_the_id_or_is_lifted():
    assert (
        kwargs_of("ALE/Pong-v5", max_num_frames_per_episode=None)["max_num_frames_per_episode"]
        == NO_FRAME_LIMIT
    )


def test_disabled_autoreset_is_kept_in_python():
    assert (
        kwargs_of("ALE/Pong-v5", autoreset_mode="disabled")["autoreset_mode"]
        == gym.vector.AutoresetMode.NEXT_STEP
    )
