"""`EnvGroup.step` writes the observations of all its envs at once, after its loop over the envs (as
Gymnasium's SyncVectorEnv concatenates them after its own): no torchwm call per env on a step, while an
observation that does not fit is still a ValueError naming its env, and the rows hold what an env-by-env
write would have put there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import torchwm
from torchwm.vector.env_group import EnvGroup

TORCHWM = Path(torchwm.__file__).resolve().parent


class CountingEnv(gym.Env):
    """Observations of shape (3,) (``kind`` says how they come: as float32, float64, a list, or of shape (1,)
    after a step); counts its steps; never ends."""

    observation_space = spaces.Box(-10, 10, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int = 0, kind: str = "float32") -> None:
        self.index, self.kind = index, kind
        self.steps = 0

    def _obs(self):
        value = [self.index + 0.1 * self.steps, -self.index, 1.0 / 3.0]
        if self.kind == "list":
            return value
        if self.kind == "wrong-on-step" and self.steps:  # the wrong shape, (1,), once it stepped
            return np.array([self.index], np.float32)
        return np.array(value, np.float64 if self.kind == "float64" else np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        return self._obs(), float(action), False, False, {}


def group_of(envs, first_env=0):
    n = len(envs)
    space = envs[0].observation_space
    return EnvGroup(
        envs,
        AutoresetMode.NEXT_STEP,
        np.full((n, *space.shape), 99, space.dtype),
        np.zeros(n),
        np.zeros(n, bool),
        np.zeros(n, bool),
        first_env=first_env,
    )


def torchwm_calls_in_one_step(num_envs: int) -> int:
    """Python functions of torchwm entered during one steady ``sync`` step of ``num_envs`` envs."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "call" and TORCHWM in Path(frame.f_code.co_filename).parents:
            calls += 1

    with torchwm.make_vec_from_fns([CountingEnv] * num_envs, backend="sync") as vec:
        vec.reset(seed=0)
        actions = np.zeros(num_envs, np.int64)
        vec.step(actions)
        sys.setprofile(profile)
        try:
            vec.step(actions)
        finally:
            sys.setprofile(None)
    return calls


def test_a_sync_step_makes_as_many_torchwm_calls_for_32_envs_as_for_2():
    # A call per env (a shape check, a row write) was as much as a cheap env's own step.
    assert torchwm_calls_in_one_step(32) == torchwm_calls_in_one_step(2)


@pytest.mark.parametrize("kind", ["float32", "float64", "list"])
def test_observations_written_at_once_equal_gymnasiums(kind):
    fns = [lambda i=i: CountingEnv(i, kind) for i in range(4)]
    actions = np.array([1, 0, 1, 1])
    reference = gym.vector.SyncVectorEnv(fns)
    with torchwm.make_vec_from_fns(fns, backend="sync") as vec:
        for envs in (reference, vec):
            envs.reset(seed=0)
        for _ in range(3):
            expected, theirs = reference.step(actions), vec.step(actions)
            np.testing.assert_array_equal(theirs[0], expected[0])
            assert theirs[0].dtype == np.float32
            np.testing.assert_array_equal(theirs[1], expected[1])
    assert theirs[0][2].tolist() == pytest.approx([2.3, -2.0, 1.0 / 3.0])


def test_a_step_of_some_envs_writes_their_rows_only():
    group = group_of([CountingEnv(i) for i in range(4)])
    group.step([3, 1], np.array([1, 0]))
    assert group.observations[:, 0].tolist() == pytest.approx([99, 1.1, 99, 3.1])
    assert group.rewards.tolist() == [0.0, 0.0, 0.0, 1.0]


def test_every_observation_of_the_wrong_shape_is_refused_not_broadcast():
    # All of shape (1,): NumPy would broadcast them into the (3,) rows in one write.
    group = group_of([CountingEnv(i, "wrong-on-step") for i in range(4)], first_env=10)
    with pytest.raises(ValueError, match=r"env 10 returned an observation of shape \(1,\).* shape \(3,\)"):
        group.step([0, 1, 2, 3], np.zeros(4, np.int64))
    assert (group.observations == 99).all()


def test_a_wrong_observation_is_found_after_every_env_stepped_as_in_gymnasium():
    kinds = ["float32", "float32", "wrong-on-step", "float32"]
    group = group_of([CountingEnv(i, kind) for i, kind in enumerate(kinds)])
    with pytest.raises(ValueError, match=r"env 2 returned an observation of shape \(1,\)"):
        group.step([0, 1, 2, 3], np.zeros(4, np.int64))
    reference = gym.vector.SyncVectorEnv([lambda i=i, k=k: CountingEnv(i, k) for i, k in enumerate(kinds)])
    reference.reset(seed=0)
    with pytest.raises(ValueError):
        reference.step(np.zeros(4, np.int64))
    assert [env.steps for env in group.envs] == [1, 1, 1, 1]
    assert [env.unwrapped.steps for env in reference.envs] == [1, 1, 1, 1]


class IntObsEnv(gym.Env):
    """A Discrete observation given as a Python int, as FrozenLake gives it."""

    observation_space = spaces.Discrete(100)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int = 0) -> None:
        self.index = index

    def reset(self, *, seed=None, options=None):
        return self.index, {}

    def step(self, action):
        return self.index * 10 + int(action), 0.0, False, False, {}


def test_python_int_observations_of_a_discrete_space():
    with torchwm.make_vec_from_fns([lambda i=i: IntObsEnv(i) for i in range(3)], backend="sync") as vec:
        vec.reset(seed=0)
        obs = vec.step(np.array([1, 0, 1]))[0]
    assert obs.tolist() == [1, 10, 21]
    assert obs.dtype == np.int64


class ImageEnv(gym.Env):
    """Observations of 64x64x3 bytes (rows written env by env), filled with its index plus its steps; of
    shape (1,) when ``wrong``."""

    observation_space = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = spaces.Discrete(2)

    def __init__(self, index: int = 0, wrong: bool = False) -> None:
        self.index, self.wrong, self.steps = index, wrong, 0

    def reset(self, *, seed=None, options=None):
        return np.full((64, 64, 3), self.index, np.uint8), {}

    def step(self, action):
        self.steps += 1
        shape = (1,) if self.wrong else (64, 64, 3)
        return np.full(shape, self.index + self.steps, np.uint8), 0.0, False, False, {}


def test_large_observations_are_written_env_by_env_with_the_same_checks():
    group = group_of([ImageEnv(i) for i in range(3)])
    group.step([2, 0], np.array([1, 0]))
    assert [int(row.min()) for row in group.observations] == [1, 99, 3]  # row 1 not written
    assert all(int(row.max()) == int(row.min()) for row in group.observations)
    wrong = group_of([ImageEnv(i, wrong=i == 1) for i in range(3)], first_env=4)
    with pytest.raises(ValueError, match=r"env 5 returned an observation of shape \(1,\).* \(64, 64, 3\)"):
        wrong.step([0, 1, 2], np.zeros(3, np.int64))
