"""`torchwm.building`: one env of a spec (source then wrappers, the env's index visible to a wrapper while it
is built), the factories of a spec's envs, and the refusals of what is not one new single-agent env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm import building, plugins
from torchwm.factory import resolve_spec
from torchwm.wrappers.env_index import current_env_index


def test_an_env_of_a_spec_is_its_source_then_its_wrappers_as_gymnasium_makes_them():
    spec = resolve_spec("CartPole-v1", num_envs=2, wrappers=[{"name": "frame_stack", "stack_size": 3}])
    env = building.build_env(spec, index=1)
    reference = gym.wrappers.FrameStackObservation(gym.make("CartPole-v1"), 3, padding_type="zero")
    assert env.observation_space == reference.observation_space
    assert np.array_equal(env.reset(seed=4)[0], reference.reset(seed=4)[0])
    fns = building.spec_env_fns(spec)
    assert len(fns) == 2 and all(isinstance(fn(), gym.Wrapper) for fn in fns)


def test_the_index_of_the_env_being_built_is_seen_by_its_wrappers_only_while_it_is_built(fresh_plugins):
    seen = []

    def recording(env):
        seen.append(current_env_index())
        return env

    class Plugin:
        @torchwm.hookimpl
        def register_wrappers(self, register):
            register("recording", recording)

    plugins.register_plugin(Plugin(), name="recording")
    spec = resolve_spec("CartPole-v1", num_envs=3, wrappers=["recording"])
    for index in (2, 0):
        building.build_env(spec, index=index)
    assert seen == [2, 0] and current_env_index() is None


def test_the_recorders_that_end_a_stack_are_taken_off_it():
    spec = resolve_spec("CartPole-v1", wrappers=["frame_stack"])
    assert building.without_recorders(spec) == (spec, ())


class Closing(gym.Env):
    closed = 0
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def close(self):
        Closing.closed += 1


def test_a_failed_factory_closes_the_envs_built_before_it():
    Closing.closed = 0

    def broken():
        raise RuntimeError("cannot build")

    with pytest.raises(RuntimeError, match="cannot build"):
        building.build_envs([Closing, Closing, broken])
    assert Closing.closed == 2


def test_one_env_handed_out_twice_is_refused_as_sb3_refuses_it():
    env = Closing()
    with pytest.raises(ValueError, match=r"returned the same instance .* \(envs 0 and 2 are one env\)"):
        building.build_envs([lambda: env, Closing, lambda: env])


def test_a_vector_env_where_one_env_is_expected_is_refused_naming_its_type():
    vector = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(TypeError, match=r"an env factory returned a vector env \(gymnasium\.vector\.sync"):
        building.check_single_env(vector, "an env factory returned")
    building.check_single_env(gym.make("CartPole-v1"), "an env factory returned")


def test_an_env_of_a_spec_of_factories_is_what_its_factory_makes_with_its_index_seen():
    """A backend that builds env ``i`` with ``build_env(spec, i)`` (docs/plugins/tutorial.md) runs the
    factories of `torchwm.make_vec_from_fns` and `torchwm.multiagent.make_vec` too."""
    seen = []

    def factory(length):
        def make():
            seen.append(current_env_index())
            return gym.make("CartPole-v1", max_episode_steps=length)

        return make

    with torchwm.make_vec_from_fns([factory(7), factory(9)], backend="sync") as envs:
        spec = envs.spec
    seen.clear()
    env = building.build_env(spec, 1)
    assert env.spec.max_episode_steps == 9 and seen == [1]
    assert current_env_index() is None
    for index in (None, 2, -1, True):
        with pytest.raises(
            ValueError, match=rf"2 factories \(env_fns\); .* from 0 to 1, got index={index!r}"
        ):
            building.build_env(spec, index)
