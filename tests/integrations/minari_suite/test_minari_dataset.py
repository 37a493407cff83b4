# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/dataset/test_minari_dataset.py, the tests that build a dataset with a
# DataCollector: the collector is a VectorDataCollector of one env or several on sync or shmem (`collector`,
# parametrized), with max_episodes for Minari's count; the episode loop is `record_episodes`; the env a
# recovered env is compared with is a gym.make of the same id (Minari's tests read `collector.env`). The
# parts that build EpisodeBuffers with add_step_data need jax (minari[create], in the test extra), as
# Minari's own do.
# Minari's storage formats all run on one setup, the other setups in arrow (`formats_and_setups`).
import json
import os
import warnings
from typing import Any

import gymnasium as gym
import minari
import pytest
from minari import MinariDataset, StepData
from minari.data_collector.episode_buffer import EpisodeBuffer
from minari.dataset.minari_storage import METADATA_FILE_NAME
from minari_common import (
    ONE_AND_SEVERAL,
    cartpole_test_dataset,
    check_data_integrity,
    check_env_recovery,
    check_episode_data_integrity,
    check_load_and_delete_dataset,
    collector,
    create_dummy_dataset_with_collecter_env_helper,
    dummy_test_datasets,
    formats_and_setups,
    record_episodes,
)


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", cartpole_test_dataset + dummy_test_datasets)
def test_update_dataset_from_collector_env(
    dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs
):
    num_episodes = 10
    env = collector(env_id, backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    dataset = create_dummy_dataset_with_collecter_env_helper(dataset_id, env, num_episodes=num_episodes)

    # Step the environment, DataCollector wrapper will do the data collection job
    record_episodes(env, num_episodes)

    env.add_to_dataset(dataset)

    assert isinstance(dataset, MinariDataset)
    assert isinstance(dataset.total_steps, int)
    assert dataset.total_episodes == num_episodes * 2
    assert dataset.spec.total_episodes == num_episodes * 2
    assert len(dataset.episode_indices) == num_episodes * 2

    check_data_integrity(dataset, list(dataset.episode_indices))
    check_env_recovery(gym.make(env_id), dataset)

    env.close()

    check_load_and_delete_dataset(dataset_id)


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", dummy_test_datasets)
def test_filter_episodes_and_subsequent_updates(
    dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs
):
    """Tests to make sure that episodes are filtered correctly.

    Additionally ensures indices are correctly updated when adding more episodes to a filtered dataset.
    """
    num_episodes = 10
    env = collector(env_id, backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    dataset = create_dummy_dataset_with_collecter_env_helper(dataset_id, env, num_episodes=num_episodes)

    def filter_by_index(episode: Any):
        return int(episode.id) <= 6

    filtered_dataset = dataset.filter_episodes(filter_by_index)

    assert isinstance(filtered_dataset, MinariDataset)
    assert filtered_dataset.total_episodes == 7
    assert filtered_dataset.spec.total_episodes == 7
    assert len(filtered_dataset.episode_indices) == 7

    check_data_integrity(filtered_dataset, list(filtered_dataset.episode_indices))
    check_env_recovery(gym.make(env_id), filtered_dataset)

    record_episodes(env, num_episodes)

    env.add_to_dataset(filtered_dataset)

    max_timesteps = getattr(gym.make(env_id).unwrapped, "_max_timesteps", None)
    assert max_timesteps is not None

    assert isinstance(filtered_dataset, MinariDataset)
    assert isinstance(filtered_dataset.spec.total_steps, int)
    assert filtered_dataset.total_episodes == 17
    assert filtered_dataset.spec.total_episodes == 17
    assert filtered_dataset.spec.total_steps == 17 * max_timesteps
    assert tuple(filtered_dataset.episode_indices) == (
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
    )
    assert filtered_dataset.storage.total_episodes == 20
    assert dataset.storage.total_episodes == 20
    check_env_recovery(gym.make(env_id), filtered_dataset)

    env.close()

    env = gym.make(env_id)
    buffer = []

    num_episodes = 10
    seed = 42
    observation, _ = env.reset(seed=seed)
    episode_buffer = EpisodeBuffer(observations=observation, seed=seed)

    for _episode in range(num_episodes):
        terminated = False
        truncated = False

        while not terminated and not truncated:
            action = env.action_space.sample()
            observation, reward, terminated, truncated, _ = env.step(action)
            step_data: StepData = {
                "observation": observation,
                "action": action,
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
                "info": {},
            }
            episode_buffer = episode_buffer.add_step_data(step_data)

        buffer.append(episode_buffer)
        observation, _ = env.reset()
        episode_buffer = EpisodeBuffer(observations=observation)

    filtered_dataset.update_dataset_from_buffer(buffer)

    max_timesteps = getattr(env.unwrapped, "_max_timesteps", None)
    assert max_timesteps is not None

    assert isinstance(filtered_dataset, MinariDataset)
    assert isinstance(filtered_dataset.spec.total_steps, int)
    assert filtered_dataset.total_episodes == 27
    assert filtered_dataset.spec.total_episodes == 27
    assert filtered_dataset.spec.total_steps == 27 * max_timesteps

    assert tuple(filtered_dataset.episode_indices) == (
        0,
        1,
        2,
        3,
        4,
        5,
        6,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
        27,
        28,
        29,
    )
    assert filtered_dataset.storage.total_episodes == 30
    assert dataset.storage.total_episodes == 30
    check_env_recovery(env, filtered_dataset)

    check_load_and_delete_dataset(dataset_id)
    env.close()


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", cartpole_test_dataset + dummy_test_datasets)
def test_sample_episodes(dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs):
    num_episodes = 10
    env = collector(env_id, backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    dataset = create_dummy_dataset_with_collecter_env_helper(dataset_id, env, num_episodes=num_episodes)

    def filter_by_index(episode: Any):
        return int(episode.id) >= 3

    filtered_dataset = dataset.filter_episodes(filter_by_index)
    for i in [1, 7]:
        episodes = list(filtered_dataset.sample_episodes(i))
        assert len(episodes) == i
        check_episode_data_integrity(
            episodes,
            filtered_dataset.spec.observation_space,
            filtered_dataset.spec.action_space,
        )
    with pytest.raises(ValueError):
        episodes = filtered_dataset.sample_episodes(8)

    env.close()


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", cartpole_test_dataset + dummy_test_datasets)
def test_iterate_episodes(dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs):
    num_episodes = 10
    env = collector(env_id, backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    dataset = create_dummy_dataset_with_collecter_env_helper(dataset_id, env, num_episodes=num_episodes)
    env.close()

    episodes = list(dataset.iterate_episodes([1, 3, 5]))

    assert {1, 3, 5} == {episode.id for episode in episodes}

    assert len(episodes) == 3
    check_episode_data_integrity(episodes, dataset.spec.observation_space, dataset.spec.action_space)

    all_episodes = list(dataset.iterate_episodes())
    assert len(all_episodes) == 10
    assert {0, 1, 2, 3, 4, 5, 6, 7, 8, 9} == {episode.id for episode in all_episodes}

    length = 0
    for i, ep in enumerate(dataset):
        assert dataset[i].id == i
        assert ep.id == i
        length += 1
    assert length == 10
    assert len(dataset) == 10


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", cartpole_test_dataset + dummy_test_datasets)
def test_update_dataset_from_buffer(dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs):
    num_episodes = 10
    collector_env = collector(env_id, backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    dataset = create_dummy_dataset_with_collecter_env_helper(
        dataset_id, collector_env, num_episodes=num_episodes
    )

    env = gym.make(env_id)
    buffer = []

    num_episodes = 10
    seed = 42
    observation, _ = env.reset(seed=seed)
    episode_buffer = EpisodeBuffer(observations=observation, seed=seed)

    for _episode in range(num_episodes):
        terminated = False
        truncated = False

        while not terminated and not truncated:
            action = env.action_space.sample()
            observation, reward, terminated, truncated, _ = env.step(action)
            step_data: StepData = {
                "observation": observation,
                "action": action,
                "reward": reward,
                "terminated": terminated,
                "truncated": truncated,
                "info": {},
            }
            episode_buffer = episode_buffer.add_step_data(step_data)

        buffer.append(episode_buffer)

        observation, _ = env.reset()
        episode_buffer = EpisodeBuffer(observations=observation)

    dataset.update_dataset_from_buffer(buffer)

    assert isinstance(dataset, MinariDataset)
    assert dataset.total_episodes == num_episodes * 2
    assert dataset.spec.total_episodes == num_episodes * 2
    assert len(dataset.episode_indices) == num_episodes * 2

    check_data_integrity(dataset, list(dataset.episode_indices))
    check_env_recovery(env, dataset)

    collector_env.close()
    check_load_and_delete_dataset(dataset_id)


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
def test_missing_env_module(data_format, backend, num_envs):
    dataset_id = "dummy-test-v0"

    num_episodes = 10
    env = collector("CartPole-v1", backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    dataset = create_dummy_dataset_with_collecter_env_helper(dataset_id, env, num_episodes=num_episodes)
    env.close()

    path = os.path.join(dataset.storage.data_path, METADATA_FILE_NAME)
    with open(path) as file:
        metadata = json.load(file)
    metadata["env_spec"] = r"""{
        "id": "DummyEnv-v0",
        "entry_point": "dummymodule:dummyenv",
        "reward_threshold": null,
        "nondeterministic": false,
        "max_episode_steps": 300,
        "order_enforce": true,
        "disable_env_checker": false,
        "apply_api_compatibility": false,
        "additional_wrappers": []
    }"""
    with open(path, "w") as file:
        json.dump(metadata, file)

    dataset = minari.load_dataset(dataset_id)
    with pytest.raises(ModuleNotFoundError, match="No module named 'dummymodule'"):
        dataset.recover_environment()

    minari.delete_dataset(dataset_id)


@pytest.mark.parametrize("backend,num_envs", ONE_AND_SEVERAL)
def test_requirements(backend, num_envs):
    dataset_id = "dummy-test-v0"
    env = collector("CartPole-v1", backend, num_envs, max_episodes=10)
    dataset = create_dummy_dataset_with_collecter_env_helper(
        dataset_id, env, requirements=["mal<formed@@3.2"]
    )
    env.close()

    with pytest.warns(Warning, match="Ignoring malformed requirement"):
        dataset.recover_environment()

    dataset.storage.update_metadata({"requirements": ["non-existent-package"]})
    with pytest.warns(Warning, match="is not installed. Install it with `pip install"):
        dataset.recover_environment()

    dataset.storage.update_metadata({"requirements": [f"minari<{minari.__version__}"]})
    with pytest.warns(Warning, match="We recommend to install the required version"):
        dataset.recover_environment()

    dataset.storage.update_metadata({"requirements": [f"minari>=0.0.1,<={minari.__version__}"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dataset.recover_environment()
