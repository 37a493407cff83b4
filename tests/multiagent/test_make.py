"""`torchwm.multiagent.make_vec`: its arguments checked before any worker starts."""

from __future__ import annotations

import pytest
from support.pettingzoo_envs import scripted

import torchwm.multiagent as ma


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"layout": "rows"}, ValueError, "layout must be one of"),
        ({"dead_agents": "drop"}, ValueError, "dead_agents must be one of"),
        ({"pad_spaces": "yes"}, TypeError, "pad_spaces must be True or False"),
        ({"info_format": "dict"}, ValueError, "info_format must be one of"),
        ({"info_format": "list", "layout": "parallel"}, ValueError, 'layout="agents"'),
        ({"group_map": "all_agents"}, ValueError, 'layout="parallel"'),
        ({"autoreset_mode": "sometimes"}, ValueError, "autoreset_mode must be one of"),
        ({"seed": -1}, ValueError, "seed must be an int >= 0"),
        ({"autoreset_seeds": 1}, TypeError, "autoreset_seeds must be True or False"),
        ({"backend_kwargs": [1]}, TypeError, "backend_kwargs must be a dict"),
        ({"backend": 3}, TypeError, "backend must be"),
    ],
)
def test_bad_arguments_are_refused_before_any_env_is_built(kwargs, error, words, monkeypatch):
    built = []
    monkeypatch.setattr("support.pettingzoo_envs.ScriptedEnv.reset", lambda *a, **k: built.append(1))
    with pytest.raises(error, match=words):
        ma.make_vec(scripted(), 2, **kwargs)
    assert built == []


def test_num_envs_must_be_a_positive_int():
    with pytest.raises((TypeError, ValueError), match="num_envs"):
        ma.make_vec(scripted(), 0)


def test_layout_aec_gives_an_aec_vector_env_of_the_module_s_turn_based_envs():
    with ma.make_vec("pettingzoo.classic.tictactoe_v3", 2, layout="aec", seed=0) as envs:
        assert isinstance(envs, ma.AECVectorEnv)
        envs.reset()
        assert envs.num_envs == 2 and envs.possible_agents == ["player_1", "player_2"]
        assert envs.agent_selection == "player_1"
        obs, *_ = envs.last()
        assert obs["observation"].shape == (2, 3, 3, 2)


def test_the_public_names_are_the_layouts_and_make_vec_and_supersuit_s_calls_are_an_integration():
    import torchwm.integrations.supersuit as supersuit

    assert set(ma.__all__) == {
        "make_vec",
        "AgentsVectorEnv",
        "ParallelVectorEnv",
        "AECVectorEnv",
        # a setup as data, and the config files that describe one
        "MultiAgentSpec",
        "load_config",
        "make_vec_from_config",
    }
    assert set(supersuit.__all__) >= {
        "pettingzoo_env_to_vec_env_v1",
        "concat_vec_envs_v1",
        "vectorize_aec_env_v0",
    }
    with ma.make_vec(scripted(), 1) as envs:
        assert isinstance(envs, ma.AgentsVectorEnv)
    with ma.make_vec(scripted(), 1, layout="parallel") as envs:
        assert isinstance(envs, ma.ParallelVectorEnv)
