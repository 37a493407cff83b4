"""torchwm.evaluate: exactly n episodes, each env's quota fixed in advance as SB3's evaluate_policy fixes it,
on every backend and autoreset mode, against SB3's own evaluate_policy."""

import functools
import itertools
import os
import signal
from collections import Counter

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import VectorWrapper
from support.processes import wait_until_ended

import torchwm
from torchwm.evaluation import EvaluationResult

LENGTHS = (5, 10, 15, 20)
PROCESS_OPTIONS = {"num_workers": 2, "context": "fork", "timeout": 60}
MODES = ["next_step", "same_step", "disabled"]


class FixedLengthEnv(gym.Env):
    """Episodes of ``length`` steps; reward 1 + action, so a return tells which actions the policy chose.
    Envs of odd length end by truncation, the others by termination."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, length: int) -> None:
        self.length = length
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.steps += 1
        ended = self.steps >= self.length
        terminated = ended and self.length % 2 == 0
        obs = np.array([self.steps], np.float32)
        return obs, 1.0 + int(action), terminated, ended and not terminated, {}


ENV_FNS = [functools.partial(FixedLengthEnv, length) for length in LENGTHS]


def ones(obs):
    return np.ones(len(obs), dtype=np.int64)


def make(backend, mode, **backend_kwargs):
    options = {**({} if backend == "sync" else PROCESS_OPTIONS), **backend_kwargs}
    return torchwm.make_vec_from_fns(ENV_FNS, backend=backend, autoreset_mode=mode, backend_kwargs=options)


def sb3_episodes(n_episodes):
    """SB3's evaluate_policy on the same envs (a DummyVecEnv), always choosing action 1."""
    sb3_evaluation = pytest.importorskip("stable_baselines3.common.evaluation")
    from stable_baselines3.common.vec_env import DummyVecEnv

    class Ones:
        def predict(self, obs, state=None, episode_start=None, deterministic=False):
            return ones(obs), None

    vec = DummyVecEnv(ENV_FNS)
    returns, lengths = sb3_evaluation.evaluate_policy(
        Ones(), vec, n_eval_episodes=n_episodes, return_episode_rewards=True, warn=False
    )
    vec.close()
    return list(zip(returns, lengths, strict=True))


def assert_quota_episodes(result, n_episodes=10):
    """The episodes SB3 would count: env i runs (n + i) // 4 of them, each of LENGTHS[i] steps."""
    assert isinstance(result, EvaluationResult) and len(result.returns) == n_episodes
    counts = Counter(result.env_ids.tolist())
    assert [counts[i] for i in range(4)] == [(n_episodes + i) // 4 for i in range(4)]
    assert result.lengths.tolist() == [LENGTHS[i] for i in result.env_ids.tolist()]
    assert result.returns.tolist() == [2.0 * LENGTHS[i] for i in result.env_ids.tolist()]
    episodes = list(zip(result.returns.tolist(), result.lengths.tolist(), strict=True))
    assert sorted(episodes) == sorted(sb3_episodes(n_episodes))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_each_env_runs_its_quota_not_the_first_episodes_to_end(backend, mode):
    with make(backend, mode) as envs:
        result = torchwm.evaluate(envs, ones, n_episodes=10)
    # The first 10 episodes to end (same_step) would be 6 of env 0, 2 of env 1 and 1 each of envs 2 and 3.
    assert_quota_episodes(result)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_partial_results_with_batch_size(backend, mode):
    with make(backend, mode, batch_size=2) as envs:
        result = torchwm.evaluate(envs, ones, n_episodes=10)
        # Nothing is left in flight: the env resets and steps as usual afterwards.
        envs.reset()
        envs.send(np.zeros(4, dtype=np.int64))
        seen = envs.recv()[-1]["env_id"].tolist() + envs.recv()[-1]["env_id"].tolist()
        assert sorted(seen) == [0, 1, 2, 3]
    assert_quota_episodes(result)


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_episodes_come_in_the_order_sb3_counts_them(mode):
    """Where the step that ends an episode is followed by a counted step (same_step, and disabled with
    its reset), episodes end at the same steps as in SB3's DummyVecEnv: the same list, in order."""
    with make("sync", mode) as envs:
        result = torchwm.evaluate(envs, ones, n_episodes=10)
    assert list(zip(result.returns.tolist(), result.lengths.tolist(), strict=True)) == sb3_episodes(10)


@pytest.mark.parametrize("mode", MODES)
def test_gymnasium_vector_env(mode):
    envs = gym.vector.SyncVectorEnv(ENV_FNS, autoreset_mode=gym.vector.AutoresetMode[mode.upper()])
    try:
        assert_quota_episodes(torchwm.evaluate(envs, ones, n_episodes=10))
    finally:
        envs.close()


@pytest.mark.parametrize("n_episodes", [1, 3, 7])
def test_fewer_or_uneven_episodes(n_episodes):
    with make("sync", "next_step") as envs:
        assert_quota_episodes(torchwm.evaluate(envs, ones, n_episodes=n_episodes), n_episodes)


def test_seeds_of_the_first_episodes_and_the_summary():
    with make("sync", "next_step") as envs:
        result = torchwm.evaluate(envs, ones, n_episodes=8, seed=7)
        assert envs.np_random_seed == (7, 8, 9, 10)
    first = {}
    for env, seed in zip(result.env_ids.tolist(), result.seeds, strict=True):
        first.setdefault(env, seed)
    assert [first[i] for i in range(4)] == [7, 8, 9, 10]
    assert result.seeds.count(None) == 4  # the second episode of each env: an autoreset, no seed
    expected = [2.0 * length for length in LENGTHS for _ in range(2)]
    assert result.mean == pytest.approx(np.mean(expected)) and result.std == pytest.approx(np.std(expected))
    assert str(result) == (
        f"8 episodes: return {np.mean(expected):.2f} ± {np.std(expected):.2f}, length 12.5 ± 5.6"
    )
    with make("sync", "next_step") as envs:
        assert torchwm.evaluate(envs, ones, n_episodes=4).seeds == (None,) * 4


def killing_worker_0_at_call(envs, call):
    """``ones``, that kills worker 0 (envs 0 and 1, two workers) before it returns the actions of its call
    ``call``, so that the next result of envs 0 and 1 is their worker's restart, as the fault tests kill
    workers."""
    calls = []

    def policy(obs):
        calls.append(len(obs))
        if len(calls) == call:
            pid = envs.worker_pids[0]
            os.kill(pid, signal.SIGKILL)
            wait_until_ended([pid], 30)
        return ones(obs)

    return policy


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_an_episode_cut_by_a_worker_restart_is_not_counted(backend, mode, batch_size):
    """Issue 51 item 7: the episodes of envs 0 and 1, cut at their third step by their worker's restart, are
    not counted (they were counted, of length 3 with the restart's zero-reward row, and envs 0 and 1 then
    ran one episode fewer); each env still runs its whole share, and the result says 2 were cut."""
    options = {"restart_on_crash": True, **({} if batch_size is None else {"batch_size": batch_size})}
    with make(backend, mode, **options) as envs:
        result = torchwm.evaluate(envs, killing_worker_0_at_call(envs, 3), n_episodes=10)
    assert_quota_episodes(result)  # only whole episodes of their envs' lengths, as SB3 counts them
    assert result.cut_episodes == 2
    assert str(result).endswith("(2 more cut by a worker restart, not counted)")


def test_a_restart_before_a_next_step_reset_step_cuts_no_episode():
    """Env 0 (5 steps) ended its first episode at call 5; its worker restarts before the reset step: the
    restart cuts no episode of env 0 (its reset step comes next and is no step of an episode) and env 1's
    (at its sixth step of ten)."""
    with make("shmem", "next_step", restart_on_crash=True) as envs:
        result = torchwm.evaluate(envs, killing_worker_0_at_call(envs, 6), n_episodes=10)
    assert_quota_episodes(result)
    assert result.cut_episodes == 1


def test_no_episode_cut_says_so():
    with make("shmem", "next_step", restart_on_crash=True) as envs:
        result = torchwm.evaluate(envs, ones, n_episodes=4)
    assert result.cut_episodes == 0 and "cut" not in str(result)


def raising_at_call(call):
    calls = []

    def policy(obs):
        calls.append(len(obs))
        if len(calls) == call:
            raise RuntimeError(f"the policy broke at call {call}")
        return ones(obs)

    return policy


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_a_policy_error_leaves_no_env_in_flight(backend):
    """Issue 51 item 10: with batch_size 2 of 4 envs, the envs sent when the policy raises are collected on
    the way out, so the env resets and steps afterwards (it said AlreadyPendingCallError: envs [2, 3] have
    an action in flight); the error that propagates is the policy's."""
    with make(backend, "next_step", batch_size=2) as envs:
        with pytest.raises(RuntimeError, match="the policy broke at call 3"):
            torchwm.evaluate(envs, raising_at_call(3), n_episodes=10)
        obs, _ = envs.reset(seed=0)
        assert obs[:, 0].tolist() == [0.0] * 4
        envs.send(np.zeros(4, dtype=np.int64))
        seen = envs.recv()[-1]["env_id"].tolist() + envs.recv()[-1]["env_id"].tolist()
        assert sorted(seen) == [0, 1, 2, 3]
        # And the next evaluation counts as a first one does.
        assert_quota_episodes(torchwm.evaluate(envs, ones, n_episodes=10))


def replayed_length(seed):
    """The length of CartPole's episode from ``reset(seed=seed)`` under action 0, on Gymnasium's own env."""
    env = gym.make("CartPole-v1")
    env.reset(seed=seed)
    for length in itertools.count(1):
        _, _, terminated, truncated, _ = env.step(0)
        if terminated or truncated:
            env.close()
            return length
    raise AssertionError("unreachable")


@pytest.mark.parametrize("batch_size", [None, 1])
@pytest.mark.parametrize("mode", MODES)
def test_every_episode_has_its_seed_under_autoreset_seeds(mode, batch_size):
    """Issue 51 item 11: with ``autoreset_seeds=True`` every episode reports its seed, and the result gives
    each (it gave ``(4, 3, None, None, None, None)``): Gymnasium's ``seed + i`` for the first episode of env
    ``i``, then ``episode_seed(seed, i, k)``; Gymnasium's CartPole reset with it replays the episode."""
    from torchwm.vector.episode_seeds import episode_seed

    options = {"num_workers": 2, "context": "fork"} | ({} if batch_size is None else {"batch_size": 1})
    with torchwm.make_vec(
        "CartPole-v1", 2, backend="shmem", autoreset_seeds=True, autoreset_mode=mode, backend_kwargs=options
    ) as envs:
        result = torchwm.evaluate(envs, lambda obs: np.zeros(len(obs), dtype=np.int64), n_episodes=6, seed=3)
    assert len(result.seeds) == 6 and None not in result.seeds
    for i in range(2):
        seeds = [seed for seed, env in zip(result.seeds, result.env_ids.tolist(), strict=True) if env == i]
        assert seeds == [3 + i, episode_seed(3, i, 0), episode_seed(3, i, 1)]
    assert result.lengths.tolist() == [replayed_length(seed) for seed in result.seeds]


def test_deterministic_is_passed_to_the_policy():
    calls = []

    def policy(obs, deterministic=False):
        calls.append(deterministic)
        return np.full(len(obs), int(deterministic), dtype=np.int64)

    with make("sync", "same_step") as envs:
        chosen = torchwm.evaluate(envs, policy, n_episodes=4, deterministic=True)
        default = torchwm.evaluate(envs, policy, n_episodes=4)
    assert chosen.returns.tolist() == [2.0 * length for length in LENGTHS]
    assert default.returns.tolist() == [float(length) for length in LENGTHS]
    assert set(calls) == {True, False}


def test_to_torch_envs_and_tensor_actions():
    torch = pytest.importorskip("torch")

    def policy(obs):
        assert isinstance(obs, torch.Tensor)
        return torch.ones(obs.shape[0], dtype=torch.int64)

    envs = torchwm.to_torch(make("sync", "next_step", batch_size=2))
    try:
        result = torchwm.evaluate(envs, policy, n_episodes=10)
    finally:
        envs.close()
    assert_quota_episodes(result)


def test_progress_bar(capsys):
    with make("sync", "next_step") as envs:
        torchwm.evaluate(envs, ones, n_episodes=4, progress=True)
    assert "4/4" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("mode", "batch_size"),
    # batch_size=1: ALE's asynchronous mode, where reset() returns env 0 only and env 1's first result
    # is its reset, no step (ALE refuses it with autoreset_mode 'disabled').
    [("next_step", None), ("same_step", None), ("disabled", None), ("next_step", 1), ("same_step", 1)],
)
def test_ale_native_runs_each_envs_quota(mode, batch_size):
    frames = 40  # 10 agent steps an episode
    with torchwm.make_vec(
        "ALE/Pong-v5",
        2,
        backend="ale-native",
        seed=0,
        autoreset_mode=mode,
        max_num_frames_per_episode=frames,
        backend_kwargs={"batch_size": batch_size},
    ) as envs:
        result = torchwm.evaluate(envs, lambda obs: np.zeros(len(obs), dtype=np.int64), n_episodes=3)
    assert sorted(result.env_ids.tolist()) == [0, 1, 1]
    assert result.lengths.tolist() == [frames // 4] * 3


class Recording(VectorWrapper):
    """Records the resets and steps that reach the env."""

    def __init__(self, env):
        super().__init__(env)
        self.calls = []

    def reset(self, **kwargs):
        self.calls.append("reset")
        return self.env.reset(**kwargs)

    def step(self, actions):
        self.calls.append("step")
        return self.env.step(actions)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"n_episodes": 0}, ValueError, "n_episodes must be an int >= 1, got 0"),
        ({"n_episodes": 2.0}, TypeError, "n_episodes must be an int >= 1, got 2.0"),
        ({"n_episodes": True}, TypeError, "n_episodes must be an int >= 1, got True"),
        ({"policy": "ones"}, TypeError, "policy must be callable"),
        ({"deterministic": True}, TypeError, "takes no keyword 'deterministic'"),
        ({"deterministic": 1}, TypeError, "deterministic must be True, False or None"),
        ({"seed": -1}, ValueError, "seed"),
        ({"progress": "yes"}, TypeError, "progress must be True or False"),
    ],
)
def test_bad_input_is_refused_before_any_reset(kwargs, error, words):
    envs = Recording(gym.vector.SyncVectorEnv(ENV_FNS))
    arguments = {"policy": ones, "n_episodes": 4, **kwargs}
    with pytest.raises(error, match=words):
        torchwm.evaluate(envs, arguments.pop("policy"), arguments.pop("n_episodes"), **arguments)
    assert envs.calls == []
    envs.close()


def test_a_single_env_or_an_sb3_model_gets_a_hint():
    env = FixedLengthEnv(5)
    with pytest.raises(TypeError, match=r"envs must be a vector env .* got FixedLengthEnv; .*make_vec"):
        torchwm.evaluate(env, ones, 3)

    class Model:
        def predict(self, obs, deterministic=False):
            return ones(obs), None

    with make("sync", "next_step") as envs:
        with pytest.raises(TypeError, match=r"model.predict\(obs, deterministic=True\)\[0\]"):
            torchwm.evaluate(envs, Model(), 3)
        with pytest.raises(TypeError, match=r"predict returns \(actions, states\)"):
            torchwm.evaluate(envs, Model().predict, 3)


def test_evaluate_is_a_plain_function_of_the_evaluation_module():
    """No callable module: ``torchwm.evaluate`` is the function, whichever way it is imported."""
    import inspect

    from torchwm import evaluate
    from torchwm.evaluation import evaluate as evaluate_of_module

    assert inspect.isfunction(evaluate) and evaluate is evaluate_of_module is torchwm.evaluate
    assert evaluate.__module__ == "torchwm.evaluation"


def _agent_episodes_by_hand(num_envs, n_episodes, seed):
    """Each PettingZoo env's episodes, stepped by hand with agent k playing action k: per env, a list of
    (per-agent returns, length) for its quota of episodes."""
    from torchwm.testing.multiagent_envs import CountdownAgentsEnv

    out = []
    for i in range(num_envs):
        env, episodes = CountdownAgentsEnv(), []
        env.reset(seed=seed + i)
        for _ in range((n_episodes + i) // num_envs):
            returns, length = np.zeros(3), 0
            while env.agents:
                _, rewards, *_ = env.step({a: k for k, a in enumerate(env.possible_agents)})
                returns += [rewards[a] for a in env.possible_agents]
                length += 1
            episodes.append((returns.tolist(), length))
            env.reset()
        out.append(episodes)
    return out


@pytest.mark.parametrize(("backend", "batch_size"), [("sync", None), ("shmem", None), ("shmem", 1)])
@pytest.mark.parametrize("mode", MODES)
def test_the_agents_layout_counts_envs_episodes_with_each_agents_return(backend, batch_size, mode):
    import torchwm.multiagent as ma
    from torchwm.testing.multiagent_envs import countdown_agents

    options = None if backend == "sync" else {"num_workers": 2, "batch_size": batch_size}
    with ma.make_vec(
        [countdown_agents()] * 2, 2, backend=backend, autoreset_mode=mode, backend_kwargs=options
    ) as envs:
        result = torchwm.evaluate(envs, lambda obs: obs[:, 0].astype(np.int64), n_episodes=5, seed=7)
        possible_agents = envs.possible_agents
    want = _agent_episodes_by_hand(2, 5, seed=7)
    assert len(result) == 5 and result.agent_returns.shape == (5, len(possible_agents))
    assert Counter(result.env_ids.tolist()) == {0: 2, 1: 3}  # PettingZoo envs' quotas, as SB3's
    np.testing.assert_array_equal(result.returns, result.agent_returns.sum(axis=1))
    for i in range(2):
        mine = np.flatnonzero(result.env_ids == i)
        got = [(result.agent_returns[e].tolist(), int(result.lengths[e])) for e in mine]
        assert got == want[i], f"env {i}: {got} != {want[i]}"
    assert result.seeds[int(np.flatnonzero(result.env_ids == 1)[0])] == 8


def test_single_agent_results_have_no_agent_returns():
    with torchwm.make_vec("CartPole-v1", 2, seed=0) as envs:
        result = torchwm.evaluate(envs, lambda obs: np.zeros(len(obs), dtype=np.int64), n_episodes=2)
    assert result.agent_returns is None


def test_the_parallel_layout_is_refused_naming_the_agents_layout():
    import torchwm.multiagent as ma
    from torchwm.testing.multiagent_envs import countdown_agents

    with ma.make_vec([countdown_agents()], 1, layout="parallel") as envs:
        with pytest.raises(TypeError, match='layout="agents"'):
            torchwm.evaluate(envs, lambda obs: obs, n_episodes=1)
