"""VecSpec: every default explicit, plain data (pickle, dict round trip), readable repr."""

import pickle

import pytest

import torchwm
from torchwm.factory import resolve_spec
from torchwm.spec import VecSpec


def test_default_atari_stack_is_explicit():
    spec = resolve_spec("ALE/Pong-v5", 4, seed=3)
    assert spec.family == "atari"
    assert spec.env_kwargs["frameskip"] == 1
    assert spec.env_kwargs["repeat_action_probability"] == 0.25
    assert [w.name for w in spec.wrappers] == ["atari_preprocessing", "frame_stack"]
    assert spec.wrappers[0].kwargs == {
        "noop_max": 30,
        "frame_skip": 4,
        "screen_size": 84,
        "grayscale": True,
        "terminal_on_life_loss": False,
        "scale_obs": False,
        "grayscale_newaxis": False,
    }
    assert spec.wrappers[1].kwargs == {"stack_size": 4, "padding": "zero"}
    assert spec.autoreset_mode == "next_step" and spec.seed == 3


def test_v4_ids_get_their_own_sticky_probability():
    assert resolve_spec("PongNoFrameskip-v4").env_kwargs["repeat_action_probability"] == 0.0


def test_empty_stack_keeps_the_ids_frameskip():
    spec = resolve_spec("ALE/Pong-v5", wrappers=[])
    assert spec.wrappers == () and spec.env_kwargs["frameskip"] == 4


def test_repr_shows_every_resolved_default():
    text = repr(resolve_spec("pong", 2, backend="sync"))
    for part in (
        "'ALE/Pong-v5'",
        "repeat_action_probability': 0.25",
        "noop_max=30",
        "stack_size=4",
        "autoreset_mode='next_step'",
        "backend='sync'",
    ):
        assert part in text, part


def test_dict_round_trip_and_pickle():
    spec = resolve_spec(
        "pong", 2, wrappers=["atari_preprocessing", {"name": "frame_stack", "stack_size": 2}], seed=1
    )
    data = spec.to_dict()
    assert data["versions"]["gymnasium"]
    assert VecSpec.from_dict(data) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_vec_spec_is_the_vector_envs_spec():
    with torchwm.make_vec("CartPole-v1", 2, seed=0) as envs:
        assert envs.spec == resolve_spec("CartPole-v1", 2, seed=0)


def test_callable_wrappers_cannot_be_written_as_data():
    spec = resolve_spec("CartPole-v1", wrappers=[lambda env: env])
    with pytest.raises(ValueError, match="callables"):
        spec.to_dict()


def test_from_dict_refuses_unknown_keys():
    data = resolve_spec("CartPole-v1").to_dict()
    data["num_env"] = 3
    with pytest.raises(ValueError, match="num_env"):
        VecSpec.from_dict(data)


def test_autoreset_mode_accepts_gymnasium_spellings():
    from gymnasium.vector import AutoresetMode

    assert resolve_spec("CartPole-v1", autoreset_mode=AutoresetMode.SAME_STEP).autoreset_mode == "same_step"
    assert resolve_spec("CartPole-v1", autoreset_mode="Disabled").autoreset_mode == "disabled"
