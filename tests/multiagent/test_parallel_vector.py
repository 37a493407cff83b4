"""The ``parallel`` layout (`ParallelVectorEnv`): dicts by agent or group, compared with PettingZoo envs
stepped by hand."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from support.pettingzoo_envs import scripted

import torchwm.multiagent as ma
from torchwm.multiagent.parallel_vector import resolve_group_map

BACKENDS = ["sync", "shmem"]
UNEVEN = {"obs_sizes": [4, 6, 5], "action_n": [2, 3, 4], "end_at": 3}


def _kwargs(backend):
    return {"backend": backend, "backend_kwargs": {"num_workers": 1} if backend == "shmem" else None}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("autoreset_mode", ["same_step", "next_step"])
def test_dicts_by_agent_are_the_envs_stepped_by_hand(backend, autoreset_mode):
    fn = scripted(**UNEVEN)
    rng = np.random.default_rng(0)
    with ma.make_vec(
        [fn] * 2, 2, layout="parallel", seed=3, autoreset_mode=autoreset_mode, **_kwargs(backend)
    ) as envs:
        agents = envs.possible_agents
        assert envs.agents == agents and envs.num_envs == 2
        assert envs.single_observation_space("a_1") == spaces.Box(-1000, 1000, (6,), np.float32)
        assert envs.observation_space("a_1").shape == (2, 6)
        assert envs.single_action_space("a_2") == spaces.Discrete(4)
        by_hand = [fn() for _ in range(2)]
        obs, infos = envs.reset()
        observed = [env.reset(seed=3 + i)[0] for i, env in enumerate(by_hand)]
        pending = [False, False]
        for a in agents:
            np.testing.assert_array_equal(obs[a], [o[a] for o in observed])
        for _ in range(7):
            actions = {a: rng.integers(0, envs.single_action_space(a).n, size=2) for a in agents}
            obs, rewards, terminations, truncations, infos = envs.step(actions)
            for i, env in enumerate(by_hand):
                if pending[i]:  # next_step: this step resets the env
                    o, _ = env.reset()
                    r, tr, pending[i] = {}, {}, False
                else:
                    o, r, _, tr, info = env.step({a: actions[a][i] for a in agents})
                    if not env.agents and autoreset_mode == "same_step":
                        assert infos["_final_obs"][i]
                        for a in agents:
                            np.testing.assert_array_equal(infos["final_obs"][a][i], o[a])
                        assert infos["final_info"]["a_0"]["step"][i] == info["a_0"]["step"]
                        o, _ = env.reset()
                    elif not env.agents:
                        pending[i] = True
                for a in agents:
                    assert rewards[a].dtype == np.float32
                    np.testing.assert_array_equal(obs[a][i], o[a])
                    assert rewards[a][i] == np.float32(r.get(a, 0.0))
                    assert truncations[a][i] == tr.get(a, False)


def test_group_maps_stack_the_agents_of_each_group():
    fn = scripted(num_agents=4, end_at=9)
    actions = {f"a_{k}": np.array([k % 3, (k + 1) % 3]) for k in range(4)}
    with ma.make_vec([fn] * 2, 2, layout="parallel", seed=0) as by_agent:
        by_agent.reset()
        plain = by_agent.step(actions)
    forms = {
        "all_agents": {"agents": ["a_0", "a_1", "a_2", "a_3"]},
        "one_group_per_agent": {f"a_{k}": [f"a_{k}"] for k in range(4)},
        "by_prefix": {"a": ["a_0", "a_1", "a_2", "a_3"]},
        "custom": {"odd": ["a_3", "a_1"], "even": ["a_0", "a_2"]},
    }
    for form, groups in forms.items():
        group_map = groups if form == "custom" else form
        with ma.make_vec([fn] * 2, 2, layout="parallel", seed=0, group_map=group_map) as envs:
            assert envs.group_map == groups and envs.agents == list(groups)
            envs.reset()
            grouped = {g: np.stack([actions[a] for a in members], axis=1) for g, members in groups.items()}
            obs, rewards, terminations, _, infos = envs.step(grouped)
            for g, members in groups.items():
                assert envs.single_observation_space(g).shape == (len(members), 4)
                np.testing.assert_array_equal(obs[g], np.stack([plain[0][a] for a in members], axis=1))
                np.testing.assert_array_equal(rewards[g], np.stack([plain[1][a] for a in members], axis=1))
                np.testing.assert_array_equal(infos["agent_mask"][g], np.ones((2, len(members)), bool))


def test_by_prefix_groups_by_the_name_before_the_last_underscore():
    agents = ["adversary_0", "adversary_1", "agent_0", "red_team_agent_0"]
    assert resolve_group_map("by_prefix", agents) == {
        "adversary": ["adversary_0", "adversary_1"],
        "agent": ["agent_0"],
        "red_team_agent": ["red_team_agent_0"],
    }


@pytest.mark.parametrize(
    ("group_map", "words"),
    [
        ({"x": ["a_0"]}, r"missing \['a_1', 'a_2'\]"),
        ("by_name", "group_map must be"),
        (3, "group_map must be"),
    ],
)
def test_a_bad_group_map_is_refused_before_any_worker_starts(group_map, words):
    with pytest.raises(ValueError, match=words):
        ma.make_vec(scripted(), 1, layout="parallel", group_map=group_map, backend="shmem")


def test_a_group_of_agents_with_differing_spaces_is_refused():
    with pytest.raises(AssertionError, match="group 'agents'"):
        ma.make_vec(scripted(**UNEVEN), 1, layout="parallel", group_map="all_agents")


def test_action_masks_are_given_by_agent():
    fn = scripted(masked=True, action_n=[3, 4, 3])
    with ma.make_vec([fn] * 2, 2, layout="parallel", seed=0) as envs:
        _, infos = envs.reset()
        expected, _ = fn().reset(seed=0)
        for a in envs.possible_agents:
            np.testing.assert_array_equal(
                infos["action_mask"][a][0][: expected[a]["action_mask"].size], expected[a]["action_mask"]
            )
        assert infos["action_mask"]["a_1"].shape == (2, 4)


@pytest.mark.parametrize(
    ("actions", "error", "words"),
    [
        ({"a_0": [0, 0], "a_1": [0, 0]}, KeyError, r"missing \['a_2'\]"),
        ({"a_0": [0, 0], "a_1": [0, 0], "a_2": [0]}, ValueError, r"shape \(2,\)"),
        ([0, 0, 0], KeyError, "a dict"),
    ],
)
def test_bad_actions_are_refused_saying_what_was_expected(actions, error, words):
    with ma.make_vec([scripted()] * 2, 2, layout="parallel", seed=0) as envs:
        envs.reset()
        with pytest.raises(error, match=words):
            envs.step(actions)


def test_an_agent_that_dies_under_dead_agents_error_raises_naming_zero():
    with ma.make_vec(scripted(die_at={"a_0": 1}), 1, layout="parallel", seed=0) as envs:
        envs.reset()
        with pytest.raises(AssertionError, match='dead_agents="zero"'):
            envs.step({a: [0] for a in envs.agents})


@pytest.mark.parametrize("backend", ["sync", "shmem"])
@pytest.mark.parametrize(
    ("name", "env_kwargs"),
    [
        ("mpe2.simple_spread_v3", {"max_cycles": 8}),
        ("pettingzoo.butterfly.knights_archers_zombies_v11", {"max_zombies": 4, "max_cycles": 8}),
    ],
)
def test_a_restored_pettingzoo_stack_gives_the_same_dicts_again(backend, name, env_kwargs):
    kwargs = {"backend_kwargs": {"num_workers": 1}} if backend == "shmem" else {}
    dead = {"dead_agents": "zero"} if "zombies" in name else {}
    with ma.make_vec(
        name, 2, layout="parallel", backend=backend, seed=4, **kwargs, **dead, **env_kwargs
    ) as envs:
        envs.reset()
        rng = np.random.default_rng(9)
        plan = [{a: _sample(envs.action_space(a), rng) for a in envs.agents} for _ in range(12)]
        envs.step(plan[0])
        states = envs.clone_state()
        first = [tuple({a: np.copy(v) for a, v in part.items()} for part in envs.step(p)[:4]) for p in plan]
        obs, _ = envs.restore_state(states)
        assert set(obs) == set(envs.agents)
        for t, actions in enumerate(plan):
            for want, got in zip(first[t], envs.step(actions)[:4]):
                for agent in envs.agents:
                    np.testing.assert_array_equal(got[agent], want[agent], err_msg=f"{agent}, step {t}")


def _sample(space, rng):
    if isinstance(space, spaces.MultiDiscrete):
        return rng.integers(0, space.nvec)
    return rng.uniform(space.low, space.high).astype(space.dtype)


def test_a_restarted_worker_ends_every_agents_episode_truncated_with_no_reward():
    import os

    from torchwm.testing.multiagent_envs import arm, countdown_agents

    options = {"num_workers": 2, "restart_on_crash": True}
    with ma.make_vec(
        [countdown_agents()] * 2, 2, layout="parallel", backend="shmem", backend_kwargs=options, seed=0
    ) as envs:
        envs.reset()
        held, *_ = envs.step({a: np.ones(2, np.int64) for a in envs.agents})
        envs.call(arm, "crash", os.getpid(), env_ids=[1])
        obs, rewards, terminations, truncations, infos = envs.step({a: np.full(2, 2) for a in envs.agents})
        np.testing.assert_array_equal(infos["worker_restarted"], [False, True])
        for k, agent in enumerate(envs.agents):
            assert rewards[agent][1] == 0.0 and truncations[agent][1] and not terminations[agent][1]
            assert rewards[agent][0] == 2 * (k + 1) + 0.5 * 2  # env 0 stepped on: its step 2, action 2
            np.testing.assert_array_equal(infos["final_obs"][agent][1], held[agent][1])
        np.testing.assert_array_equal(infos["_final_obs"], [False, True])


def test_env_ids_step_every_agent_of_the_envs_named_as_sync_does():
    from torchwm.testing.multiagent_envs import countdown_agents

    fns = [countdown_agents()] * 3
    with (
        ma.make_vec(
            fns, 3, layout="parallel", backend="shmem", backend_kwargs={"num_workers": 3}, seed=0
        ) as envs,
        ma.make_vec(fns, 3, layout="parallel", seed=0) as ref,
    ):
        envs.reset()
        ref.reset()
        by_hand = [fn() for fn in fns]
        for i, env in enumerate(by_hand):
            env.reset(seed=i)
        actions = {a: np.array([k, 2]) for k, a in enumerate(envs.agents)}
        envs.send(actions, env_ids=[2, 0])
        assert envs.in_flight_ids == [0, 2]
        obs, rewards, terminations, truncations, infos = envs.recv()
        np.testing.assert_array_equal(infos["env_id"], [2, 0])
        want = ref.step(actions, env_ids=[2, 0])
        for part, expected in zip((obs, rewards, terminations, truncations), want[:4]):
            for agent in envs.agents:
                np.testing.assert_array_equal(part[agent], expected[agent])
        for row, i in enumerate([2, 0]):
            o, r, *_ = by_hand[i].step({a: actions[a][row] for a in envs.agents})
            for agent in envs.agents:
                np.testing.assert_array_equal(obs[agent][row], o[agent])
                assert rewards[agent][row] == np.float32(r[agent])
