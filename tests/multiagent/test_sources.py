"""`torchwm.multiagent.sources`: every form of ``env`` becomes one factory per env; bad input is refused
before any worker starts."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from support.pettingzoo_envs import ScriptedEnv, scripted

import torchwm.multiagent as ma
from torchwm.multiagent.sources import as_parallel, env_sources, probe


def test_an_instance_is_copied_into_each_slot():
    env = ScriptedEnv(end_at=9)
    fns = env_sources(env, 2, {}, "agents")
    first, second = fns[0](), fns[1]()
    assert first is not env and second is not first and isinstance(first, ScriptedEnv)
    with ma.make_vec(env, 2, seed=0) as envs:
        obs, _ = envs.reset()
        np.testing.assert_array_equal(
            obs[:3], [ScriptedEnv().reset(seed=0)[0][a] for a in env.possible_agents]
        )


def test_a_list_of_factories_gives_each_env_its_own():
    with ma.make_vec([scripted(end_at=1), scripted(end_at=5)], 2, seed=0) as envs:
        envs.reset()
        _, _, _, truncations, _ = envs.step(np.zeros(6, np.int64))
        np.testing.assert_array_equal(truncations, [True] * 3 + [False] * 3)


def test_a_module_path_builds_its_parallel_env_with_the_keyword_arguments():
    with ma.make_vec("mpe2.simple_spread_v3", 1, N=2) as envs:
        assert envs.possible_agents == ["agent_0", "agent_1"]


def test_a_parallelizable_aec_env_is_converted():
    from pettingzoo.butterfly import pistonball_v6

    found = probe(env_sources(pistonball_v6.env(n_pistons=3), 1, {}, "agents")[0], "agents")
    assert found.possible_agents == ("piston_0", "piston_1", "piston_2")


def test_a_turn_based_aec_env_is_refused_naming_layout_aec():
    from pettingzoo.classic import tictactoe_v3

    with pytest.raises(ValueError, match='layout="aec"'):
        ma.make_vec(tictactoe_v3.env, 2, backend="shmem")


@pytest.mark.parametrize(
    ("env", "error", "words"),
    [
        (lambda: gym.make("CartPole-v1"), TypeError, "make_vec_from_fns"),
        (42, TypeError, "expects a PettingZoo ParallelEnv or AECEnv"),
        ([scripted()], TypeError, "num_envs=2"),
        ("no_such_module_zz", ValueError, "no importable PettingZoo module"),
        ("numpy", ValueError, "no parallel_env"),
    ],
)
def test_bad_env_arguments_are_refused_saying_what_was_expected(env, error, words):
    with pytest.raises(error, match=words):
        ma.make_vec(env, 2, backend="shmem")


def test_keyword_arguments_without_a_module_path_are_refused():
    with pytest.raises(TypeError, match="module path"):
        ma.make_vec(scripted(), 1, end_at=3)


def test_as_parallel_refuses_what_is_no_pettingzoo_env():
    with pytest.raises(TypeError, match="single-agent Gymnasium envs"):
        as_parallel(lambda: gym.make("CartPole-v1"))
