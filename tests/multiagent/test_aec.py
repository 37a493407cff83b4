"""`torchwm.multiagent.aec`: turn-based PettingZoo envs vectorized with SuperSuit's ``VectorAECEnv`` API.

Every value of ``last()``, ``observe()`` and the per-agent dicts is compared with the same PettingZoo envs
stepped by hand under SuperSuit's rules (`aec_envs.ByHand`), same seeds and same actions, with envs
ending at different times; rows of passing envs get actions that would change the game if used.
"""

from __future__ import annotations

import functools
import os

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3
from pettingzoo.utils.conversions import aec_to_parallel

from multiagent.aec_envs import ByHand, RelayEnv
from torchwm.errors import ClosedEnvironmentError
from torchwm.integrations.supersuit import vectorize_aec_env_v0
from torchwm.multiagent.aec import AECVectorEnv, make_aec_vec

BACKENDS = ["sync", "shmem"]


def assert_same(ours, theirs, what):
    if isinstance(theirs, dict):
        assert isinstance(ours, dict) and ours.keys() == theirs.keys(), what
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{what}[{key!r}]")
    else:
        np.testing.assert_array_equal(ours, theirs, err_msg=what)


def actions_for(rng, envs, obs, passes, done):
    """A legal random move for each env that acts; for the others, a move that would change the game if
    an env made it (an illegal one where the env has a mask, which ends the game)."""
    agent = envs.agent_selection
    n = envs.action_space(agent).n
    actions = rng.integers(0, n, size=envs.num_envs)
    if isinstance(obs, dict):
        for i, mask in enumerate(obs["action_mask"]):
            legal, illegal = np.flatnonzero(mask), np.flatnonzero(mask == 0)
            if (passes[i] or done[i]) and len(illegal):
                actions[i] = illegal[0]
            elif len(legal):
                actions[i] = rng.choice(legal)
    return actions


def compare_runs(env_fn, backend, *, num_envs=4, seed=3, iterations=120, info_format="list", **kwargs):
    """Step ``make_aec_vec`` and `ByHand` together; return how many env episodes ended and passes seen."""
    episode_seed = kwargs.pop("episode_seed", None)
    hand = ByHand(env_fn, num_envs, seed, episode_seed)
    rng = np.random.default_rng(seed)
    ended = passed = 0
    with make_aec_vec(
        [env_fn] * num_envs, backend=backend, seed=seed, info_format=info_format, **kwargs
    ) as envs:
        envs.reset()
        for t, agent in enumerate(envs.agent_iter(iterations)):
            assert agent == hand.agent_selection, f"step {t}"
            ours, theirs = envs.last(), hand.last()
            names = ["obs", "rewards", "agent_terms", "agent_truncs", "env_terms", "env_truncs", "passes"]
            for name, mine, expected in zip(names, ours[:7], theirs[:7], strict=True):
                assert_same(mine, expected, f"step {t} {name}")
            assert ours[1].dtype == np.float32 and ours[2].dtype == bool and ours[6].dtype == bool
            if info_format == "list":
                env_keys = ("episode_seed",)
                infos = [{k: v for k, v in info.items() if k not in env_keys} for info in ours[7]]
                assert infos == [dict(info) for info in theirs[7]], f"step {t} infos"
            for other in envs.possible_agents:
                assert_same(envs.observe(other), hand.observe(other), f"step {t} observe({other})")
            assert_same(envs.rewards, hand.rewards(), f"step {t} rewards")
            ended += int((ours[4] | ours[5]).sum())
            passed += int(ours[6].sum())
            actions = actions_for(rng, envs, ours[0], ours[6], ours[4] | ours[5])
            envs.step(actions)
            hand.step(actions)
    return ended, passed


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("env_fn", [tictactoe_v3.env, connect_four_v3.env], ids=["tictactoe", "connect_four"])
def test_matches_the_envs_stepped_by_hand(env_fn, backend):
    ended, passed = compare_runs(env_fn, backend, iterations=150)
    # Episodes ended at different times, so that some envs passed while others went on.
    assert ended >= 6 and passed > 0


@pytest.mark.parametrize("backend", ["subproc", "ray"])
def test_the_other_backends_that_run_factories(backend):
    ended, passed = compare_runs(tictactoe_v3.env, backend, num_envs=3, iterations=40)
    assert ended >= 2 and passed > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_dead_agents_step_with_none_and_orders_differ(backend):
    # RelayEnv's agents die at random turns: dead steps, agents missing from an env, passes, truncations.
    ended, passed = compare_runs(RelayEnv, backend, num_envs=3, iterations=150, info_format="list")
    assert ended >= 6 and passed > 20


def test_env_terminations_and_truncations_say_how_an_env_ended():
    with make_aec_vec([functools.partial(RelayEnv, max_turns=4)], seed=0) as envs:
        envs.reset()
        flags = []
        for _ in envs.agent_iter(60):
            _, _, _, _, env_terms, env_truncs, _, _ = envs.last()
            flags.append((bool(env_terms[0]), bool(env_truncs[0])))
            envs.step([1])
    # Both endings happen (agents out of lives; turns up with agents alive), never both at once.
    assert (True, False) in flags and (False, True) in flags and (True, True) not in flags


@pytest.mark.parametrize("backend", BACKENDS)
def test_autoreset_seeds_start_each_episode_from_its_reported_seed(backend):
    seed = 11

    def episode_seed(i, k):
        return int(np.random.SeedSequence(seed, spawn_key=(i, k)).generate_state(1)[0])

    # The arrays equal envs reset by hand with the seeds of torchwm's rule ...
    ended, _ = compare_runs(
        RelayEnv,
        backend,
        num_envs=2,
        seed=seed,
        iterations=80,
        autoreset_seeds=True,
        episode_seed=episode_seed,
    )
    assert ended >= 4
    # ... and the infos of the step that resets an env report its seed.
    reported = {0: [], 1: []}
    with make_aec_vec([RelayEnv] * 2, backend=backend, seed=seed, autoreset_seeds=True) as envs:
        envs.reset()
        first = envs.last()[7]
        assert first["episode_seed"].tolist() == [seed, seed + 1] and first["_episode_seed"].all()
        for _ in envs.agent_iter(80):
            envs.step([1, 1])
            infos = envs.last()[7]
            for i in np.flatnonzero(infos.get("_episode_seed", [False, False])):
                reported[int(i)].append(int(infos["episode_seed"][i]))
    for i, seeds in reported.items():
        assert len(seeds) >= 2 and seeds == [episode_seed(i, k) for k in range(len(seeds))]


def test_gymnasium_infos_are_arrays_with_masks_and_the_action_mask():
    with make_aec_vec([RelayEnv] * 2, seed=0) as envs:
        envs.reset()
        infos = envs.last()[7]
        assert infos["lives"].tolist() == [envs.infos["a_0"][0]["lives"], envs.infos["a_0"][1]["lives"]]
        assert infos["_lives"].tolist() == [True, True]
    with make_aec_vec([tictactoe_v3.env] * 2, seed=0) as envs:
        envs.reset()
        envs.step([4, 0])
        obs, *_, infos = envs.last()
        assert infos["action_mask"].dtype == np.int8
        np.testing.assert_array_equal(infos["action_mask"], obs["action_mask"])
        assert infos["action_mask"][:, 4].tolist() == [0, 1] and infos["_action_mask"].all()
    with make_aec_vec([tictactoe_v3.env] * 2, seed=0, info_format="list") as envs:
        envs.reset()
        assert envs.last()[7] == [{}, {}]


@pytest.mark.parametrize("backend", BACKENDS)
def test_agents_with_different_spaces(backend):
    from mpe2 import simple_world_comm_v3

    env_fn = functools.partial(simple_world_comm_v3.env, max_cycles=3)
    ended, _ = compare_runs(env_fn, backend, num_envs=2, iterations=60)
    assert ended >= 2
    with make_aec_vec([env_fn] * 2, backend=backend) as envs:
        assert envs.observation_space("agent_0").shape == (28,)
        assert envs.action_space("leadadversary_0").n == 20


def test_passing_env_rows_are_ignored():
    # Env 0's game ends on player_2's move and it resets while env 1 goes on: from then on they take
    # turns, and the row of the env that passes changes nothing.
    with make_aec_vec([tictactoe_v3.env] * 2, seed=0) as envs:
        envs.reset()
        for move in [(0, 0), (3, 1), (1, 2), (4, 4), (8, 3), (5, 5)]:  # env 0: player_2 takes 3, 4, 5
            envs.step(list(move))
        assert envs.last()[4].tolist() == [True, False]
        envs.step([8, 7])  # env 0 resets (its row is ignored), env 1: player_1 plays 7
        assert envs.agent_selection == "player_2"
        assert envs.last()[6].tolist() == [True, False]
        envs.step([0, 8])  # env 0 passes: its board stays empty
        assert not envs.observe("player_1")["observation"][0].any()
        assert envs.observe("player_1")["observation"][1].sum() == 8  # 4 moves each
        assert envs.agent_selection == "player_1" and not envs.last()[6].any()


def test_bad_input_is_refused_before_anything_changes():
    with pytest.raises(TypeError, match="non-empty list of callables"):
        make_aec_vec(tictactoe_v3.env)
    with pytest.raises(TypeError, match="got 3 at 1"):
        make_aec_vec([tictactoe_v3.env, 3])
    with pytest.raises(ValueError, match=r"info_format must be one of \('gymnasium', 'list'\), got 'dict'"):
        make_aec_vec([tictactoe_v3.env], info_format="dict")
    with pytest.raises(TypeError, match="ParallelEnv .*torchwm.multiagent.make_vec"):
        make_aec_vec([lambda: aec_to_parallel(rps_v2.env())])
    with pytest.raises(TypeError, match="must be a PettingZoo AECEnv, got CartPoleEnv"):
        make_aec_vec([lambda: gym.make("CartPole-v1").unwrapped])
    with pytest.raises(TypeError, match="vectorize_aec_env_v0's aec_env must be a PettingZoo AECEnv"):
        vectorize_aec_env_v0(gym.make("CartPole-v1"), 2)
    with pytest.raises(ValueError, match="num_envs must be an int >= 1, got 0"):
        vectorize_aec_env_v0(tictactoe_v3.env(), 0)
    with pytest.raises(TypeError, match="num_cpus must be an int >= 0, got 1.5"):
        vectorize_aec_env_v0(tictactoe_v3.env(), 2, num_cpus=1.5)
    with make_aec_vec([tictactoe_v3.env] * 2) as envs:
        with pytest.raises(gym.error.ResetNeeded):
            envs.step([0, 0])
        envs.reset(seed=0)
        before = envs.observe("player_1")
        with pytest.raises(ValueError, match=r"expected actions of shape \(2,\) .*got shape \(3,\)"):
            envs.step([0, 1, 2])
        assert envs.agent_selection == "player_1"
        assert_same(envs.observe("player_1"), before, "after a refused step")
        with pytest.raises(KeyError, match="unknown agent 'player_3': expected one of possible_agents"):
            envs.observe("player_3")


def test_close_releases_every_worker_and_is_idempotent():
    envs = make_aec_vec([tictactoe_v3.env] * 2, backend="shmem", backend_kwargs={"num_workers": 2})
    envs.reset(seed=0)
    pids = list(envs.vector_env.worker_pids)
    assert len(pids) == 2
    envs.close()
    envs.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for call in (envs.reset, envs.last, lambda: envs.step([0, 0]), lambda: envs.observe("player_1")):
        with pytest.raises(ClosedEnvironmentError):
            call()


def test_vectorize_aec_env_v0_copies_the_instance_onto_supersuits_backends():
    env = tictactoe_v3.env()
    envs = vectorize_aec_env_v0(env, 3)
    assert isinstance(envs, AECVectorEnv) and envs.vector_env.spec.backend == "sync"
    assert envs.info_format == "list" and envs.num_envs == 3
    envs.reset(seed=0)
    envs.step([0, 1, 2])
    # Each env is a copy that moved on its own; the instance given was left as it was.
    hand = ByHand(tictactoe_v3.env, 3, seed=0)
    hand.step([0, 1, 2])
    assert_same(envs.observe("player_2"), hand.observe("player_2"), "copies")
    assert not any(getattr(getattr(env.unwrapped, "board", None), "squares", []))
    envs.close()
    with vectorize_aec_env_v0(tictactoe_v3.env(), 3, num_cpus=2) as envs:
        assert envs.vector_env.spec.backend == "shmem" and len(envs.vector_env.worker_pids) == 2
    with vectorize_aec_env_v0(tictactoe_v3.env(), 2, num_cpus=4) as envs:
        assert len(envs.vector_env.worker_pids) == 2  # one worker per env at most, as SuperSuit's
    with vectorize_aec_env_v0(tictactoe_v3.env(), 2, backend="subproc") as envs:
        assert envs.vector_env.spec.backend == "subproc"


def test_agent_iter_gives_max_iter_agents_and_goes_on_past_episode_ends():
    with make_aec_vec([rps_v2.env] * 2, seed=0) as envs:
        envs.reset()
        agents = []
        for agent in envs.agent_iter(500):  # rps_v2 ends after 100 cycles of two moves
            agents.append(agent)
            envs.step([0, 1])
        assert len(agents) == 500 and agents[:4] == ["player_0", "player_1", "player_0", "player_1"]
