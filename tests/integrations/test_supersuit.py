"""`torchwm.integrations.supersuit`: SuperSuit's vector calls, compared with SuperSuit 3.11's own objects.

The same PettingZoo env, seeds and actions through SuperSuit's ``pettingzoo_env_to_vec_env_v1`` /
``concat_vec_envs_v1`` and through torchwm's give equal observations, rewards, flags (SuperSuit's uint8,
torchwm's bool) and ``terminal_observation`` infos, across episode ends; the objects expose SuperSuit's
one-agent ``observation_space``/``action_space``; bad input is refused before any env is built.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import supersuit
from mpe2 import simple_spread_v3
from pettingzoo.classic import tictactoe_v3

import torchwm.integrations.supersuit as ma


def spread(**kwargs):
    # 5 cycles: several episode ends (and same-step resets) in a short run.
    return simple_spread_v3.parallel_env(max_cycles=5, **kwargs)


def assert_same_steps(ours, theirs, steps, seed):
    obs, infos = ours.reset(seed=seed)
    expected_obs, expected_infos = theirs.reset(seed=seed)
    assert np.array_equal(obs, expected_obs)
    assert len(infos) == len(expected_infos) == ours.num_envs
    rng = np.random.default_rng(seed)
    ended = 0
    for _ in range(steps):
        actions = [int(a) for a in rng.integers(0, ours.action_space.n, ours.num_envs)]
        obs, rewards, terms, truncs, infos = ours.step(actions)
        expected = theirs.step(actions)
        assert np.array_equal(obs, expected[0])
        assert rewards.dtype == np.float32 and np.array_equal(rewards, expected[1])
        assert terms.dtype == np.bool_ and np.array_equal(terms, expected[2].astype(bool))
        assert np.array_equal(truncs, expected[3].astype(bool))
        for info, expected_info in zip(infos, expected[4], strict=True):
            assert ("terminal_observation" in info) == ("terminal_observation" in expected_info)
            if "terminal_observation" in info:
                ended += 1
                assert np.array_equal(info["terminal_observation"], expected_info["terminal_observation"])
    assert ended > 0  # the comparison went across episode ends


def test_one_env_steps_as_supersuit_s_markov_vector_env():
    ours = ma.pettingzoo_env_to_vec_env_v1(spread())
    theirs = supersuit.pettingzoo_env_to_vec_env_v1(spread())
    assert ours.num_envs == theirs.num_envs == 3
    assert ours.observation_space == theirs.observation_space == ours.single_observation_space
    assert ours.action_space == theirs.action_space == ours.single_action_space
    assert_same_steps(ours, theirs, 12, seed=3)
    ours.close()


@pytest.mark.parametrize("num_cpus", [0, 2])
def test_concatenated_envs_step_as_supersuit_s_concat_vec_env(num_cpus):
    ours = ma.concat_vec_envs_v1(ma.pettingzoo_env_to_vec_env_v1(spread()), 3, num_cpus=num_cpus)
    theirs = supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(spread()), 3)
    assert ours.num_envs == theirs.num_envs == 9
    assert ours.agents_env.inner.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
    assert type(ours.agents_env.inner).__name__ == ("SyncVectorEnv" if num_cpus == 0 else "ShmemVectorEnv")
    assert_same_steps(ours, theirs, 12, seed=5)
    ours.close()


def test_par_env_is_the_env_being_stepped_a_copy_of_the_one_given():
    given = spread()
    env = ma.pettingzoo_env_to_vec_env_v1(given)
    env.reset(seed=0)
    assert env.par_env is not given
    assert env.par_env.agents == env.par_env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    env.close()


def test_env_is_wrapped_looks_through_the_pettingzoo_env_s_wrappers_one_answer_per_row():
    wrapped = supersuit.dtype_v0(spread(), np.float64)
    envs = ma.concat_vec_envs_v1(ma.pettingzoo_env_to_vec_env_v1(wrapped), 2)
    assert envs.env_is_wrapped(type(wrapped)) == [True] * 6
    assert envs.env_is_wrapped(tictactoe_v3.raw_env) == [False] * 6
    envs.close()


def test_render_gives_the_first_env_s_frame():
    envs = ma.concat_vec_envs_v1(ma.pettingzoo_env_to_vec_env_v1(spread(render_mode="rgb_array")), 2)
    envs.reset(seed=0)
    frame = envs.render()
    assert frame.ndim == 3 and frame.shape[2] == 3
    assert np.array_equal(frame, envs.agents_env.render()[0])
    envs.close()


def test_bad_input_is_refused_saying_what_was_expected():
    with pytest.raises(AssertionError, match="takes a PettingZoo ParallelEnv"):
        ma.pettingzoo_env_to_vec_env_v1(tictactoe_v3.env())
    with pytest.raises(TypeError, match="takes the vector env pettingzoo_env_to_vec_env_v1 returns"):
        ma.concat_vec_envs_v1(spread(), 2)
    env = ma.pettingzoo_env_to_vec_env_v1(spread())
    with pytest.raises(ValueError, match="base_class must be one of"):
        ma.concat_vec_envs_v1(env, 2, base_class="stable_baselines")
    with pytest.raises(ValueError, match="num_cpus must be an int >= 0"):
        ma.concat_vec_envs_v1(env, 2, num_cpus=-1)
    with pytest.raises(TypeError, match="num_vec_envs must be an int"):
        ma.concat_vec_envs_v1(env, 2.0)
    with pytest.raises(ValueError, match="expected 3 actions, one per row"):
        env.reset()
        env.step([0, 0])
    env.close()
