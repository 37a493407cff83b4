"""The vector contract every backend shares (`torchwm.vector.base.VectorEnv`), checked on ``sync`` and a pool
backend: a bad argument is refused with the error type Gymnasium's own vector env raises for it, before any
env changes; ``env_ids`` give the rows in their order; a closed env says so."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.errors import ClosedEnvironmentError, NoAsyncCallError

BACKENDS = ["sync", "subproc"]


@pytest.fixture(params=BACKENDS)
def envs(request):
    options = {} if request.param == "sync" else {"num_workers": 2, "context": "fork", "timeout": 60}
    with torchwm.make_vec("CartPole-v1", 3, backend=request.param, backend_kwargs=options) as vec:
        vec.reset(seed=0)
        yield vec


@pytest.fixture
def gymnasium_envs():
    reference = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
    reference.reset(seed=0)
    yield reference
    reference.close()


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda v: v.reset(seed=[1, 2]), ValueError),
        (lambda v: v.reset(options={"reset_mask": np.array([True, False])}), ValueError),
    ],
    ids=["seeds of another length", "a reset mask of another shape"],
)
def test_bad_arguments_get_gymnasiums_error_type_and_change_nothing(envs, gymnasium_envs, call, error):
    with pytest.raises(error):
        call(gymnasium_envs)
    before = envs.call("state")
    with pytest.raises(error):
        call(envs)
    after = envs.call("state")
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    obs, *_ = envs.step(np.ones(3, dtype=np.int64))  # nothing was left half-done
    assert obs.shape == (3, 4)


@pytest.mark.parametrize(
    "env_ids, words",
    [([1, 1], r"env_ids has repeated indices: \[1, 1\]"), ([3], r"env_ids must be in \[0, 2\]")],
)
def test_bad_env_ids_are_a_value_error_saying_what_was_wrong(envs, env_ids, words):
    with pytest.raises(ValueError, match=words):
        envs.step(np.zeros(len(env_ids), dtype=np.int64), env_ids=env_ids)


def test_a_recv_without_a_send_is_gymnasiums_no_async_call_error(envs):
    with pytest.raises(gym.error.NoAsyncCallError, match="call send"):
        envs.recv()
    with pytest.raises(NoAsyncCallError):
        envs.recv()


def test_rows_come_in_the_order_of_env_ids(envs):
    with torchwm.make_vec("CartPole-v1", 3, backend="sync") as reference:
        reference.reset(seed=0)
        expected, *_ = reference.step(np.ones(3, dtype=np.int64))
    obs, rewards, _, _, infos = envs.step(np.ones(2, dtype=np.int64), env_ids=[2, 0])
    np.testing.assert_array_equal(obs, expected[[2, 0]])
    assert infos["env_id"].tolist() == [2, 0] and rewards.tolist() == [1.0, 1.0]


def test_a_closed_env_refuses_every_call_naming_its_id(envs):
    envs.close()
    envs.close()  # a second close is a no-op
    for call in (
        lambda: envs.reset(seed=0),
        lambda: envs.step(np.zeros(3, dtype=np.int64)),
        lambda: envs.call("t"),
    ):
        with pytest.raises(
            gym.error.ClosedEnvironmentError, match=r"\(CartPole-v1\) is closed; make a new one"
        ):
            call()
    with pytest.raises(ClosedEnvironmentError):
        envs.recv()
