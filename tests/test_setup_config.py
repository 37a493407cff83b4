"""`torchwm.setup_config`: either kind of setup from one config, told apart by the ``[multiagent]`` table;
``torchwm.load_config`` and ``torchwm.make_vec_from_config`` are its."""

from __future__ import annotations

import numpy as np

import torchwm
import torchwm.multiagent as ma
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.setup_config import load_setup_config
from torchwm.spec import VecSpec

MULTIAGENT = {"num_envs": 2, "seed": 0, "multiagent": {"env": "mpe2.simple_spread_v3"}, "run": {"steps": 9}}


def test_the_table_tells_the_kind_of_setup():
    spec, run = load_setup_config(MULTIAGENT)
    assert isinstance(spec, MultiAgentSpec) and run.steps == 9
    assert spec == ma.load_config(MULTIAGENT)
    single, _ = load_setup_config({"id": "CartPole-v1", "num_envs": 2})
    assert isinstance(single, VecSpec) and single == torchwm.config.load_config(
        {"id": "CartPole-v1", "num_envs": 2}
    )


def test_torchwm_load_config_and_make_vec_from_config_take_either_kind():
    assert torchwm.load_config(MULTIAGENT) == ma.load_config(MULTIAGENT)
    assert isinstance(torchwm.load_config({"id": "CartPole-v1"}), VecSpec)
    spec = ma.load_config(MULTIAGENT)
    with (
        torchwm.make_vec_from_config(MULTIAGENT) as from_table,
        torchwm.make_vec_from_config(spec) as from_spec,
    ):
        assert from_table.num_envs == from_spec.num_envs == 6
        np.testing.assert_array_equal(from_table.reset()[0], from_spec.reset()[0])
    with torchwm.make_vec_from_config(spec, ["num_envs=1"]) as one:
        assert one.num_envs == 3
    with torchwm.make_vec_from_config({"id": "CartPole-v1", "num_envs": 2}) as single:
        assert single.num_envs == 2
    with torchwm.make_vec_from_config(torchwm.config.load_config({"id": "CartPole-v1"})) as from_vec_spec:
        assert from_vec_spec.num_envs == 1
