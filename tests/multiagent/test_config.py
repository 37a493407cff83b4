"""`torchwm.multiagent.config`: config files with a ``[multiagent]`` table, validated with make_vec's own
checks, round-tripping, and building what make_vec builds."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import yaml

import torchwm.config
import torchwm.multiagent as ma
import torchwm.multiagent.config as ma_config
from torchwm.config import dump_config
from torchwm.errors import ConfigError
from torchwm.extras import MissingExtraError
from torchwm.multiagent.spec import MultiAgentSpec

SPREAD = "mpe2.simple_spread_v3"
TOML = textwrap.dedent(
    """\
    num_envs = 2
    seed = 3
    [multiagent]
    env = "mpe2.simple_spread_v3"
    dead_agents = "zero"
    [multiagent.env_kwargs]
    N = 2
    max_cycles = 10
    [run]
    steps = 5
    """
)


def test_toml_yaml_and_a_dict_give_one_spec(tmp_path):
    (tmp_path / "c.toml").write_text(TOML)
    as_dict = {
        "num_envs": 2,
        "seed": 3,
        "multiagent": {"env": SPREAD, "dead_agents": "zero", "env_kwargs": {"N": 2, "max_cycles": 10}},
        "run": {"steps": 5},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(as_dict))
    expected = MultiAgentSpec(
        env=SPREAD, env_kwargs={"N": 2, "max_cycles": 10}, num_envs=2, seed=3, dead_agents="zero"
    )
    assert ma.load_config(tmp_path / "c.toml") == expected
    assert ma.load_config(tmp_path / "c.yaml") == expected
    assert ma.load_config(as_dict) == expected
    spec, run = ma_config.load_run_config(as_dict)
    assert run.steps == 5
    # make_vec's defaults, its autoreset mode (same_step, SuperSuit's) among them.
    assert (spec.layout, spec.autoreset_mode, spec.backend) == ("agents", "same_step", "sync")


@pytest.mark.parametrize("format", ["toml", "yaml", "json"])
def test_the_resolved_config_loads_back_into_an_equal_spec(tmp_path, format):
    spec, run = ma_config.load_run_config(_table(TOML))
    path = tmp_path / f"resolved.{format}"
    path.write_text(dump_config(spec, format, run=run))
    assert ma_config.load_run_config(path) == (spec, run)


def _table(text: str) -> dict:
    from torchwm.config import tomllib  # the standard library's, or tomli before Python 3.11

    return tomllib.loads(text)


def test_overrides_and_backend_tables_apply_as_in_single_agent_configs():
    data = {
        **_table(TOML),
        "backend": "shmem",
        "backends": {"shmem": {"num_workers": 2}, "sync": {"copy": False}},
    }
    spec = ma.load_config(data, ["multiagent.layout=parallel", "num_envs=4"])
    assert (spec.layout, spec.num_envs, spec.backend_kwargs) == ("parallel", 4, {"num_workers": 2})
    switched, _ = ma_config.load_run_config(data, backend="sync")
    assert switched.backend_kwargs == {"copy": False}


@pytest.mark.parametrize(
    ("key", "value", "make_vec_kwargs"),
    [
        ("multiagent.layout", "rows", {"layout": "rows"}),
        ("multiagent.dead_agents", "drop", {"dead_agents": "drop"}),
        ("multiagent.pad_spaces", "yes", {"pad_spaces": "yes"}),
        ("multiagent.info_format", "dict", {"info_format": "dict"}),
        ("num_envs", 0, {"num_envs": 0}),
        ("seed", -1, {"seed": -1}),
        ("autoreset_mode", "sometimes", {"autoreset_mode": "sometimes"}),
        ("autoreset_seeds", 1, {"autoreset_seeds": 1}),
        ("backend", "shmen", {"backend": "shmen"}),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key_in_make_vec_s_words(key, value, make_vec_kwargs):
    data = _table(TOML)
    where, _, name = key.rpartition(".")
    (data[where] if where else data)[name] = value
    with pytest.raises(Exception) as from_make_vec:
        ma.make_vec(SPREAD, **{"num_envs": 1, **make_vec_kwargs})
    with pytest.raises(ConfigError) as from_file:
        ma.load_config(data)
    assert str(from_file.value) == f"{key}: {from_make_vec.value}"
    assert "\n" not in str(from_file.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"multiagent": {"env": SPREAD, "layuot": "agents"}},
            "multiagent.layuot: unknown key (did you mean 'layout'?); the [multiagent] table's keys are: "
            "dead_agents, env, env_kwargs, group_map, info_format, layout, pad_spaces",
        ),
        ({"id": "CartPole-v1", "multiagent": {"env": SPREAD}}, "id: unknown key (the env is multiagent.env)"),
        (
            {"wrappers": [], "multiagent": {"env": SPREAD}},
            "wrappers: unknown key (a multi-agent setup has no",
        ),
        ({"multiagent": {}}, "multiagent.env: required key missing"),
        ({"multiagent": {"env": "mpe2.nope_v3"}}, "multiagent.env: env='mpe2.nope_v3' is no importable"),
        (
            {"multiagent": {"env": SPREAD, "layout": "parallel", "info_format": "list"}},
            'multiagent.info_format: info_format="list" gives one info dict per row',
        ),
        ({"multiagent": {"env": SPREAD, "group_map": "by_prefix"}}, "multiagent.group_map: group_map keys"),
        (
            {"backend": "shmem", "backend_kwargs": {"num_worker": 2}, "multiagent": {"env": SPREAD}},
            "backend_kwargs.num_worker: backend 'shmem' has no option 'num_worker' "
            "(did you mean 'num_workers'?)",
        ),
        (
            {"run": {"stepz": 1}, "multiagent": {"env": SPREAD}},
            "run.stepz: unknown key (did you mean 'steps'?)",
        ),
    ],
)
def test_bad_keys_are_one_line_naming_the_key(data, message):
    with pytest.raises(ConfigError) as caught:
        ma.load_config(data)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_file_s_error_starts_with_its_name(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[multiagent]\nenv = "mpe2.simple_spread_v3"\nlayout = "rows"\n')
    with pytest.raises(ConfigError, match=rf"^{path}: multiagent.layout: layout must be one of"):
        ma.load_config(path)


def test_the_single_agent_loader_refuses_a_multiagent_table_naming_the_loaders():
    with pytest.raises(
        ConfigError,
        match=r"^multiagent: this config describes a multi-agent setup .*torchwm.load_config or "
        r"torchwm.multiagent.load_config",
    ):
        torchwm.config.load_config({"multiagent": {"env": SPREAD}})


def test_a_missing_pettingzoo_or_mpe2_is_the_extra_s_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pettingzoo.utils.env", None)
    with pytest.raises(MissingExtraError, match=r"needs PettingZoo, .*\[pettingzoo\]"):
        ma.load_config({"multiagent": {"env": SPREAD}})
    monkeypatch.delitem(sys.modules, "pettingzoo.utils.env")
    real = ma_config.importlib.util.find_spec
    monkeypatch.setattr(
        ma_config.importlib.util, "find_spec", lambda name, *a: None if name == "mpe2" else real(name, *a)
    )
    with pytest.raises(
        MissingExtraError,
        match=r"^multiagent.env 'mpe2.simple_spread_v3' needs PettingZoo, .*"
        r"\[pettingzoo\]",
    ):
        ma.load_config({"multiagent": {"env": SPREAD}})


def test_make_vec_from_config_builds_what_make_vec_builds():
    data = _table(TOML)
    with (
        ma.make_vec_from_config(data) as from_file,
        ma.make_vec(SPREAD, 2, seed=3, dead_agents="zero", N=2, max_cycles=10) as by_hand,
    ):
        assert from_file.num_envs == by_hand.num_envs == 4
        obs, _ = from_file.reset()
        expected, _ = by_hand.reset()
        np.testing.assert_array_equal(obs, expected)
        actions = from_file.action_space.sample()
        for _ in range(12):  # across the autoreset of max_cycles=10
            got = from_file.step(actions)
            want = by_hand.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b)
    spec = ma.load_config(data)
    with ma.make_vec_from_config(spec) as envs, ma.make_vec_from_config(spec, ["num_envs=1"]) as one:
        assert (envs.num_envs, one.num_envs) == (4, 2)
