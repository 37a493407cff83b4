# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/common.py (commit 1880118a of Farama-Foundation/Minari, released as 0.5.4):
# its dummy envs and checks, unchanged; dropped: skimage's ImageSpace and the space lists of the storage
# tests, the hosting helpers. Added at the end: the construction of a VectorDataCollector over a torchwm
# vector env (`collector`), the loop that records whole episodes with it (`record_episodes`) and Minari's
# dataset helper over that loop (`create_dummy_dataset_with_collecter_env_helper`).
"""Minari's dummy envs and dataset checks, and the one adapted part: a `VectorDataCollector` where
Minari's tests build a `minari.DataCollector`."""

import sys
import unicodedata
from typing import Any

import gymnasium as gym
import minari
import numpy as np
from gymnasium import spaces
from gymnasium.utils.env_checker import data_equivalence
from minari import EpisodeData, MinariDataset
from minari.dataset._storages import get_storage_keys

import torchwm
from torchwm.integrations.minari import VectorDataCollector

unicode_charset = "".join([chr(i) for i in range(sys.maxunicode) if unicodedata.category(chr(i)) != "Cs"])

cartpole_test_dataset = [("cartpole/test-v0", "CartPole-v1")]
dummy_box_dataset = [
    ("dummy-box/test-v0", "DummyBoxEnv-v0"),
]
dummy_text_dataset = [("dummy-text/test-v0", "DummyTextEnv-v0")]

# Note: Doesn't include the text dataset, since this is often handled separately
dummy_test_datasets = [
    ("dummy-dict/test-v0", "DummyDictEnv-v0"),
    ("dummy-tuple/test-v0", "DummyTupleEnv-v0"),
    ("dummy-combo/test-v0", "DummyComboEnv-v0"),
    ("dummy-multi-dim-box/test-v0", "DummyMultiDimensionalBoxEnv-v0"),
    ("dummy-multidim-space/test-v0", "DummyMultiSpaceEnv-v0"),
    ("dummy-tuple-discrete-box/test-v0", "DummyTupleDiscreteBoxEnv-v0"),
    ("nested/namespace/dummy-dict/test-v0", "DummyDictEnv-v0"),
    ("dummy-single-step/test-v0", "DummySingleStepEnv-v0"),
    ("dummy-image/test-v0", "DummyImageObsEnv-v0"),
    ("dummy-grayscale-image/test-v0", "DummyGrayscaleImageObsEnv-v0"),
] + dummy_box_dataset


class DummyEnv(gym.Env):
    def __init__(self):
        self._max_timesteps = 5

    def _get_info(self):
        return {}

    def step(self, action):
        self.timestep += 1
        terminated = self.timestep >= self._max_timesteps

        return (
            self.observation_space.sample(),
            0,
            terminated,
            False,
            self._get_info(),
        )

    def reset(self, seed=None, options=None):
        self.timestep = 0
        if options:
            self._max_timesteps = options.get("max_timesteps", self._max_timesteps)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), self._get_info()


class DummyBoxEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Box(low=-1, high=4, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Box(low=-1, high=4, shape=(3,), dtype=np.float32)

    def _get_info(self):
        return {"timestep": np.array([self.timestep])}


class DummyInfoEnv(DummyBoxEnv):
    def __init__(self, info=None):
        super().__init__()
        self.info = info if info is not None else {}

    def _get_info(self):
        return self.info


class DummySingleStepEnv(DummyBoxEnv):
    def __init__(self):
        super().__init__()
        self._max_timesteps = 1


class DummyInconsistentInfoEnv(DummyBoxEnv):
    def __init__(self):
        super().__init__()

    def _get_info(self):
        return super()._get_info() if self.timestep % 2 == 0 else {}


class DummyMultiDimensionalBoxEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Box(low=-1, high=4, shape=(2, 2, 2), dtype=np.float32)
        self.observation_space = spaces.Box(low=-1, high=4, shape=(3, 3, 3), dtype=np.float32)


class DummyMultiSpaceEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.MultiBinary(10)
        self.observation_space = spaces.MultiDiscrete([10, 2, 4], dtype=np.int32)

    def _get_info(self):
        return {"timestep": np.array([self.timestep])}


class DummyTupleDiscreteBoxEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Tuple(
            (
                spaces.Discrete(1),
                spaces.Discrete(5),
            )
        )
        self.observation_space = spaces.Tuple(
            (
                spaces.Box(low=-1, high=4, dtype=np.float32),
                spaces.Discrete(5),
            )
        )

    def _get_info(self):
        return {"timestep": np.array([self.timestep])}


class DummyDictEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Dict(
            {
                "component_1": spaces.Box(low=-1, high=1, dtype=np.float32),
                "component_2": spaces.Dict(
                    {
                        "subcomponent_1": spaces.Box(low=2, high=3, dtype=np.float32),
                        "subcomponent_2": spaces.Box(low=4, high=5, dtype=np.float32),
                    }
                ),
            }
        )
        self.observation_space = spaces.Dict(
            {
                "component_1": spaces.Box(low=-1, high=1, dtype=np.float32),
                "component_2": spaces.Dict(
                    {
                        "subcomponent_1": spaces.Box(low=2, high=3, dtype=np.float32),
                        "subcomponent_2": spaces.Box(low=4, high=5, dtype=np.float32),
                    }
                ),
            }
        )

    def _get_info(self):
        return {
            "timestep": np.array([self.timestep]),
            "component_1": {"next_timestep": np.array([self.timestep + 1])},
        }


class DummyTupleEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Tuple(
            (
                spaces.Box(low=2, high=3, dtype=np.float32),
                spaces.Box(low=4, high=5, dtype=np.float32),
            )
        )

        self.observation_space = spaces.Tuple(
            (
                spaces.Box(low=2, high=3, dtype=np.float32),
                spaces.Tuple(
                    (
                        spaces.Box(low=2, high=3, dtype=np.float32),
                        spaces.Box(low=4, high=5, dtype=np.float32),
                    )
                ),
            )
        )

    def _get_info(self):
        return {
            "info_1": np.ones((2, 2)),
            "component_1": {"component_1_info_1": np.ones((2,))},
        }


class DummyTextEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Text(max_length=10, min_length=2, charset="01")
        self.observation_space = spaces.Text(max_length=20, charset=unicode_charset)

    def reset(self, seed=None, options=None):
        self.timestep = 0
        self.observation_space.seed(seed)
        return "者示序袋費欠走立🐝🗓🈸🐿🍯🚆▶️🎧🎇💫", {}


class DummyComboEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.action_space = spaces.Tuple(
            (
                spaces.Box(low=2, high=3, dtype=np.float32),
                spaces.Box(low=4, high=5, dtype=np.float32),
            )
        )

        self.observation_space = spaces.Tuple(
            (
                spaces.Box(low=2, high=3, dtype=np.float32),
                spaces.Tuple(
                    (
                        spaces.Box(low=2, high=3, dtype=np.float32),
                        spaces.Dict(
                            {
                                "component_1": spaces.Box(low=-1, high=1, dtype=np.float32),
                                "component_2": spaces.Dict(
                                    {
                                        "subcomponent_1": spaces.Box(low=2, high=3, dtype=np.float32),
                                        "subcomponent_2": spaces.Tuple(
                                            (
                                                spaces.Box(low=4, high=5, dtype=np.float32),
                                                spaces.Discrete(10),
                                            )
                                        ),
                                    }
                                ),
                            }
                        ),
                    )
                ),
            )
        )


class DummyImageObsEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(low=0, high=255, shape=(64, 72, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)


class DummyGrayscaleImageObsEnv(DummyEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = spaces.Box(low=0, high=255, shape=(128, 128), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)


def check_env_recovery_with_subset_spaces(
    gymnasium_environment: gym.Env,
    dataset: MinariDataset,
    action_space_subset: gym.spaces.Space,
    observation_space_subset: gym.spaces.Space,
):
    """Test that the recovered environment from MinariDataset is the same as the one used to generate the dataset.

    Args:
        gymnasium_environment (gym.Env): original Gymnasium environment
        dataset (MinariDataset): Minari dataset created with gymnasium_environment
        action_space_subset (gym.spaces.Space): desired subset action space
        observation_space_subset (gym.spaces.Space): desired subset observation space

    """
    recovered_env = dataset.recover_environment()

    # Check that environment spec is the same
    assert recovered_env.spec == gymnasium_environment.spec, (
        f"recovered_env spec: {recovered_env.spec}\noriginal spec: {gymnasium_environment.spec}"
    )

    # Check that action/observation spaces are the same
    assert data_equivalence(recovered_env.observation_space, gymnasium_environment.observation_space)
    assert data_equivalence(dataset.spec.observation_space, observation_space_subset)
    assert data_equivalence(recovered_env.action_space, gymnasium_environment.action_space)
    assert data_equivalence(dataset.spec.action_space, action_space_subset)


def check_env_recovery(
    gymnasium_environment: gym.Env,
    dataset: MinariDataset,
    evaluation_environment: gym.Env | None = None,
):
    """Test that the recovered environment from MinariDataset is the same as the one used to generate the dataset.

    Args:
        gymnasium_environment (gym.Env): original Gymnasium environment used to create the dataset.
        dataset (MinariDataset): Minari dataset created with gymnasium_environment
        evaluation_environment (gym.Env): Gymnasium environment saved in the `eval_env` attribute of the MinariDataset that should be used for evaluation. This attribute is optional.
    """
    recovered_env = dataset.recover_environment()

    # Check that environment spec is the same
    assert recovered_env.spec == gymnasium_environment.spec, (
        f"recovered_env spec: {recovered_env.spec}\noriginal spec: {gymnasium_environment.spec}"
    )

    # Check that action/observation spaces are the same
    assert data_equivalence(recovered_env.observation_space, gymnasium_environment.observation_space)
    assert data_equivalence(dataset.spec.observation_space, gymnasium_environment.observation_space)
    assert data_equivalence(recovered_env.action_space, gymnasium_environment.action_space)
    assert data_equivalence(dataset.spec.action_space, gymnasium_environment.action_space)

    if evaluation_environment is not None:
        recovered_eval_env = dataset.recover_environment(eval_env=True)

        # Check that evaluation environment spec is the same
        assert recovered_eval_env.spec == evaluation_environment.spec, (
            f"recovered_eval_env spec: {recovered_eval_env.spec}\noriginal spec: {evaluation_environment}"
        )


def check_data_integrity(dataset: MinariDataset, episode_indices: list[int]):
    """Checks to see if MinariDataset episodes have consistent data and has episodes at the expected indices.

    Args:
        dataset (MinariDataset): a MinariDataset instance
        episode_indices (Iterable[int]): the list of episode indices expected
    """
    episodes = list(dataset.iterate_episodes(episode_indices))
    # verify we have the right number of episodes, available at the right indices
    assert dataset.total_episodes == len(episodes), f"{dataset.total_episodes} != {len(episodes)}"
    total_steps = 0

    observation_space = dataset.observation_space
    action_space = dataset.action_space

    # verify the actions and observations are in the appropriate action space and observation space, and that the episode lengths are correct
    for episode in episodes:
        total_steps += len(episode)
        _check_space_elem(
            episode.observations,
            observation_space,
            len(episode) + 1,
        )
        _check_space_elem(episode.actions, action_space, len(episode))

        for i in range(len(episode) + 1):
            obs = _reconstuct_obs_or_action_at_index_recursive(episode.observations, i)
            assert observation_space.contains(obs)
        for i in range(len(episode)):
            action = _reconstuct_obs_or_action_at_index_recursive(episode.actions, i)
            assert action_space.contains(action)

        assert len(episode) == len(episode.rewards)
        assert len(episode) == len(episode.terminations)
        assert len(episode) == len(episode.truncations)

    assert total_steps == dataset.total_steps


def get_info_at_step_index(infos: dict, step_index: int) -> dict:
    result = {}
    for key in infos.keys():
        if isinstance(infos[key], dict):
            result[key] = get_info_at_step_index(infos[key], step_index)
        elif isinstance(infos[key], np.ndarray):
            result[key] = infos[key][step_index]
        else:
            raise ValueError(
                "Infos are in an unsupported format; see Minari documentation for supported formats."
            )
    return result


def _reconstuct_obs_or_action_at_index_recursive(
    data: dict | tuple | np.ndarray, index: int
) -> np.ndarray | dict | tuple:
    if isinstance(data, dict):
        return {key: _reconstuct_obs_or_action_at_index_recursive(data[key], index) for key in data.keys()}
    elif isinstance(data, tuple):
        return tuple([_reconstuct_obs_or_action_at_index_recursive(entry, index) for entry in data])
    else:
        assert isinstance(data, (np.ndarray, list)), "error, invalid observation or action structure"
        return data[index]


def _check_space_elem(data: Any, space: spaces.Space, n_elements: int):
    if isinstance(space, spaces.Tuple):
        assert isinstance(data, tuple)
        assert len(data) == len(space.spaces)
        for data_elem, sub_space in zip(data, space.spaces):
            _check_space_elem(data_elem, sub_space, n_elements)
    elif isinstance(space, spaces.Dict):
        assert isinstance(data, dict)
        assert data.keys() == space.keys()
        for key in data.keys():
            _check_space_elem(data[key], space[key], n_elements)
    else:
        assert len(data) == n_elements


def check_load_and_delete_dataset(dataset_id: str):
    """Test loading and deletion of local Minari datasets.

    Args:
        dataset_id (str): name of Minari dataset to test
    """
    # check dataset name is present in local database
    local_datasets = minari.list_local_datasets()
    assert dataset_id in local_datasets

    # load dataset
    loaded_dataset = minari.load_dataset(dataset_id)
    assert isinstance(loaded_dataset, MinariDataset)
    assert dataset_id == loaded_dataset.spec.dataset_id

    # delete dataset and check that it's no longer present in local database
    minari.delete_dataset(dataset_id)
    local_datasets = minari.list_local_datasets()
    assert dataset_id not in local_datasets


def check_episode_data_integrity(
    episode_data_list: list[EpisodeData] | MinariDataset,
    observation_space: gym.spaces.Space,
    action_space: gym.spaces.Space,
    info_sample: dict | None = None,
):
    """Checks to see if a list of EpisodeData instances has consistent data and that the observations and actions are in the appropriate spaces.

    Args:
        episode_data_list (List[EpisodeData]): A list of EpisodeData instances representing episodes.
        observation_space (gym.spaces.Space): The environment's observation space.
        action_space (gym.spaces.Space): The environment's action space.
        info_sample (dict): An info returned by the environment used to build the dataset.

    """
    # verify the actions and observations are in the appropriate action space and observation space, and that the episode lengths are correct
    for episode in episode_data_list:
        _check_space_elem(
            episode.observations,
            observation_space,
            len(episode) + 1,
        )
        _check_space_elem(episode.actions, action_space, len(episode))

        for i in range(len(episode) + 1):
            obs = _reconstuct_obs_or_action_at_index_recursive(episode.observations, i)
            if info_sample is not None:
                assert episode.infos is not None
                assert check_infos_equal(get_info_at_step_index(episode.infos, i), info_sample)

            assert observation_space.contains(obs)

        for i in range(len(episode)):
            action = _reconstuct_obs_or_action_at_index_recursive(episode.actions, i)
            assert action_space.contains(action)

        assert len(episode) == len(episode.rewards)
        assert len(episode) == len(episode.terminations)
        assert len(episode) == len(episode.truncations)


def check_infos_equal(info_1: dict, info_2: dict) -> bool:
    if info_1.keys() != info_2.keys():
        return False
    for key in info_1.keys():
        if isinstance(info_1[key], dict):
            return check_infos_equal(info_1[key], info_2[key])
        elif isinstance(info_1[key], np.ndarray):
            return bool(np.all(info_1[key] == info_2[key]))
        else:
            return info_1[key] == info_2[key]
    return True


# -- the adapted part: the collector over a torchwm vector env -------------------------------------------

# (backend, num_envs) each ported test runs with: one env and several, on sync and shmem.
SETUPS = [("sync", 1), ("sync", 2), ("shmem", 1), ("shmem", 2)]
# One env on sync and several on shmem: the dataset tests' setups.
ONE_AND_SEVERAL = SETUPS[:1] + SETUPS[-1:]


def formats_and_setups(setups):
    """``(data_format, backend, num_envs)`` for a test Minari runs in every storage format: every format on
    the first setup, the other setups in arrow only. A format is Minari's storage of the buffers the
    collector gives it, which are made the same way whatever the setup, while a setup is how the rows reach
    the collector; arrow is the format that refuses an episode whose columns' types differ from the
    dataset's. Every format on every setup multiplied the suite's time by the number of formats, where each
    failure a format showed, it showed on every setup."""
    first, *others = setups
    return [(data_format, *first) for data_format in get_storage_keys()] + [
        ("arrow", *setup) for setup in others
    ]


def collector(env_id, backend, num_envs, seed=None, env_kwargs=None, **collector_kwargs):
    """``DataCollector(gym.make(env_id, **env_kwargs), **collector_kwargs)``: a `VectorDataCollector` of
    ``num_envs`` envs of ``env_id`` on ``backend`` (which seeds every episode, as Minari's). shmem's
    workers are forked, so that they know the dummy envs this module registers."""
    options = {"context": "fork"} if backend == "shmem" else None
    vec = torchwm.make_vec(
        env_id, num_envs, backend=backend, seed=seed, backend_kwargs=options, **(env_kwargs or {})
    )
    return VectorDataCollector(vec, **collector_kwargs)


def record_episodes(env, num_episodes, seed=42):
    """Minari's loop (``env.reset(seed=42)``, then for each episode: step with ``env.action_space.sample()``
    until it ends, then ``env.reset()``), over a vector env: every env autoresets, and the loop steps until
    ``num_episodes`` whole episodes are recorded. Minari's dummy envs all end after the same number of
    steps, so a number of episodes that ``num_envs`` divides is met exactly."""
    env.reset(seed=seed)
    env.action_space.seed(seed)
    while env.num_episodes < num_episodes:
        env.step(env.action_space.sample())


def create_dummy_dataset_with_collecter_env_helper(dataset_id, env, num_episodes=10, **kwargs):
    """Minari's helper of the same name, with its loop as `record_episodes` (give the collector
    ``max_episodes=num_episodes`` for Minari's count where episodes of several envs may end together)."""
    # Step the environment, DataCollector wrapper will do the data collection job
    record_episodes(env, num_episodes)

    # Create Minari dataset and store locally
    dataset = env.create_dataset(
        dataset_id=dataset_id,
        algorithm_name="random_policy",
        code_permalink="https://github.com/Farama-Foundation/Minari/blob/main/tests/common.py",
        author="Farama",
        author_email="farama@farama.org",
        description="Test dataset for Minari",
        **kwargs,
    )

    assert dataset_id in minari.list_local_datasets()
    return dataset
