"""Hydra's instantiate builds torchwm envs from OmegaConf configs with torchwm's own argument names."""

import numpy as np
import pytest

hydra_utils = pytest.importorskip("hydra.utils")
from omegaconf import OmegaConf  # noqa: E402

import torchwm  # noqa: E402


def test_instantiate_make_vec_from_an_omegaconf_config():
    config = OmegaConf.create(
        {
            "_target_": "torchwm.make_vec",
            "id": "CartPole-v1",
            "num_envs": 2,
            "seed": 0,
            "backend": "sync",
            "wrappers": [{"name": "clip_reward", "max_reward": 0.5}],
            "backend_kwargs": {"copy": True},
        }
    )
    envs = hydra_utils.instantiate(config)
    try:
        assert envs.spec == torchwm.factory.resolve_spec(
            "CartPole-v1",
            2,
            seed=0,
            wrappers=[{"name": "clip_reward", "max_reward": 0.5}],
            backend_kwargs={"copy": True},
        )
        envs.reset()
        _, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))
        assert rewards.tolist() == [0.5, 0.5]
    finally:
        envs.close()
