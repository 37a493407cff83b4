"""An env that returns an observation of the wrong shape, on a step or a reset: a ValueError naming the env
(and the Dict key), as Gymnasium's `SyncVectorEnv` refuses it with that type."""

from __future__ import annotations

import sys

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from fault_envs import PROCESS_BACKENDS
from gymnasium import spaces

import torchwm

# Spawned and forkserver workers cannot import this test module: what they run of it goes by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class WrongShapeEnv(gym.Env):
    """Box(shape=(3,)), but env ``bad`` returns shape (1,) (on reset when ``on_reset``, else on its steps)."""

    observation_space = spaces.Box(-10, 10, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, index=0, bad=2, on_reset=False):
        self.wrong = index == bad
        self.on_reset = on_reset

    def _obs(self, wrong):
        return np.ones(1 if wrong else 3, np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(self.wrong and self.on_reset), {}

    def step(self, action):
        return self._obs(self.wrong), 1.0, False, False, {}


def wrong_shape_envs(backend, on_reset=False):
    import functools

    fns = [functools.partial(WrongShapeEnv, i, 2, on_reset) for i in range(4)]
    options = {} if backend == "sync" else {"num_workers": 2, "timeout": 60}
    return torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs=options)


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
def test_an_observation_of_the_wrong_shape_is_a_value_error_naming_the_env(backend):
    with wrong_shape_envs(backend) as vec:
        vec.reset(seed=0)
        with pytest.raises(ValueError, match=r"env 2 returned an observation of shape \(1,\).* shape \(3,\)"):
            vec.step(np.zeros(4, dtype=np.int64))
    # Gymnasium's SyncVectorEnv refuses it with the same type.
    reference = gym.vector.SyncVectorEnv([lambda i=i: WrongShapeEnv(i) for i in range(4)])
    reference.reset(seed=0)
    with pytest.raises(ValueError):
        reference.step(np.zeros(4, dtype=np.int64))


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
def test_a_reset_observation_of_the_wrong_shape_is_a_value_error_too(backend):
    with wrong_shape_envs(backend, on_reset=True) as vec:
        with pytest.raises(ValueError, match=r"env 2 returned an observation of shape \(1,\)"):
            vec.reset(seed=0)


def test_a_dict_observation_of_the_wrong_shape_names_its_key():
    class DictEnv(WrongShapeEnv):
        observation_space = spaces.Dict({"pos": spaces.Box(-10, 10, (3,), np.float32)})

        def _obs(self, wrong):
            return {"pos": super()._obs(wrong)}

    with torchwm.make_vec_from_fns([lambda i=i: DictEnv(i) for i in range(4)], backend="sync") as vec:
        vec.reset(seed=0)
        with pytest.raises(ValueError, match=r"env 2 returned an observation\['pos'\] of shape \(1,\)"):
            vec.step(np.zeros(4, dtype=np.int64))
