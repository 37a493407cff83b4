"""The ``subproc`` backend (`torchwm.vector.subproc`): a worker pool over pipes, which runs spaces shared
memory cannot hold (no fixed shape) with ``sync``'s values, and lists its options as `torchwm list` shows
them. Its wire is tests/vector/transports/test_pipe.py's."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.errors import UnsupportedStackError


class WordEnv(gym.Env):
    """A Text observation (no fixed shape): the letters of the step count, from the seed."""

    observation_space = spaces.Text(min_length=1, max_length=8, charset="abcdefgh")
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = int(self.np_random.integers(0, 4))
        return self._obs(), {}

    def _obs(self):
        return "abcdefgh"[self.t % 8] * (1 + self.t % 7)

    def step(self, action):
        self.t += 1 + int(action)
        return self._obs(), float(self.t), False, self.t > 12, {}


def test_a_space_without_a_fixed_shape_runs_with_syncs_values():
    options = {"num_workers": 2, "context": "fork", "timeout": 60}
    with (
        torchwm.make_vec_from_fns([WordEnv] * 3, backend="subproc", backend_kwargs=options) as vec,
        torchwm.make_vec_from_fns([WordEnv] * 3, backend="sync") as reference,
    ):
        assert vec.reset(seed=4)[0] == reference.reset(seed=4)[0]
        for k in range(8):
            actions = np.array([k % 2, 1, 0])
            got, expected = vec.step(actions), reference.step(actions)
            assert got[0] == expected[0] and isinstance(got[0], tuple)
            for a, b in zip(got[1:4], expected[1:4], strict=True):
                np.testing.assert_array_equal(a, b)
    # The same envs on shmem are refused, pointing here.
    with pytest.raises(UnsupportedStackError, match="subproc"):
        torchwm.make_vec_from_fns([WordEnv] * 3, backend="shmem", backend_kwargs=options)


def test_its_options_are_the_pools_and_the_start_method():
    from torchwm.listing import list_backends

    listed = next(info for info in list_backends() if info.name == "subproc")
    assert {"num_workers", "envs_per_worker", "batch_size", "timeout", "restart_on_crash", "inline"} <= set(
        listed.options
    )
    assert listed.options["context"] == "forkserver"  # the default start method


def test_a_subproc_env_says_what_it_is():
    with torchwm.make_vec("CartPole-v1", 2, backend="subproc", backend_kwargs={"num_workers": 2}) as vec:
        assert type(vec).__name__ == "SubprocVectorEnv" and vec.num_workers == 2
        assert repr(vec) == "SubprocVectorEnv(CartPole-v1, num_envs=2, num_workers=2, context='forkserver')"
