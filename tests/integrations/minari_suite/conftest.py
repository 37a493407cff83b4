# Copyright Farama Foundation. Licensed under the Apache License, Version 2.0 (the "License"); you may not
# use this file except in compliance with the License. You may obtain a copy of the License at
# http://www.apache.org/licenses/LICENSE-2.0. Unless required by applicable law or agreed to in writing,
# software distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR
# CONDITIONS OF ANY KIND, either express or implied. See the License for the specific language governing
# permissions and limitations under the License.
#
# From Minari 0.5.4's tests/conftest.py: unchanged, but for the dummy envs' module (minari_common).
"""Minari's fixtures: a temporary dataset folder per test, and its dummy envs registered."""

import tempfile

import pytest
from gymnasium import register, registry
from pytest import MonkeyPatch


@pytest.fixture(autouse=True)
def tmp_dataset_dir():
    """Generate a temporary directory for Minari datasets."""
    tmp_dir = tempfile.TemporaryDirectory()
    with MonkeyPatch.context() as mp:
        mp.setenv("MINARI_DATASETS_PATH", tmp_dir.name)
        yield tmp_dir.name
    tmp_dir.cleanup()


@pytest.fixture
def register_dummy_envs():
    env_names = [
        "DummyBoxEnv",
        "DummyInfoEnv",
        "DummySingleStepEnv",
        "DummyInconsistentInfoEnv",
        "DummyMultiDimensionalBoxEnv",
        "DummyMultiSpaceEnv",
        "DummyTupleDiscreteBoxEnv",
        "DummyDictEnv",
        "DummyTupleEnv",
        "DummyTextEnv",
        "DummyComboEnv",
        "DummyImageObsEnv",
        "DummyGrayscaleImageObsEnv",
    ]
    for env_name in env_names:
        register(
            id=f"{env_name}-v0",
            entry_point=f"minari_common:{env_name}",
            max_episode_steps=5,
        )

    yield

    for env_name in env_names:
        registry.pop(f"{env_name}-v0")
