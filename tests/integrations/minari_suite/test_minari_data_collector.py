# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/data_collector/test_data_collector.py: the collector is a VectorDataCollector of one
# env or several on sync or shmem (`collector`, parametrized), with max_episodes for Minari's count; the
# episode loop reads the vector env's flags; xfails say why.
# Minari's storage formats all run on one setup, the other setups in arrow (`formats_and_setups`).
import numpy as np
import pytest
from minari import EpisodeData, MinariDataset, StepDataCallback
from minari.dataset.minari_dataset import parse_dataset_id
from minari.namespace import get_namespace_metadata, list_local_namespaces
from minari_common import (
    ONE_AND_SEVERAL,
    SETUPS,
    check_infos_equal,
    check_load_and_delete_dataset,
    collector,
    dummy_test_datasets,
    formats_and_setups,
    get_info_at_step_index,
)

MAX_UINT64 = np.iinfo(np.uint64).max


class ForceTruncateStepDataCallback(StepDataCallback):
    episode_steps = 10

    def __init__(self) -> None:
        super().__init__()
        self.time_steps = 0

    def __call__(self, env, **kwargs):
        step_data = super().__call__(env, **kwargs)
        if self.time_steps != 0:
            step_data["terminated"] = False
            if self.time_steps % self.episode_steps == 0:
                step_data["truncated"] = True

        self.time_steps += 1
        return step_data


def _get_step_from_dictionary_space(episode_data, step_index):
    step_data = {}
    assert isinstance(episode_data, dict)
    for key, value in episode_data.items():
        if isinstance(value, dict):
            step_data[key] = _get_step_from_dictionary_space(value, step_index)
        elif isinstance(value, tuple):
            step_data[key] = _get_step_from_tuple_space(value, step_index)
        else:
            step_data[key] = value[step_index]
    return step_data


def _get_step_from_tuple_space(episode_data, step_index):
    step_data = []
    assert isinstance(episode_data, tuple)
    for element in episode_data:
        if isinstance(element, dict):
            step_data.append(_get_step_from_dictionary_space(element, step_index))
        elif isinstance(element, tuple):
            step_data.append(_get_step_from_tuple_space(element, step_index))
        else:
            step_data.append(element[step_index])

    return tuple(step_data)


def get_single_step_from_episode(episode: EpisodeData, index: int) -> EpisodeData:
    """Get a single step EpisodeData from a full episode."""
    if isinstance(episode.observations, dict):
        observation = _get_step_from_dictionary_space(episode.observations, index)
    elif isinstance(episode.observations, tuple):
        observation = _get_step_from_tuple_space(episode.observations, index)
    else:
        observation = episode.observations[index]
    if isinstance(episode.actions, dict):
        action = _get_step_from_dictionary_space(episode.actions, index)
    elif isinstance(episode.actions, tuple):
        action = _get_step_from_tuple_space(episode.actions, index)
    else:
        action = episode.actions[index]

    infos = get_info_at_step_index(episode.infos, index)

    step_data = {
        "id": episode.id,
        "observations": observation,
        "actions": action,
        "rewards": episode.rewards[index],
        "terminations": episode.terminations[index],
        "truncations": episode.truncations[index],
        "infos": infos,
    }

    return EpisodeData(**step_data)


@pytest.mark.xfail(
    strict=True,
    reason="Minari's dummy envs terminate after 5 steps, and this test steps one on without a reset; a vector "
    "env resets an env that ended (autoreset), which cuts the episode the callback keeps going: the collector "
    "leaves such an episode out, as one cut by reset()",
)
@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(ONE_AND_SEVERAL))
@pytest.mark.parametrize("dataset_id,env_id", dummy_test_datasets[:1])
def test_truncation_without_reset(dataset_id, env_id, data_format, register_dummy_envs, backend, num_envs):
    """Test new episode creation when environment is truncated and env.reset is not called."""
    num_steps = 50
    num_episodes = int(num_steps / ForceTruncateStepDataCallback.episode_steps)
    env = collector(
        env_id,
        backend,
        num_envs,
        env_kwargs={"max_episode_steps": 50},
        step_data_callback=ForceTruncateStepDataCallback,
        record_infos=True,
        data_format=data_format,
        max_episodes=num_episodes,
    )

    env.reset()
    for _ in range(num_steps):
        env.step(env.action_space.sample())

    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        author="Farama",
        author_email="farama@farama.org",
        code_permalink=str(__file__),
        description="Test truncation without reset.",
    )

    env.close()

    assert isinstance(dataset, MinariDataset)
    assert dataset.total_episodes == num_episodes
    assert dataset.spec.total_episodes == num_episodes
    assert len(dataset.episode_indices) == num_episodes

    assert dataset.spec.namespace == parse_dataset_id(dataset_id)[0]

    episodes_generator = dataset.iterate_episodes()
    last_step = get_single_step_from_episode(next(episodes_generator), -1)
    for episode in episodes_generator:
        assert len(episode) == ForceTruncateStepDataCallback.episode_steps
        first_step = get_single_step_from_episode(episode, 0)
        # Check that the last observation of the previous episode is carried over to the next episode
        # as the reset observation.
        if isinstance(first_step.observations, dict) or isinstance(first_step.observations, tuple):
            assert first_step.observations == last_step.observations
        else:
            assert np.array_equal(first_step.observations, last_step.observations)

        check_infos_equal(last_step.infos, first_step.infos)
        last_step = get_single_step_from_episode(episode, -1)
        assert bool(last_step.truncations) is True

    if "/" in dataset_id:
        namespace, _, _ = parse_dataset_id(dataset_id)
        assert namespace in list_local_namespaces()
        assert get_namespace_metadata(namespace) == {}

    # check load and delete local dataset
    check_load_and_delete_dataset(dataset_id)


@pytest.mark.parametrize("data_format,backend,num_envs", formats_and_setups(SETUPS))
@pytest.mark.parametrize("seed", [None, 0, 42, MAX_UINT64])
@pytest.mark.parametrize("options", [None, {"max_timesteps": 3}])
def test_reproducibility(seed, data_format, options, register_dummy_envs, backend, num_envs, request):
    """Test episodes are reproducible, even if an explicit reset seed is not set."""
    if seed is not None and num_envs > 1:
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="reset(seed=s) of a vector env seeds env i with s + i (Gymnasium's rule), so the "
                "episodes of envs 1.. do not have the seed s the test expects",
            )
        )
    dataset_id = "dummy-box/test-v0"
    env_id = "DummyBoxEnv-v0"
    num_episodes = 5

    env = collector(env_id, backend, num_envs, data_format=data_format, max_episodes=num_episodes)

    while env.num_episodes < num_episodes:
        env.reset(seed=seed, options=options)

        trunc = False
        term = False

        while not (trunc or term):
            _, _, trunc, term, _ = env.step(env.action_space.sample())
            trunc, term = trunc.any(), term.any()  # a vector env's flags: one per env, all end together

    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        author="Farama",
        author_email="farama@farama.org",
        code_permalink=str(__file__),
        description="Test reproducibility",
    )
    env.close()

    # Step through the env again using the stored seed and check it matches
    env = dataset.recover_environment()

    assert len(dataset) == num_episodes
    episodes = dataset.iterate_episodes()
    metadatas = dataset.storage.get_episode_metadata(range(num_episodes))
    for episode, episode_metadata in zip(episodes, metadatas):
        episode_seed = episode_metadata["seed"]
        assert episode_seed >= 0
        if seed is not None:
            assert seed == episode_seed

        obs, _ = env.reset(seed=int(episode_seed), options=episode_metadata.get("options"))

        assert np.allclose(obs, episode.observations[0])

        for k in range(len(episode)):
            obs, rew, term, trunc, _ = env.step(episode.actions[k])
            assert np.allclose(obs, episode.observations[k + 1])
            assert rew == episode.rewards[k]
            assert term == episode.terminations[k]
            assert trunc == episode.truncations[k]

    check_load_and_delete_dataset(dataset_id)
