"""`torchwm.integrations.rllib`: RLlib's PPO (new API stack) samples from torchwm vector envs.

The RLlib recipe of docs/training.md runs as written, with every episode RLlib finishes recorded
(an ``on_episode_end`` callback added as the config builds). The reference is the same config on
Gymnasium's own vector env of the same id (RLlib's ``sync`` vectorization): with the same seed, PPO
on torchwm's ``shmem`` env must finish the same episodes (returns, lengths, observations), so
every sample came from the real env, stepped and reset as Gymnasium does. Ray runs locally, started
and stopped by the test that needs it.
"""

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import ray
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.tune.registry import ENV_CREATOR, _global_registry

import torchwm
from torchwm.integrations.rllib import RLlibVectorEnv, register_rllib_env
from torchwm.vector.shmem import ShmemVectorEnv

ENV_NAME = "torchwm-test-cartpole"
ENTRY_ID = "torchwm_tests/RLlibCartPole-v0"


def recipe() -> str:
    """The Python block of docs/training.md's RLlib section."""
    text = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = re.search(r"^## RLlib\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE).group(1)
    return re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)


@pytest.fixture
def local_ray():
    assert not ray.is_initialized(), "a previous test left Ray connected"
    # address="local": a Ray of this test's own, never one another program (or test worker) started.
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    yield
    ray.shutdown()


@pytest.fixture
def episodes(monkeypatch):
    """(return, length, observations) of every episode the algorithms built in the test finish."""
    finished: list[tuple[float, int, list]] = []
    build_algo = AlgorithmConfig.build_algo

    def record(*, episode, **_):
        finished.append((episode.get_return(), len(episode), np.array(episode.get_observations()).tolist()))

    def recording_build_algo(self, *args, **kwargs):
        return build_algo(self.callbacks(on_episode_end=record), *args, **kwargs)

    monkeypatch.setattr(AlgorithmConfig, "build_algo", recording_build_algo)
    return finished


def test_the_recipe_samples_from_torchwm_the_episodes_rllib_samples_from_gymnasium(local_ray, episodes):
    namespace: dict = {}
    exec(compile(recipe(), "docs/training.md (RLlib)", "exec"), namespace)
    env = namespace["algo"].env_runner.env.unwrapped
    assert isinstance(env, RLlibVectorEnv)
    assert isinstance(env.env, ShmemVectorEnv)
    assert (env.env.spec.id, env.env.num_envs) == ("CartPole-v1", 4)
    assert env.env.closed  # algo.stop() closed the torchwm env and its worker processes
    got = list(episodes)
    episodes.clear()

    reference = namespace["config"].copy(copy_frozen=False)
    reference.environment("CartPole-v1").env_runners(gym_env_vectorize_mode="sync")
    algo = reference.build_algo()
    try:
        for _ in range(namespace["ITERATIONS"]):
            algo.train()
        assert type(algo.env_runner.env.unwrapped) is gym.vector.SyncVectorEnv
    finally:
        algo.stop()

    assert len(episodes) > 10
    assert [(r, n) for r, n, _ in got] == [(r, n) for r, n, _ in episodes]
    for (*_, got_obs), (*_, expected_obs) in zip(got, episodes, strict=True):
        np.testing.assert_array_equal(got_obs, expected_obs)


def test_gymnasium_make_vec_builds_the_wrapper_from_a_vector_entry_point():
    # gym.make_vec writes its EnvSpec to env.unwrapped.spec, which a torchwm env keeps read-only.
    gym.register(
        ENTRY_ID,
        vector_entry_point=lambda num_envs: RLlibVectorEnv(torchwm.make_vec("CartPole-v1", num_envs)),
    )
    try:
        with gym.make_vec(ENTRY_ID, 3, vectorization_mode="vector_entry_point") as envs:
            assert envs.spec.id == ENTRY_ID
            assert envs.env.spec.id == "CartPole-v1"
            obs, _ = envs.reset(seed=0)
            reference = gym.make_vec("CartPole-v1", 3, vectorization_mode="sync")
            np.testing.assert_array_equal(obs, reference.reset(seed=0)[0])
            reference.close()
    finally:
        del gym.registry[ENTRY_ID]


def test_modes_other_than_next_step_and_other_envs_are_refused():
    with torchwm.make_vec("CartPole-v1", 2, autoreset_mode="same_step") as envs:
        with pytest.raises(ValueError, match="expects autoreset_mode 'next_step'.*'same_step'"):
            RLlibVectorEnv(envs)
    envs = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
    with pytest.raises(TypeError, match="expected a torchwm vector env.*SyncVectorEnv"):
        RLlibVectorEnv(envs)
    envs.close()
    for option in ({"num_envs": 4}, {"autoreset_mode": "same_step"}):
        with pytest.raises(TypeError, match=f"got {next(iter(option))}="):
            register_rllib_env(ENV_NAME, "CartPole-v1", **option)


def test_an_env_that_returns_some_envs_per_step_is_refused_when_built():
    # RLlib's runner steps every env each step: with batch_size=2 of 4 its second step failed with
    # AlreadyPendingCallError, far from the cause.
    with torchwm.make_vec("CartPole-v1", 4, backend_kwargs={"batch_size": 2}) as envs:
        with pytest.raises(ValueError, match=r"steps every env.*batch_size=2 of its num_envs=4.*set it to 4"):
            RLlibVectorEnv(envs)
    with torchwm.make_vec("CartPole-v1", 4, backend_kwargs={"batch_size": 4}) as envs:
        assert RLlibVectorEnv(envs).num_envs == 4
    register_rllib_env(ENV_NAME, "CartPole-v1", backend="shmem", backend_kwargs={"batch_size": 2})
    creator = _global_registry.get(ENV_CREATOR, ENV_NAME)
    with pytest.raises(ValueError, match=r"batch_size=2 of its num_envs=4"):
        creator({"num_envs": 4})
