"""The Atari stack, read once (`torchwm.wrappers.atari_stack`): what each fast path runs, what the spec says.

A plugin that registers its own factory under one of the stack's names is run, never bypassed: the
fused env falls back to the wrapper chain (which runs the plugin's wrapper) and ale-native refuses.
The resolved spec says whether the fused env is built, so a dumped config rebuilds the same thing.
"""

import gymnasium as gym
import numpy as np
import pytest
import tomllib

import torchwm
from torchwm import plugins
from torchwm.config import dump_config, load_config
from torchwm.errors import UnsupportedStackError
from torchwm.factory import build_env, resolve_spec
from torchwm.vector.ale_native_spec import ale_vector_kwargs
from torchwm.wrappers.atari_fused import FusedAtariEnv
from torchwm.wrappers.atari_stack import PATH_LIMITS, parse_atari_stack, path_refusal

STACK = ["atari_preprocessing", "episodic_life", "fire_reset", "clip_reward", "frame_stack"]


def marked_frame_stack(env: gym.Env, stack_size: int = 4, padding: str = "zero") -> gym.Env:
    """A plugin's frame_stack: the same frames, with a mark that shows it ran."""
    env = gym.wrappers.FrameStackObservation(env, stack_size, padding_type=padding)
    env.marked_by_plugin = True
    return env


@pytest.fixture
def overriding_plugin(fresh_plugins):
    class Plugin:
        @torchwm.hookimpl
        def register_wrappers(self, register):
            register("frame_stack", marked_frame_stack, override=True)

    plugins.register_plugin(Plugin(), name="my-frame-stack")
    yield
    plugins.unregister_plugin("my-frame-stack")


def test_an_overridden_wrapper_is_run_by_the_chain_not_bypassed_by_the_fused_env(overriding_plugin):
    spec = resolve_spec("ALE/Breakout-v5", 2, wrappers=STACK)
    assert spec.fused is False
    env = build_env(spec)
    assert not isinstance(env, FusedAtariEnv)
    assert env.get_wrapper_attr("marked_by_plugin") is True
    with pytest.raises(UnsupportedStackError, match="'frame_stack' is plugin 'my-frame-stack'"):
        parse_atari_stack(spec)


def test_an_overridden_wrapper_is_refused_by_ale_native(overriding_plugin):
    with pytest.raises(UnsupportedStackError, match="'frame_stack' is plugin 'my-frame-stack'.*shmem"):
        ale_vector_kwargs(resolve_spec("ALE/Breakout-v5", 2, wrappers=STACK, backend="ale-native"))


def test_the_resolved_spec_says_whether_the_fused_env_is_built():
    assert resolve_spec("ALE/Pong-v5").fused is True
    assert resolve_spec("ALE/Pong-v5", fused=False).fused is False
    assert resolve_spec("ALE/Pong-v5", wrappers=["atari_preprocessing", "pixels"]).fused is False
    assert resolve_spec("CartPole-v1").fused is False
    assert isinstance(build_env(resolve_spec("ALE/Pong-v5")), FusedAtariEnv)
    assert not isinstance(build_env(resolve_spec("ALE/Pong-v5", fused=False)), FusedAtariEnv)


@pytest.mark.parametrize("fused", [True, False])
def test_a_dumped_config_rebuilds_the_same_env(fused):
    spec = resolve_spec("ALE/Pong-v5", 2, fused=fused, seed=3)
    again = load_config(tomllib.loads(dump_config(spec)))
    assert again == spec
    a, b = build_env(spec), build_env(again)
    assert type(a) is type(b)
    assert np.array_equal(a.reset(seed=1)[0], b.reset(seed=1)[0])


def test_a_spec_that_claims_the_fused_env_for_a_stack_it_cannot_run_is_refused():
    spec = resolve_spec("ALE/Pong-v5", wrappers=["atari_preprocessing", "pixels"]).replace(fused=True)
    with pytest.raises(UnsupportedStackError, match="fused=True.*'pixels' is not one of"):
        build_env(spec)


def test_each_path_states_its_own_limits_in_one_table():
    stack = parse_atari_stack(
        resolve_spec(
            "ALE/Pong-v5",
            wrappers=[
                {"name": "atari_preprocessing", "grayscale": False},
                {"name": "frame_stack", "padding": "reset"},
            ],
        )
    )
    assert path_refusal(stack, "fused") is None
    assert "padding='reset'" in path_refusal(stack, "ale-native")
    assert "grayscale=False" in path_refusal(stack, "envpool")
    assert set(PATH_LIMITS) == {"fused", "ale-native", "envpool"}


def test_a_dumped_config_keeps_a_width_height_screen_size_and_array_clip_bounds():
    spec = resolve_spec(
        "ALE/Pong-v5",
        2,
        wrappers=[
            {"name": "atari_preprocessing", "screen_size": (64, 96)},
            {"name": "clip_reward", "min_reward": np.array([-0.5]), "max_reward": [0.5]},
            "frame_stack",
        ],
    )
    again = load_config(tomllib.loads(dump_config(spec)))
    assert again == spec
    assert again.wrappers[0].kwargs["screen_size"] == (64, 96)
    assert again.wrappers[1].kwargs == {"min_reward": (-0.5,), "max_reward": (0.5,)}
    assert build_env(again).observation_space.shape == (4, 96, 64)


def test_envpool_takes_width_and_height_and_refuses_a_gray_channel_axis():
    from torchwm_envpool.translate import translate

    def plan(**options):
        return translate(
            resolve_spec("ALE/Pong-v5", 2, wrappers=[{"name": "atari_preprocessing", **options}]),
            tasks={"Pong-v5"},
        )

    kwargs = plan(screen_size=(64, 96)).kwargs
    assert (kwargs["img_width"], kwargs["img_height"]) == (64, 96)
    with pytest.raises(UnsupportedStackError, match=r"grayscale_newaxis=True.*shmem"):
        plan(grayscale_newaxis=True)


@pytest.mark.parametrize(
    "error",
    [
        "UnsupportedStackError",
        "WrapperOptionError",
        "InvalidOptionError",
        "InvalidOptionTypeError",
        "DynamicShapeError",
    ],
)
def test_option_errors_are_gymnasium_errors_and_what_they_were(error):
    """Code written against ALE/Gymnasium (``except gymnasium.error.Error``) and against torchwm both catch
    them."""
    from torchwm import errors

    cls = getattr(errors, error)
    assert (
        issubclass(cls, gym.error.Error)
        and issubclass(cls, ValueError)
        and issubclass(cls, errors.TorchwmError)
    )
    assert issubclass(errors.WrapperOptionError, TypeError) and issubclass(
        errors.InvalidOptionTypeError, TypeError
    )


@pytest.mark.parametrize(
    ("wrappers", "env_kwargs", "named"),
    [
        (None, {"frameskip": 0}, "frameskip"),  # ALE's own error: the fused env falls back to the chain
        (None, {"frameskip": 4.0}, "frameskip"),
        ([{"name": "atari_preprocessing", "frame_skip": 4.0}], {}, "frame_skip"),
        ([{"name": "atari_preprocessing", "screen_size": (84, 84, 1)}], {}, "screen_size"),
    ],
)
def test_bad_options_on_the_fused_path_are_gymnasium_errors_naming_the_option(wrappers, env_kwargs, named):
    with pytest.raises(gym.error.Error, match=named):
        torchwm.make_env("ALE/Pong-v5", wrappers=wrappers, **env_kwargs)
    with pytest.raises(gym.error.Error, match=named):
        torchwm.make_vec("ALE/Pong-v5", 2, backend="sync", wrappers=wrappers, **env_kwargs)
