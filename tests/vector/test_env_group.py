"""`EnvGroup` names the env that raised: in a step, a reset, a call and a set_attr, the exception that
leaves the group carries the env's local index (`torchwm.vector.messages.failing_env`), which the
`ErrorReply` a worker sends reports. The index travels with the exception, not in its traceback's frames:
it survives a traceback dropped or the exception pickled, and an exception from outside any env names none.
It answers `CloneStates` and `RestoreStates`, checking every state before any env changes.
"""

from __future__ import annotations

import dataclasses
import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from torchwm.env_state import EnvState
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.episode_seeds import SeedStream
from torchwm.vector.messages import (
    Call,
    CloneStates,
    ErrorReply,
    Reset,
    RestoreStates,
    SetAttr,
    error_reply,
    failing_env,
)


class EnvFault(RuntimeError):
    pass


class MaybeFaultyEnv(gym.Env):
    """Raises `EnvFault` in whatever method is named in ``fail_in`` (when ``faulty``); its reward is
    ``bad_reward`` when set."""

    def __init__(self, faulty: bool = False, fail_in: str = "", bad_reward: object = None) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.faulty, self.fail_in, self.bad_reward = faulty, fail_in, bad_reward
        self.setting = 0

    def _maybe_fail(self, where: str) -> None:
        if self.faulty and self.fail_in == where:
            raise EnvFault(f"{where} failed")

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._maybe_fail("reset")
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._maybe_fail("step")
        reward = self.bad_reward if self.faulty and self.bad_reward is not None else 1.0
        return np.zeros(2, np.float32), reward, False, False, {}

    def poke(self) -> int:
        self._maybe_fail("call")
        return 7

    def __setattr__(self, name, value):
        if name == "setting" and hasattr(self, "setting"):  # not the first value, set in __init__
            self._maybe_fail("set_attr")
        super().__setattr__(name, value)


def group_of(envs: list[gym.Env], first_env: int = 0) -> EnvGroup:
    n = len(envs)
    return EnvGroup(
        envs,
        AutoresetMode.NEXT_STEP,
        np.zeros((n, 2), np.float32),
        np.zeros(n),
        np.zeros(n, bool),
        np.zeros(n, bool),
        first_env=first_env,
    )


def group_failing_at(faulty: int, fail_in: str, n: int = 4, **kwargs) -> EnvGroup:
    return group_of([MaybeFaultyEnv(k == faulty, fail_in, **kwargs) for k in range(n)], first_env=10)


def raised_by(run) -> BaseException:
    with pytest.raises(EnvFault) as caught:
        run()
    return caught.value


@pytest.mark.parametrize("faulty", [0, 2, 3])
def test_a_step_names_the_env_that_raised(faulty):
    group = group_failing_at(faulty, "step")
    exc = raised_by(lambda: group.step([0, 1, 2, 3], np.zeros(4, np.int64)))
    # The local index (the pool adds the worker's first env), in the reply the worker sends.
    assert failing_env(exc) == faulty and error_reply(exc).env == faulty
    assert "step failed" in error_reply(exc).traceback


def test_a_partial_step_names_the_env_by_its_own_index_not_its_row():
    group = group_failing_at(1, "step")
    exc = raised_by(lambda: group.step([3, 1], np.zeros(2, np.int64)))
    assert failing_env(exc) == 1


@pytest.mark.parametrize("faulty", [1, 3])
def test_a_reset_names_the_env_that_raised(faulty):
    group = group_failing_at(faulty, "reset")
    exc = raised_by(lambda: group.reset([0, 1, 2, 3], [0, 1, 2, 3], None))
    assert failing_env(exc) == faulty
    reply = group.answer(Reset([0, 1, 2, 3], [None] * 4, None))
    assert reply.env == faulty and "EnvFault('reset failed')" == reply.summary


@pytest.mark.parametrize("faulty", [0, 2])
def test_a_call_names_the_env_that_raised(faulty):
    group = group_failing_at(faulty, "call")
    exc = raised_by(lambda: group.call([0, 1, 2, 3], "poke", (), {}))
    assert failing_env(exc) == faulty
    # A function run where the envs live, and the control command the pool sends.
    exc = raised_by(lambda: group.call([0, 1, 2, 3], lambda env: env.poke(), (), {}))
    assert failing_env(exc) == faulty
    assert group.answer(Call("poke", (), {}, None)).env == faulty


def test_a_set_attr_names_the_env_that_raised():
    group = group_failing_at(2, "set_attr")
    exc = raised_by(lambda: group.set_attr([0, 1, 2, 3], "setting", [1, 2, 3, 4]))
    assert failing_env(exc) == 2
    assert group.answer(SetAttr("setting", [1, 2], [3, 2])).env == 2


def test_a_reward_that_is_no_number_names_the_env_that_returned_it():
    group = group_failing_at(2, "", bad_reward="lots")
    with pytest.raises(ValueError) as caught:
        group.step([0, 1, 2, 3], np.zeros(4, np.int64))
    assert failing_env(caught.value) == 2


def test_the_index_travels_with_the_exception_not_its_frames():
    group = group_failing_at(2, "step")
    exc = raised_by(lambda: group.step([0, 1, 2, 3], np.zeros(4, np.int64)))
    assert failing_env(exc.with_traceback(None)) == 2
    # Pickled (to another process, a Ray driver), it still names the env.
    assert failing_env(pickle.loads(pickle.dumps(exc))) == 2


def test_an_exception_from_no_env_names_none():
    assert failing_env(ValueError("the worker's own")) is None
    assert error_reply(ValueError("the worker's own")).env is None
    group = group_failing_at(1, "step")
    with pytest.raises(EnvFault):
        group.step([0, 1, 2, 3], np.zeros(4, np.int64))
    # The group's own refusal, after an env of it raised: no env is named.
    reply = group.answer(object())  # type: ignore[arg-type]
    assert reply.env is None and "unknown worker command" in reply.summary


def test_the_group_that_answers_names_its_own_env():
    """An env that steps a group of its own: the outer group's index, the one its worker reports."""

    class Nested(MaybeFaultyEnv):
        def __init__(self) -> None:
            super().__init__()
            self.inner = group_failing_at(3, "step")

        def step(self, action):
            self.inner.step([0, 1, 2, 3], np.zeros(4, np.int64))
            return super().step(action)

    outer = group_of([MaybeFaultyEnv(), Nested()])
    exc = raised_by(lambda: outer.step([0, 1], np.zeros(2, np.int64)))
    assert failing_env(exc) == 1


def test_a_group_without_errors_steps_as_before():
    group = group_failing_at(-1, "step")
    group.reset([0, 1, 2, 3], [0, 1, 2, 3], None)
    assert group.step([0, 1, 2, 3], np.zeros(4, np.int64)) == [{}] * 4
    assert group.rewards.tolist() == [1.0] * 4
    assert group.call([1, 2], "poke", (), {}) == [7, 7]


# -- seeded autoresets: the group draws from the stream its Reset brings --------------------------------


class SeedEcho(gym.Env):
    """Reports the seed of each reset in its info and ends every episode after one step."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {"seed_given": seed}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, True, False, {}


def seed_of(root: int, env: int, episode: int) -> int:
    return int(np.random.SeedSequence(root, spawn_key=(env, episode)).generate_state(1)[0])


def echo_group(mode: AutoresetMode, n: int = 2, first_env: int = 0) -> EnvGroup:
    return EnvGroup(
        [SeedEcho() for _ in range(n)],
        mode,
        np.zeros((n, 2), np.float32),
        np.zeros(n),
        np.zeros(n, bool),
        np.zeros(n, bool),
        first_env=first_env,
    )


def test_a_reset_with_streams_draws_from_root_global_index_and_count():
    group = echo_group(AutoresetMode.NEXT_STEP, first_env=5)
    infos = group.answer(Reset([0, 1], [None, 42], None, [SeedStream(7, 3), SeedStream(9, 0)]))
    # env 0 (global 5) draws episode 3 of root 7; env 1 keeps its given seed and reports it
    assert [info["episode_seed"] for info in infos] == [seed_of(7, 5, 3), 42]
    assert [info["seed_given"] for info in infos] == [seed_of(7, 5, 3), 42]


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_autoresets_inside_step_count_on_from_the_reset(mode):
    group = echo_group(mode)
    group.reset([0, 1], [7, 8], None, [SeedStream(7, 0), SeedStream(7, 0)])
    drawn: list[list[int]] = [[], []]
    for _ in range(6):
        for i, info in enumerate(group.step([0, 1], np.zeros(2, np.int64))):
            if "episode_seed" in info:
                drawn[i].append(int(info["episode_seed"]))
    for i in range(2):
        assert drawn[i] == [seed_of(7, i, k) for k in range(len(drawn[i]))] and len(drawn[i]) >= 3


def test_without_streams_nothing_is_drawn_or_reported():
    group = echo_group(AutoresetMode.SAME_STEP)
    group.reset([0, 1], [7, 8], None, [SeedStream(7, 0), SeedStream(7, 0)])
    infos = group.reset([0, 1], [None, None], None)  # seeded autoresets off again for both
    assert [info["seed_given"] for info in infos] == [None, None]
    assert all("episode_seed" not in info for info in infos)
    infos = group.step([0, 1], np.zeros(2, np.int64))
    assert all("episode_seed" not in info and info["seed_given"] is None for info in infos)


def test_a_restored_state_leaves_the_target_envs_stream():
    """An env's seeds are its own: env 0's state restored into env 1 leaves env 1 drawing SeedSequence(7,
    spawn_key=(1, k)) with its own count k (the restore keeps the target env's count)."""
    group = echo_group(AutoresetMode.NEXT_STEP)
    group.reset([0, 1], [7, 8], None, [SeedStream(7, 0), SeedStream(7, 0)])
    one = np.zeros(1, np.int64)
    group.step([1], one)
    assert group.step([1], one)[0]["episode_seed"] == seed_of(7, 1, 0)  # env 1 drew its episode 0
    group.step([0], one)  # env 0's episode ended: its autoreset is pending, in its state
    group.restore_states([1], group.clone_states([0]))
    infos = group.step([0, 1], np.zeros(2, np.int64))
    assert [info["episode_seed"] for info in infos] == [seed_of(7, 0, 0), seed_of(7, 1, 1)]


def cartpole_group() -> EnvGroup:
    envs = [gym.make("CartPole-v1"), gym.make("CartPole-v1")]
    group = EnvGroup(
        envs,
        AutoresetMode.NEXT_STEP,
        np.zeros((2, 4), np.float32),
        np.zeros(2),
        np.zeros(2, bool),
        np.zeros(2, bool),
    )
    group.reset([0, 1], [0, 1], None)
    return group


def test_clone_and_restore_states_are_commands_the_group_answers_in_the_order_of_local_ids():
    group = cartpole_group()
    group.step([0, 1], np.array([0, 1]))
    states = group.answer(CloneStates([1, 0]))
    assert [type(state) for state in states] == [EnvState, EnvState]
    np.testing.assert_array_equal(states[0].observation, group.observations[1])
    np.testing.assert_array_equal(states[1].observation, group.observations[0])
    saved_rows = group.observations.copy()
    group.step([0, 1], np.array([1, 1]))
    group.rewards[:] = 5.0
    # Each env back in its own state: env 0 takes states[1], env 1 states[0].
    assert group.answer(RestoreStates([0, 1], [states[1], states[0]])) == [{}, {}]
    np.testing.assert_array_equal(group.observations, saved_rows)  # the rows, written by the group
    assert group.rewards.tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(np.float32(group.envs[0].unwrapped.state), saved_rows[0])


def test_a_restore_checks_every_state_against_its_env_before_any_env_changes():
    group = cartpole_group()
    states = group.answer(CloneStates([0, 1]))
    group.step([0, 1], np.array([1, 1]))
    rows, physics = group.observations.copy(), group.envs[0].unwrapped.state.copy()
    other = dataclasses.replace(states[1], layers=states[1].layers[1:])  # a layer short: another stack
    reply = group.answer(RestoreStates([0, 1], [states[0], other]))
    assert isinstance(reply, ErrorReply) and reply.env == 1 and "ValueError" in reply.summary
    assert "not of this env's stack" in reply.summary
    np.testing.assert_array_equal(group.observations, rows)
    np.testing.assert_array_equal(group.envs[0].unwrapped.state, physics)  # env 0 was not restored
