"""The messages between a pool and its workers (`torchwm.vector.messages`): they travel by pickle unchanged,
a `Call`'s function goes by value, an env's error becomes an `ErrorReply` naming the env and carrying its
exception type, and a share's spaces equal to the first env's are sent once."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from torchwm.env_state import EnvState
from torchwm.vector.messages import (
    Call,
    CloneStates,
    ErrorReply,
    PickledFunction,
    Reset,
    RestoreStates,
    SetAttr,
    Step,
    blame_env,
    describe_share,
    error_reply,
    failing_env,
)


@pytest.mark.parametrize(
    "message",
    [
        Reset([0, 2], [7, None], {"difficulty": 1}),
        Call("get_wrapper_attr", ("spec",), {}, [1]),
        SetAttr("delay", [0.5, 1.0], [0, 1]),
        CloneStates([1, 0]),
        RestoreStates(
            [0], [EnvState((("gymnasium.wrappers.common.TimeLimit", {"_elapsed_steps": 3}),), 1.0)]
        ),
    ],
)
def test_a_command_arrives_as_it_was_sent(message):
    assert pickle.loads(pickle.dumps(message)) == message


def test_a_step_carries_its_actions_rows():
    step = pickle.loads(pickle.dumps(Step([1], np.array([[0.5, -0.5]], np.float32))))
    assert step.local_ids == [1] and step.actions.dtype == np.float32
    np.testing.assert_array_equal(step.actions, [[0.5, -0.5]])


def test_a_calls_function_goes_by_value_closures_included():
    offset = 5
    function = PickledFunction.of(lambda env, x: x + offset)  # no module a worker could import it from
    loaded = pickle.loads(pickle.dumps(function)).load()
    assert loaded(None, 2) == 7


def test_an_envs_error_reply_names_the_env_and_keeps_its_type():
    try:
        raise KeyError("no such key in env 3")
    except KeyError as exc:
        blame_env(exc, 3)
        reply = error_reply(exc)
    assert isinstance(reply, ErrorReply) and reply.env == 3
    assert reply.summary == repr(KeyError("no such key in env 3"))
    assert "KeyError" in reply.traceback and "no such key in env 3" in reply.traceback
    assert pickle.loads(reply.pickled_type) is KeyError


def test_an_error_no_env_raised_names_none():
    exc = ValueError("the worker's own code")
    assert failing_env(exc) is None and error_reply(exc).env is None
    blame_env(exc, 1)
    blame_env(exc, None)  # the last group it passed through raised it outside any env
    assert failing_env(exc) is None


def test_an_exception_that_refuses_attributes_is_still_reported():
    class Sealed(Exception):
        def __setattr__(self, name, value):
            raise AttributeError(name)

    exc = Sealed("sealed")
    blame_env(exc, 2)  # must not raise
    assert failing_env(exc) is None and "sealed" in error_reply(exc).traceback


def test_a_share_sends_spaces_equal_to_the_first_envs_as_that_one_object():
    envs = [gym.make("CartPole-v1") for _ in range(3)]
    envs[2].unwrapped.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)  # another space
    share = describe_share(envs)
    first = envs[0].observation_space
    assert share.observation_spaces[0] is first and share.observation_spaces[1] is first
    assert share.observation_spaces[2] == gym.spaces.Box(-1, 1, (4,), np.float32)
    assert all(space is share.action_spaces[0] for space in share.action_spaces)
    assert share.metadata == envs[0].metadata and share.metadata is not envs[0].metadata
    assert share.render_mode is None
