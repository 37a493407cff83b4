"""The built-in wrappers as registered (`torchwm.wrappers`): their names and options with their defaults,
the Atari ones refused on other envs, wrong options refused before anything is built, and every stack
passing Gymnasium's env checker. Each wrapper's own behaviour is in the test file of its module.
"""

from __future__ import annotations

import warnings

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


def test_every_builtin_wrapper_is_registered_with_its_options():
    infos = {info.name: info for info in torchwm.list_wrappers()}
    for name, options in CONTRACT.items():
        assert infos[name].options == options, name
    assert set(infos["resize"].options) == {"width", "height"}
    spec = torchwm.make_vec("ALE/Pong-v5").spec
    assert [w.name for w in spec.wrappers] == ["atari_preprocessing", "frame_stack"]
    assert spec.wrappers[1].kwargs == {"stack_size": 4, "padding": "zero"}
    assert spec.env_kwargs["frameskip"] == 1


@pytest.mark.parametrize("name", ["atari_preprocessing", "episodic_life", "fire_reset"])
def test_atari_wrappers_refuse_other_envs_before_building(name):
    with pytest.raises(
        ValueError, match=rf"wrapper '{name}' works only on atari envs, and 'CartPole-v1' is not one"
    ):
        torchwm.make_vec("CartPole-v1", wrappers=[name])


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
