# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/dataset/test_minari_storage.py, the test that builds a dataset with a
# DataCollector: the collector is a VectorDataCollector of one env or several on sync or shmem (`collector`,
# parametrized); the episode loop is `record_episodes`.
# Minari's storage formats all run on one setup, the other setups in arrow (`formats_and_setups`).
# 10 episodes where Minari's test records 100: the size check holds for any number.
import minari
import pytest
from minari_common import (
    ONE_AND_SEVERAL,
    cartpole_test_dataset,
    check_data_integrity,
    check_load_and_delete_dataset,
    collector,
    dummy_test_datasets,
    formats_and_setups,
    record_episodes,
)


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", cartpole_test_dataset + dummy_test_datasets)
def test_minari_get_dataset_size_from_collector_env(
    dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs
):
    """Test get_dataset_size method for dataset made with DataCollector environment."""
    # delete the test dataset if it already exists
    local_datasets = minari.list_local_datasets()
    if dataset_id in local_datasets:
        minari.delete_dataset(dataset_id)

    num_episodes = 10  # Minari's: 100 (see above)
    env = collector(env_id, backend, num_envs, data_format=data_format)

    # Step the environment, DataCollector wrapper will do the data collection job
    record_episodes(env, num_episodes)

    # Create Minari dataset and store locally
    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        code_permalink=str(__file__),
        author="Farama",
        author_email="farama@farama.org",
        description="Test dataset",
    )

    assert dataset.storage.metadata["dataset_size"] == dataset.storage.get_size()

    check_data_integrity(dataset, list(dataset.episode_indices))

    env.close()

    check_load_and_delete_dataset(dataset_id)
