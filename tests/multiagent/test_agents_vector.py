"""The ``agents`` layout (`AgentsVectorEnv`): rows compared with PettingZoo envs stepped by hand."""

from __future__ import annotations

import numpy as np
import pytest
from support.pettingzoo_envs import reference_rows, scripted

import torchwm.multiagent as ma

BACKENDS = ["sync", "shmem"]
SHMEM = {"num_workers": 1}


def _kwargs(backend):
    return {"backend": backend, "backend_kwargs": SHMEM if backend == "shmem" else None}


def _actions(steps, rows, n=3, seed=0):
    return list(np.random.default_rng(seed).integers(0, n, size=(steps, rows)))


DYING = {"die_at": {"a_1": 2}, "join_at": {"a_2": 1}, "end_at": 4}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("autoreset_mode", ["same_step", "next_step"])
def test_rows_are_the_pettingzoo_envs_stepped_by_hand_with_dead_and_joining_agents(backend, autoreset_mode):
    fns = [scripted(**DYING)] * 2
    actions = _actions(11, 6)
    expected = reference_rows(fns, 7, actions, autoreset=autoreset_mode)
    with ma.make_vec(
        fns, 2, dead_agents="zero", autoreset_mode=autoreset_mode, seed=7, **_kwargs(backend)
    ) as envs:
        assert envs.num_envs == 6 and envs.num_vector_envs == 2 and envs.num_agents_per_env == 3
        assert envs.possible_agents == ["a_0", "a_1", "a_2"]
        obs, infos = envs.reset()
        np.testing.assert_array_equal(obs, expected[0]["obs"])
        np.testing.assert_array_equal(infos["agent_mask"], expected[0]["agent_mask"])
        ended_seen = 0
        for step, want in zip(actions, expected[1:]):
            obs, rewards, terminations, truncations, infos = envs.step(step)
            assert rewards.dtype == np.float32 and terminations.dtype == np.bool_
            np.testing.assert_array_equal(obs, want["obs"])
            np.testing.assert_array_equal(rewards, want["reward"])
            np.testing.assert_array_equal(terminations, want["terminated"])
            np.testing.assert_array_equal(truncations, want["truncated"])
            np.testing.assert_array_equal(infos["agent_mask"], want["agent_mask"])
            steps = [info.get("step", 0) for info in want["infos"]]
            np.testing.assert_array_equal(infos.get("step", np.zeros(6, int)), steps)
            for e, final in enumerate(want["final_obs"]):
                if final is not None:
                    ended_seen += 1
                    assert infos["_final_obs"][e * 3 : e * 3 + 3].all()
                    np.testing.assert_array_equal(np.stack(infos["final_obs"][e * 3 : e * 3 + 3]), final)
                    assert infos["final_info"]["step"][e * 3] == final_step(want, e)
            if autoreset_mode == "next_step":
                assert "final_obs" not in infos
        assert ended_seen == (4 if autoreset_mode == "same_step" else 0)


def final_step(want, e):
    return want["final_infos"][e][0]["step"]


def test_a_seeded_run_gives_the_same_arrays_twice_and_on_sync_and_shmem():
    actions = _actions(6, 6)

    def run(backend):
        with ma.make_vec("mpe2.simple_spread_v3", 2, seed=3, max_cycles=4, **_kwargs(backend)) as envs:
            out = [envs.reset()[0]]
            for step in actions:
                obs, rewards, terminations, truncations, _ = envs.step(step % 5)
                out += [obs, rewards, terminations, truncations]
            return out

    first, again, shmem = run("sync"), run("sync"), run("shmem")
    for a, b, c in zip(first, again, shmem):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("backend", BACKENDS)
def test_simple_spread_rows_are_the_env_stepped_by_hand(backend):
    from mpe2 import simple_spread_v3

    actions = _actions(6, 6, n=5)
    by_hand = [simple_spread_v3.parallel_env(max_cycles=4) for _ in range(2)]
    with ma.make_vec("mpe2.simple_spread_v3", 2, seed=5, max_cycles=4, **_kwargs(backend)) as envs:
        obs, _ = envs.reset()
        expected = [env.reset(seed=5 + i)[0] for i, env in enumerate(by_hand)]
        np.testing.assert_array_equal(
            obs, np.concatenate([[o[a] for a in envs.possible_agents] for o in expected])
        )
        for step in actions:
            obs, rewards, terminations, truncations, infos = envs.step(step)
            for i, env in enumerate(by_hand):
                rows = slice(3 * i, 3 * i + 3)
                agents = env.possible_agents
                o, r, te, tr, _ = env.step({a: step[3 * i + k] for k, a in enumerate(agents)})
                np.testing.assert_array_equal(rewards[rows], np.float32([r[a] for a in agents]))
                np.testing.assert_array_equal(truncations[rows], [tr[a] for a in agents])
                if any(tr.values()):  # same_step: the last observations are the final ones
                    np.testing.assert_array_equal(np.stack(infos["final_obs"][rows]), [o[a] for a in agents])
                    o, _ = env.reset()
                np.testing.assert_array_equal(obs[rows], [o[a] for a in agents])


def test_pistonball_on_shmem_is_the_env_stepped_by_hand():
    from pettingzoo.butterfly import pistonball_v6

    by_hand = pistonball_v6.parallel_env(n_pistons=3)
    with ma.make_vec(
        "pettingzoo.butterfly.pistonball_v6", 1, seed=2, n_pistons=3, **_kwargs("shmem")
    ) as envs:
        assert envs.single_observation_space == by_hand.observation_space("piston_0")
        obs, _ = envs.reset()
        expected, _ = by_hand.reset(seed=2)
        np.testing.assert_array_equal(obs, [expected[a] for a in by_hand.possible_agents])
        for t in range(3):
            actions = np.full((3, 1), 0.5 - 0.4 * t, np.float32)
            obs, rewards, _, _, _ = envs.step(actions)
            o, r, _, _, _ = by_hand.step({a: actions[k] for k, a in enumerate(by_hand.possible_agents)})
            np.testing.assert_array_equal(obs, [o[a] for a in by_hand.possible_agents])
            np.testing.assert_array_equal(rewards, np.float32([r[a] for a in by_hand.possible_agents]))


def test_subproc_gives_the_arrays_of_sync():
    fns = [scripted(**DYING)] * 2
    actions = _actions(6, 6)
    expected = reference_rows(fns, 1, actions)
    with ma.make_vec(fns, 2, backend="subproc", dead_agents="zero", seed=1) as envs:
        obs, _ = envs.reset()
        np.testing.assert_array_equal(obs, expected[0]["obs"])
        for step, want in zip(actions, expected[1:]):
            obs, rewards, terminations, _, _ = envs.step(step)
            np.testing.assert_array_equal(obs, want["obs"])
            np.testing.assert_array_equal(rewards, want["reward"])
            np.testing.assert_array_equal(terminations, want["terminated"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_action_masks_are_the_envs_masks(backend):
    fns = [scripted(masked=True, end_at=3, action_n=[3, 4, 3], obs_sizes=[4, 4, 4])] * 2
    with ma.make_vec(fns, 2, seed=0, pad_spaces=True, **_kwargs(backend)) as envs:
        by_hand = [fn() for fn in fns]
        obs, infos = envs.reset()
        observed = [env.reset(seed=i)[0] for i, env in enumerate(by_hand)]
        assert infos["action_mask"].dtype == np.int8 and infos["_action_mask"].all()
        for _ in range(4):
            want = np.zeros((6, 4), np.int8)
            for i, o in enumerate(observed):
                for k, agent in enumerate(by_hand[i].possible_agents):
                    mask = o[agent]["action_mask"]
                    want[3 * i + k, : mask.size] = mask
            np.testing.assert_array_equal(infos["action_mask"], want)
            obs, _, terminations, truncations, infos = envs.step(np.zeros(6, np.int64))
            observed = []
            for env in by_hand:
                o, _, te, tr, _ = env.step(dict.fromkeys(env.agents, 0))
                observed.append(env.reset()[0] if not env.agents else o)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pad_spaces_pads_observations_and_actions_as_supersuit(backend):
    fns = [scripted(obs_sizes=[4, 6, 5], action_n=[2, 3, 4], end_at=3)] * 2
    actions = _actions(5, 6, n=4)
    expected = reference_rows(fns, 4, actions, pad_to=6, pad_actions=[2, 3, 4])
    with ma.make_vec(fns, 2, seed=4, pad_spaces=True, **_kwargs(backend)) as envs:
        assert envs.single_observation_space.shape == (6,)
        assert envs.single_action_space.n == 4
        obs, infos = envs.reset()
        np.testing.assert_array_equal(obs, expected[0]["obs"])
        # The padded actions of each agent are masked: a_0 has 2 actions, a_1 3, a_2 4.
        np.testing.assert_array_equal(infos["action_mask"][:3], [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]])
        for step, want in zip(actions, expected[1:]):
            obs, rewards, *_ = envs.step(step)
            np.testing.assert_array_equal(obs, want["obs"])
            np.testing.assert_array_equal(rewards, want["reward"])


def test_pad_spaces_gives_supersuits_padded_observations_and_bounds():
    import supersuit

    fn = scripted(obs_sizes=[4, 6, 5], action_n=[2, 3, 4])
    padded = supersuit.pad_observations_v0(fn())
    with ma.make_vec(fn, 1, seed=9, pad_spaces=True) as envs:
        assert envs.single_observation_space == padded.observation_space("a_0")
        obs, _ = envs.reset()
        theirs, _ = padded.reset(seed=9)
        np.testing.assert_array_equal(obs, [theirs[a] for a in padded.possible_agents])


def test_agents_of_differing_spaces_are_refused_naming_pad_spaces():
    with pytest.raises(AssertionError, match="pad_spaces=True"):
        ma.make_vec(scripted(obs_sizes=[4, 6, 5]), 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_agent_that_dies_under_dead_agents_error_raises_naming_zero(backend):
    with ma.make_vec(scripted(die_at={"a_1": 2}), 1, seed=0, **_kwargs(backend)) as envs:
        envs.reset()
        envs.step(np.zeros(3, np.int64))
        with pytest.raises(AssertionError, match='dead_agents="zero"'):
            envs.step(np.zeros(3, np.int64))


def test_info_format_list_gives_one_dict_per_row_with_the_terminal_observation():
    fns = [scripted(end_at=2)] * 2
    actions = _actions(2, 6)
    expected = reference_rows(fns, 0, actions)
    with ma.make_vec(fns, 2, seed=0, info_format="list") as envs:
        _, infos = envs.reset()
        assert isinstance(infos, list) and len(infos) == 6 and infos[0]["agent_mask"] is True
        envs.step(actions[0])
        _, _, _, truncations, infos = envs.step(actions[1])
        assert truncations.all()
        for r, info in enumerate(infos):
            e, k = divmod(r, 3)
            np.testing.assert_array_equal(info["terminal_observation"], expected[2]["final_obs"][e][k])
        assert infos[0]["step"] == 2 and "step" not in infos[1]


def test_disabled_autoreset_resets_the_envs_whose_rows_are_all_in_the_mask():
    fns = [scripted(end_at=2), scripted(end_at=3)]
    with ma.make_vec(fns, 2, seed=0, autoreset_mode="disabled") as envs:
        envs.reset()
        envs.step(np.zeros(6, np.int64))
        obs, _, _, truncations, _ = envs.step(np.zeros(6, np.int64))
        np.testing.assert_array_equal(truncations, [True] * 3 + [False] * 3)
        with pytest.raises(ValueError, match="ended"):
            envs.step(np.zeros(6, np.int64))
        obs, _ = envs.reset(options={"reset_mask": truncations})
        by_hand = scripted(end_at=2)()
        by_hand.reset(seed=0)
        for _ in range(2):
            by_hand.step(dict.fromkeys(by_hand.agents, 0))
        expected, _ = by_hand.reset()
        np.testing.assert_array_equal(obs[:3], [expected[a] for a in by_hand.possible_agents])
        np.testing.assert_array_equal(obs[3:, 1], [2, 2, 2])  # env 1 was not reset: its step count goes on


@pytest.mark.parametrize("backend", BACKENDS)
def test_env_ids_step_every_agent_of_the_envs_named(backend):
    fns = [scripted(end_at=9)] * 3
    with ma.make_vec(fns, 3, seed=0, **_kwargs(backend)) as envs:
        envs.reset()
        obs, rewards, _, _, infos = envs.step(np.array([1, 2, 0, 1, 1, 1]), env_ids=[2, 0])
        np.testing.assert_array_equal(infos["env_id"], [2, 2, 2, 0, 0, 0])
        np.testing.assert_array_equal(obs[:, 1], [1] * 6)  # env 2 and env 0 stepped once
        np.testing.assert_array_equal(rewards, [1 + 1, 2 + 2, 3 + 0, 1 + 1, 2 + 1, 3 + 1])
        obs, _ = envs.reset(env_ids=[1])
        assert obs.shape == (3, 4)


def test_autoreset_seeds_give_each_row_its_envs_episode_seed():
    with ma.make_vec([scripted(end_at=1)] * 2, 2, seed=0, autoreset_seeds=True) as envs:
        _, infos = envs.reset()
        _, _, _, _, stepped = envs.step(np.zeros(6, np.int64))
        seeds = stepped["episode_seed"]
        assert seeds.shape == (6,) and stepped["_episode_seed"].all()
        assert len(set(seeds[:3].tolist())) == 1 and seeds[0] != seeds[3]


@pytest.mark.parametrize(
    ("actions", "error", "words"),
    [
        (np.zeros(5, np.int64), ValueError, r"shape \(6,\)"),
        (np.zeros((6, 1), np.int64), ValueError, r"shape \(6,\)"),
        (np.zeros(6, np.float32), ValueError, "dtype int64"),
    ],
)
def test_actions_of_the_wrong_shape_are_refused_before_any_env_steps(actions, error, words):
    with ma.make_vec([scripted()] * 2, 2, seed=0) as envs:
        envs.reset()
        with pytest.raises(error, match=words):
            envs.step(actions)
        obs, *_ = envs.step(np.zeros(6, np.int64))
        np.testing.assert_array_equal(obs[:, 1], [1] * 6)  # the refused call stepped nothing


def test_clone_and_restore_give_the_same_rows_again():
    with ma.make_vec([scripted(end_at=9)] * 2, 2, seed=0) as envs:
        envs.reset()
        envs.step(np.ones(6, np.int64))
        states = envs.clone_state()
        first = envs.step(np.full(6, 2))
        obs, _ = envs.restore_state(states)
        assert obs.shape == (6, 4)
        again = envs.step(np.full(6, 2))
        for a, b in zip(first[:4], again[:4]):
            np.testing.assert_array_equal(a, b)


def _kaz():
    from pettingzoo.butterfly import knights_archers_zombies_v11

    return knights_archers_zombies_v11.parallel_env(max_zombies=4, max_cycles=8)


# PettingZoo stacks whose whole state a clone holds: MPE's (EzPickle, a pygame font), and
# knights-archers-zombies (pygame sprites and surfaces, agents that die).
STACKS = {
    "simple_spread": ("mpe2.simple_spread_v3", {"max_cycles": 8}),
    "knights_archers_zombies": (_kaz, {"dead_agents": "zero"}),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_restored_pettingzoo_stack_gives_the_same_rows_again(backend, stack):
    # PettingZoo's envs are EzPickle objects: a state must hold the env itself, not its arguments; the
    # episodes end (max_cycles 8) and autoreset from the copied RNG within the plan.
    import pickle

    env, kwargs = STACKS[stack]
    with ma.make_vec(env, 2, seed=4, **_kwargs(backend), **kwargs) as envs:
        envs.reset()
        envs.action_space.seed(9)
        plan = [envs.action_space.sample() for _ in range(12)]
        envs.step(plan[0])
        states = pickle.loads(pickle.dumps(envs.clone_state()))
        first = [tuple(np.copy(x) for x in envs.step(actions)[:4]) for actions in plan]
        assert any(f[2].any() or f[3].any() for f in first)  # an episode ended within the plan
        envs.restore_state(states)
        for t, actions in enumerate(plan):
            for want, got in zip(first[t], envs.step(actions)[:4]):
                np.testing.assert_array_equal(got, want, err_msg=f"step {t} after restore_state")
        # Env 0's state restored into env 1: env 1's rows follow env 0's.
        envs.restore_state([states[0], states[0]])
        for t, actions in enumerate(plan):
            a = envs.num_agents_per_env
            got = envs.step(np.concatenate([actions[:a], actions[:a]]))[0]
            np.testing.assert_array_equal(got[a:], first[t][0][:a], err_msg=f"env 1 at step {t}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_pistonball_cannot_be_cloned_and_says_why(backend):
    # pymunk's pickle leaves out Chipmunk's contact cache: a copy's ball drifts from the first step on.
    with ma.make_vec(
        "pettingzoo.butterfly.pistonball_v6", 1, seed=4, n_pistons=3, **_kwargs(backend)
    ) as envs:
        envs.reset()
        with pytest.raises(TypeError, match="pymunk Space.*contact cache"):
            envs.clone_state()
        obs, *_ = envs.step(np.zeros((3, 1), np.float32))  # nothing broke
        assert obs.shape[0] == 3


@pytest.mark.parametrize("backend", ["shmem", "subproc"])
@pytest.mark.parametrize("autoreset_mode", ["same_step", "next_step"])
def test_a_restarted_worker_announces_each_lost_episode_on_every_agent_row(backend, autoreset_mode):
    # Envs 0-1 on worker 0, 2-3 on worker 1: env 3 crashes its worker during a step of its own; env 2,
    # idle on that worker, announces its lost episode on its next step; envs 0 and 1 go on as on sync.
    import os

    from torchwm.testing.multiagent_envs import arm, countdown_agents

    kwargs = {"seed": 0, "autoreset_mode": autoreset_mode}
    options = {"num_workers": 2, "restart_on_crash": True}
    with (
        ma.make_vec([countdown_agents()] * 4, 4, backend=backend, backend_kwargs=options, **kwargs) as envs,
        ma.make_vec([countdown_agents()] * 4, 4, **kwargs) as ref,
    ):
        envs.reset()
        ref.reset()
        held = envs.step(np.ones(12, np.int64))[0].copy()
        ref.step(np.ones(12, np.int64))
        envs.call(arm, "crash", os.getpid(), env_ids=[3])
        obs, rewards, terminations, truncations, infos = envs.step(np.full(3, 2), env_ids=[3])
        np.testing.assert_array_equal(infos["env_id"], [3, 3, 3])
        np.testing.assert_array_equal(infos["worker_restarted"], [True] * 3)
        np.testing.assert_array_equal(truncations, [True] * 3)
        np.testing.assert_array_equal(terminations, [False] * 3)
        np.testing.assert_array_equal(rewards, [0.0] * 3)  # no step ran: no reward is made up
        np.testing.assert_array_equal(obs[:, 1], obs[0, 1])  # the new episode's first rows (steps left)
        if autoreset_mode == "same_step":
            np.testing.assert_array_equal(np.stack(infos["final_obs"]), held[9:12])  # the rows held
            assert infos["_final_obs"].all()
        else:
            assert "final_obs" not in infos
        want = ref.step(np.full(9, 2), env_ids=[0, 1, 2])
        obs, rewards, terminations, truncations, infos = envs.step(np.full(9, 2), env_ids=[0, 1, 2])
        np.testing.assert_array_equal(infos["worker_restarted"], [False] * 6 + [True] * 3)
        np.testing.assert_array_equal(infos["_worker_restarted"], [False] * 6 + [True] * 3)
        np.testing.assert_array_equal(rewards[6:], [0.0] * 3)
        np.testing.assert_array_equal(truncations[6:], [True] * 3)
        np.testing.assert_array_equal(terminations[6:], [False] * 3)
        for got, expected in zip((obs, rewards, terminations, truncations), want[:4]):
            np.testing.assert_array_equal(got[:6], expected[:6])
        if autoreset_mode == "same_step":
            np.testing.assert_array_equal(np.stack(infos["final_obs"][6:]), held[6:9])


def test_batch_size_returns_whole_envs_whose_rows_are_sync_s():
    # Envs 1 and 3 are slow: the first two envs ready are 0 and 2, all their agents' rows together.
    from torchwm.testing.multiagent_envs import arm, countdown_agents

    options = {"num_workers": 4, "batch_size": 2}
    with (
        ma.make_vec([countdown_agents()] * 4, 4, backend="shmem", backend_kwargs=options, seed=0) as envs,
        ma.make_vec([countdown_agents()] * 4, 4, seed=0) as ref,
    ):
        assert envs.batch_size == 2
        envs.reset()
        ref.reset()
        envs.call(arm, "delay", 0.5, env_ids=[1, 3])
        actions = np.arange(12) % 3
        envs.send(actions)
        obs, rewards, terminations, truncations, infos = envs.recv()
        np.testing.assert_array_equal(infos["env_id"], [0, 0, 0, 2, 2, 2])
        assert envs.in_flight_ids == [1, 3]
        want = ref.step(np.concatenate([actions[0:3], actions[6:9]]), env_ids=[0, 2])
        for got, expected in zip((obs, rewards, terminations, truncations), want[:4]):
            np.testing.assert_array_equal(got, expected)
        # The envs received step again while 1 and 3 are in flight; then 1 and 3 come back.
        envs.send(np.zeros(6, np.int64), env_ids=[2, 0])
        later = [envs.recv(timeout=30), envs.recv(timeout=30)]
        got_ids = sorted(tuple(dict.fromkeys(r[4]["env_id"].tolist())) for r in later)
        assert got_ids == [(1, 3), (2, 0)]
        assert envs.in_flight_ids == []
