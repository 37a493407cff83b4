# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/data_collector/callbacks/test_step_data_callback.py: the collector is a
# VectorDataCollector of one env or several on sync or shmem (`collector`, parametrized); the episode loop is
# `record_episodes`; the env recovery is compared with a gym.make of the same id.
# Minari's storage formats all run on one setup, the other setups in arrow (`formats_and_setups`).
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from minari import MinariDataset
from minari.data_collector.callbacks import StepDataCallback
from minari_common import (
    SETUPS,
    check_data_integrity,
    check_env_recovery,
    check_env_recovery_with_subset_spaces,
    check_load_and_delete_dataset,
    collector,
    formats_and_setups,
    record_episodes,
)


class CustomSubsetStepDataCallback(StepDataCallback):
    def __call__(self, env, **kwargs):
        step_data = super().__call__(env, **kwargs)
        step_data["observation"] = {
            "component_2": {"subcomponent_2": step_data["observation"]["component_2"]["subcomponent_2"]}
        }
        if step_data["action"] is not None:
            step_data["action"] = {
                "component_2": {"subcomponent_2": step_data["action"]["component_2"]["subcomponent_2"]}
            }
        return step_data


class CustomSubsetInfoPadStepDataCallback(StepDataCallback):
    def __call__(self, env, **kwargs):
        step_data = super().__call__(env, **kwargs)
        if step_data["info"] == {}:
            step_data["info"] = {"timestep": np.array([-1])}
        return step_data


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(SETUPS))
def test_data_collector_step_data_callback(data_format, register_dummy_envs, backend, num_envs):
    """Test DataCollector wrapper and Minari dataset creation."""
    dataset_id = "dummy-dict/test-v0"
    env = "DummyDictEnv-v0"
    action_space_subset = spaces.Dict(
        {
            "component_2": spaces.Dict(
                {
                    "subcomponent_2": spaces.Box(low=4, high=5, dtype=np.float32),
                }
            ),
        }
    )
    observation_space_subset = spaces.Dict(
        {
            "component_2": spaces.Dict(
                {
                    "subcomponent_2": spaces.Box(low=4, high=5, dtype=np.float32),
                }
            ),
        }
    )

    env = collector(
        env,
        backend,
        num_envs,
        observation_space=observation_space_subset,
        action_space=action_space_subset,
        step_data_callback=CustomSubsetStepDataCallback,
        data_format=data_format,
    )
    num_episodes = 10

    record_episodes(env, num_episodes)

    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        code_permalink=str(__file__),
        author="Farama",
        author_email="farama@farama.org",
        description="Test dataset",
    )

    assert isinstance(dataset, MinariDataset)
    assert dataset.total_episodes == num_episodes
    assert dataset.spec.total_episodes == num_episodes
    assert len(dataset.episode_indices) == num_episodes

    check_data_integrity(dataset, list(dataset.episode_indices))

    check_env_recovery_with_subset_spaces(
        gym.make("DummyDictEnv-v0"), dataset, action_space_subset, observation_space_subset
    )

    env.close()
    check_load_and_delete_dataset(dataset_id)


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(SETUPS))
def test_data_collector_step_data_callback_info_correction(
    data_format, register_dummy_envs, backend, num_envs
):
    """Test DataCollector wrapper and Minari dataset creation."""
    dataset_id = "dummy-inconsistent-info-v0"
    env = "DummyInconsistentInfoEnv-v0"

    env = collector(
        env,
        backend,
        num_envs,
        record_infos=True,
        step_data_callback=CustomSubsetInfoPadStepDataCallback,
        data_format=data_format,
    )
    num_episodes = 10

    record_episodes(env, num_episodes)

    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        code_permalink=str(__file__),
        author="Farama",
        author_email="farama@farama.org",
        description="Test dataset",
    )

    assert isinstance(dataset, MinariDataset)
    assert dataset.total_episodes == num_episodes
    assert dataset.spec.total_episodes == num_episodes
    assert len(dataset.episode_indices) == num_episodes

    check_data_integrity(dataset, list(dataset.episode_indices))

    check_env_recovery(gym.make("DummyInconsistentInfoEnv-v0"), dataset)

    env.close()
    check_load_and_delete_dataset(dataset_id)

    env = collector("DummyInconsistentInfoEnv-v0", backend, num_envs, record_infos=True)
    # here we are checking to make sure that if we have an environment changing its info
    # structure across steps, it is results in a error
    with pytest.raises(ValueError):
        num_episodes = 10
        record_episodes(env, num_episodes)
    env.close()
