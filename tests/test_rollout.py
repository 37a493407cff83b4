"""torchwm.rollout: the one loop of evaluate, run and record, on the whole batch and with batch_size, in each
autoreset mode, each env's rows compared with Gymnasium's SyncVectorEnv; nothing left in flight at the end
or after an error."""

import functools
import time
from collections import defaultdict

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.rollout import Reset, Result, rollout

LENGTHS = (2, 3, 4, 5)
MODES = ["next_step", "same_step", "disabled"]
PROCESS_OPTIONS = {"num_workers": 2, "context": "fork", "timeout": 60}


class CountingEnv(gym.Env):
    """Episodes of ``length`` steps; the observation is the step count since the reset, so each row tells
    which step of which episode it is."""

    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, length):
        self.length = length
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.steps += 1
        return np.array([self.steps], np.float32), 1.0, self.steps >= self.length, False, {}


ENV_FNS = [functools.partial(CountingEnv, length) for length in LENGTHS]


def zeros(obs, env_ids):
    return np.zeros(len(env_ids), dtype=np.int64)


def rows_by_env(envs, steps, act=zeros):
    """Each env's (observation, ended) rows over ``steps`` results of `rollout`, and its resets' env ids."""
    rows = defaultdict(list)
    resets = []
    results = []

    def on_result(result: Result):
        results.append(result.env_ids.tolist())
        ended = np.asarray(result.terminations) | np.asarray(result.truncations)
        for row, env in enumerate(result.env_ids.tolist()):
            rows[env].append((float(result.obs[row, 0]), bool(ended[row])))
        return result.env_ids[ended]

    def on_reset(reset: Reset):
        resets.append((reset.env_ids.tolist(), reset.first))

    rollout(envs, act, on_result, lambda: len(results) >= steps, seed=0, on_reset=on_reset)
    return rows, resets, results


def gymnasium_rows(mode, steps):
    """The same rows from Gymnasium's own SyncVectorEnv, the ended envs reset with reset_mask under
    disabled, as Gymnasium's docs do."""
    envs = gym.vector.SyncVectorEnv(ENV_FNS, autoreset_mode=gym.vector.AutoresetMode[mode.upper()])
    rows = defaultdict(list)
    envs.reset(seed=0)
    for _ in range(steps):
        obs, _, terminations, truncations, _ = envs.step(np.zeros(len(LENGTHS), dtype=np.int64))
        ended = terminations | truncations
        for env in range(len(LENGTHS)):
            rows[env].append((float(obs[env, 0]), bool(ended[env])))
        if mode == "disabled" and ended.any():
            envs.reset(options={"reset_mask": ended})
    envs.close()
    return rows


@pytest.mark.parametrize("mode", MODES)
def test_the_whole_batch_gives_gymnasiums_rows(mode):
    with torchwm.make_vec_from_fns(ENV_FNS, backend="sync", autoreset_mode=mode) as envs:
        rows, resets, results = rows_by_env(envs, 20)
    assert results == [[0, 1, 2, 3]] * 20  # every env, in env order, at every step
    assert dict(rows) == dict(gymnasium_rows(mode, 20))
    # Under disabled the ended envs were reset here (torchwm refuses to step an ended env).
    assert resets[0] == ([0, 1, 2, 3], True)
    assert len(resets) > 1 if mode == "disabled" else len(resets) == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_partial_results_give_each_env_gymnasiums_rows(backend, mode):
    seen = []

    def act(obs, env_ids):
        seen.append((len(obs), len(env_ids)))
        return np.zeros(len(env_ids), dtype=np.int64)

    options = {**PROCESS_OPTIONS, "batch_size": 2}
    with torchwm.make_vec_from_fns(
        ENV_FNS, backend=backend, autoreset_mode=mode, backend_kwargs=options
    ) as envs:
        rows, resets, results = rows_by_env(envs, 40, act)
        assert list(envs.in_flight_ids) == []  # the envs still stepping at the end were collected
    assert all(len(ids) == 2 for ids in results)
    # The policy saw the rows of the envs it acted for, no others: 4 after the first reset, then 2 or fewer
    # (under disabled, the envs going on without those reset).
    assert seen[0] == (4, 4) and all(n_obs == n_ids <= 2 for n_obs, n_ids in seen[1:])
    # Each env's rows are its own, in its order: Gymnasium's rows of that env, as far as it stepped.
    expected = gymnasium_rows(mode, 40)
    assert sorted(rows) == [0, 1, 2, 3]
    for env, got in rows.items():
        assert got == expected[env][: len(got)], env
    assert sum(len(got) for got in rows.values()) == 80
    if mode == "disabled":
        assert all(not first for _, first in resets[1:]) and len(resets) > 1


def raising_at_call(call):
    calls = []

    def act(obs, env_ids):
        calls.append(len(env_ids))
        if len(calls) == call:
            raise RuntimeError(f"the policy broke at call {call}")
        return np.zeros(len(env_ids), dtype=np.int64)

    return act


@pytest.mark.parametrize("batch_size", [None, 2])
def test_an_error_in_the_policy_or_the_caller_leaves_nothing_in_flight(batch_size):
    options = {**PROCESS_OPTIONS, **({} if batch_size is None else {"batch_size": batch_size})}
    with torchwm.make_vec_from_fns(ENV_FNS, backend="shmem", backend_kwargs=options) as envs:
        with pytest.raises(RuntimeError, match="the policy broke at call 3"):
            rollout(envs, raising_at_call(3), lambda result: [], lambda: False)
        assert list(envs.in_flight_ids) == []

        def broken(result):
            raise KeyError("the caller broke")

        with pytest.raises(KeyError, match="the caller broke"):
            rollout(envs, zeros, broken, lambda: False)
        assert list(envs.in_flight_ids) == []
        # The env resets and steps afterwards.
        obs, _ = envs.reset(seed=0)
        assert obs[:, 0].tolist() == [0.0] * 4
        envs.send(np.zeros(4, dtype=np.int64))
        seen = []
        while len(seen) < 4:
            seen += envs.recv()[-1].get("env_id", np.arange(4)).tolist()
        assert sorted(seen) == [0, 1, 2, 3]


def test_the_collection_after_an_error_keeps_to_its_deadline():
    """An env whose results never come: the loop waits at most the env's timeout, then the error that brought
    it there propagates."""

    class NeverReady:
        num_envs = 4
        batch_size = 2
        timeout = 0.3
        metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
        single_observation_space = spaces.Box(0, 1, (1,), np.float32)

        def __init__(self):
            self.recv_timeouts = []

        def reset(self, *, seed=None):
            return np.zeros((4, 1), np.float32), {}

        def send(self, actions, env_ids=None):
            pass

        def recv(self, timeout=None):
            self.recv_timeouts.append(timeout)
            time.sleep(timeout)
            raise TimeoutError("no env ready")

    envs = NeverReady()
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="the policy broke at call 1"):
        rollout(envs, raising_at_call(1), lambda result: [], lambda: False)
    assert time.monotonic() - began < 5
    assert len(envs.recv_timeouts) == 1 and 0 < envs.recv_timeouts[0] <= 0.3


def test_the_first_reset_takes_the_seed_as_gymnasium_does():
    results, resets = [], []

    def on_result(result):
        results.append(result)
        return []

    with torchwm.make_vec("CartPole-v1", 2, wrappers=[]) as envs:
        rollout(envs, zeros, on_result, lambda: len(results) >= 1, seed=7, on_reset=resets.append)
    gym_envs = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    gym_envs.reset(seed=7)
    expected = gym_envs.step(np.zeros(2, dtype=np.int64))[0]
    gym_envs.close()
    np.testing.assert_array_equal(results[0].obs, expected)
    assert [(r.env_ids.tolist(), r.rows.tolist(), r.first) for r in resets] == [([0, 1], [0, 1], True)]
