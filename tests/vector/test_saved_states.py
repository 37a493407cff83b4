"""Saving and restoring the envs of a vector env (`torchwm.vector.saved_states`): states of some envs, in
the order of ``env_ids``, put back into any env of the same spec, with the rows `reset` would give; and a
restore given anything but those states refused before any env changes. The states themselves are
tests/test_env_state.py's."""

from __future__ import annotations

import numpy as np
import pytest

import torchwm
from torchwm.env_state import EnvState, clone_env_state
from torchwm.testing import COUNTDOWN_ID

BACKENDS = ["sync", "subproc"]


def make(backend, seed=0):
    options = {} if backend == "sync" else {"num_workers": 2, "context": "fork", "timeout": 60}
    return torchwm.make_vec(COUNTDOWN_ID, 4, backend=backend, seed=seed, backend_kwargs=options)


@pytest.mark.parametrize("backend", BACKENDS)
def test_states_of_some_envs_restore_into_others_in_the_order_of_env_ids(backend):
    with make(backend) as envs, make("sync", seed=100) as other:
        envs.reset()
        other.reset()
        envs.step(np.ones(4, dtype=np.int64))
        states = envs.clone_state(env_ids=[2, 0])
        assert len(states) == 2 and all(isinstance(state, EnvState) for state in states)
        saved, *_ = envs.step(np.zeros(4, dtype=np.int64))  # where envs 2 and 0 go from the saved states
        obs, infos = other.restore_state(states, env_ids=[1, 3])  # env 1 takes env 2's state, env 3 env 0's
        assert infos["env_id"].tolist() == [1, 3]
        stepped, *_ = other.step(np.zeros(4, dtype=np.int64))
        np.testing.assert_array_equal(stepped[[1, 3]], saved[[2, 0]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restore_of_every_env_returns_every_row_as_reset_does(backend):
    with make(backend) as envs:
        first, _ = envs.reset()
        states = envs.clone_state()
        envs.step(np.ones(4, dtype=np.int64))
        obs, infos = envs.restore_state(states)
        np.testing.assert_array_equal(obs, first)
        assert "env_id" not in infos


@pytest.mark.parametrize(
    "states, error, words",
    [
        ("not states", TypeError, "expected a tuple or list of EnvState"),
        ((), ValueError, "expected 2 states, one per env, got 0"),
        ((None, None), TypeError, "expected EnvState values .* got NoneType for env 0"),
    ],
)
def test_a_restore_of_anything_but_those_states_is_refused_and_changes_nothing(states, error, words):
    with make("sync") as envs:
        envs.reset()
        before = envs.call("steps")
        with pytest.raises(error, match=words):
            envs.restore_state(states, env_ids=[0, 1])
        assert envs.call("steps") == before


def test_a_lone_envs_state_is_refused_naming_clone_state():
    with make("sync") as envs:
        envs.reset()
        lone = clone_env_state(envs.envs[0])
        with pytest.raises(
            ValueError, match=r"env 0 has no observation: .*give a state from envs.clone_state\(\)"
        ):
            envs.restore_state([lone], env_ids=[0])
