# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/utils/test_dataset_creation.py, the tests that build a dataset with a
# DataCollector: the collector is a VectorDataCollector of one env or several on sync or shmem (`collector`,
# parametrized), with max_episodes for Minari's count; the episode loop is `record_episodes`; the env a
# recovered env is compared with is a gym.make of the same id (Minari's tests read `collector.env`), and
# the info sample is a gym.make's reset info (Minari's is the collector's first reset's); the eval env's
# spec is a copy (Minari's test sets max_episode_steps=123 on the registered spec itself, which every later
# gym.make of that id in the same process then inherits).
import dataclasses

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari import MinariDataset
from minari_common import (
    ONE_AND_SEVERAL,
    SETUPS,
    cartpole_test_dataset,
    check_data_integrity,
    check_env_recovery,
    check_episode_data_integrity,
    check_load_and_delete_dataset,
    collector,
    dummy_test_datasets,
    dummy_text_dataset,
    record_episodes,
)

CODELINK = "https://github.com/Farama-Foundation/Minari/blob/main/tests/utils/test_dataset_creation.py"


@pytest.mark.parametrize("backend,num_envs", ONE_AND_SEVERAL)
@pytest.mark.parametrize(
    "dataset_id,env_id",
    cartpole_test_dataset + dummy_test_datasets + dummy_text_dataset,
)
def test_generate_dataset_with_collector_env(dataset_id, env_id, register_dummy_envs, backend, num_envs):
    """Test DataCollector wrapper and Minari dataset creation."""
    if env_id == "DummyTextEnv-v0" and backend == "shmem":
        backend = "subproc"  # shared memory holds fixed-shape spaces only (docs/backends.md)
    num_episodes = 10
    env = collector(env_id, backend, num_envs, record_infos=True, max_episodes=num_episodes)
    record_episodes(env, num_episodes)

    eval_env_spec = dataclasses.replace(gym.spec(env_id), max_episode_steps=123)
    eval_env = gym.make(eval_env_spec)

    local_datasets = minari.list_local_datasets()
    if dataset_id in local_datasets:
        minari.delete_dataset(dataset_id)

    dataset = env.create_dataset(
        dataset_id=dataset_id,
        eval_env=eval_env,
        algorithm_name="random_policy",
        code_permalink=CODELINK,
        author="Farama",
        author_email="farama@farama.org",
        description="Test dataset",
    )

    metadata = dataset.storage.metadata
    assert metadata["algorithm_name"] == "random_policy"
    assert metadata["code_permalink"] == CODELINK
    assert metadata["author"] == {"Farama"}
    assert metadata["author_email"] == {"farama@farama.org"}

    assert isinstance(dataset, MinariDataset)
    assert dataset.total_episodes == num_episodes
    assert dataset.spec.total_episodes == num_episodes
    assert len(dataset.episode_indices) == num_episodes

    check_data_integrity(dataset, list(dataset.episode_indices))
    check_episode_data_integrity(dataset, dataset.spec.observation_space, dataset.spec.action_space)

    check_env_recovery(gym.make(env_id), dataset, eval_env)

    env.close()
    eval_env.close()
    check_load_and_delete_dataset(dataset_id)


@pytest.mark.parametrize("backend,num_envs", SETUPS)
@pytest.mark.parametrize(
    "info_override",
    [
        None,
        {},
        {"foo": np.ones((10, 10), dtype=np.float32)},
        {"int": 1},
        {"bool": False},
        {
            "value1": True,
            "value2": 5,
            "value3": {"nested1": False, "nested2": np.empty(10)},
        },
    ],
)
def test_record_infos_collector_env(info_override, register_dummy_envs, backend, num_envs):
    """Test DataCollector wrapper and Minari dataset creation including infos."""
    dataset_id = "dummy-mutable-info-box/test-v0"
    num_episodes = 10
    env = collector(
        "DummyInfoEnv-v0",
        backend,
        num_envs,
        env_kwargs={"info": info_override},
        record_infos=True,
        max_episodes=num_episodes,
    )

    _, info_sample = gym.make("DummyInfoEnv-v0", info=info_override).reset(seed=42)

    record_episodes(env, num_episodes)

    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        code_permalink=CODELINK,
        author={"Farama", "Contributors"},
        author_email={"farama@farama.org"},
        description="Test dataset",
    )

    assert isinstance(dataset, MinariDataset)
    assert dataset.total_episodes == num_episodes
    assert dataset.spec.total_episodes == num_episodes
    assert len(dataset.episode_indices) == num_episodes

    check_data_integrity(dataset, list(dataset.episode_indices))
    check_episode_data_integrity(
        dataset,
        dataset.spec.observation_space,
        dataset.spec.action_space,
        info_sample=info_sample,
    )

    env.close()

    check_load_and_delete_dataset(dataset_id)
