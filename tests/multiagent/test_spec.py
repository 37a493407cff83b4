"""`torchwm.multiagent.spec`: make_vec's options declared once, and `MultiAgentSpec`, a setup as plain
data."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import torchwm.multiagent as ma
from torchwm.errors import UnknownNameError
from torchwm.multiagent.spec import MultiAgentSpec, OptionConflictError, check_make_vec_options, options

SPREAD = "mpe2.simple_spread_v3"


def test_every_option_of_make_vec_is_declared_once_with_make_vec_s_default():
    parameters = inspect.signature(ma.make_vec).parameters
    declared = {option.name: option for option in options()}
    keywords = {name for name, p in parameters.items() if p.kind is not p.VAR_KEYWORD}
    # make_vec's env_kwargs are its **env_kwargs; every other parameter is a declared option, and back.
    assert keywords == set(declared) - {"env_kwargs"}
    for name in keywords - {"env"}:
        assert parameters[name].default == declared[name].default, name
    assert declared["env"].default is dataclasses.MISSING


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"layout": "rows"}, ValueError),
        ({"dead_agents": "drop"}, ValueError),
        ({"pad_spaces": "yes"}, TypeError),
        ({"info_format": "dict"}, ValueError),
        ({"num_envs": 0}, ValueError),
        ({"autoreset_mode": "sometimes"}, ValueError),
        ({"seed": -1}, ValueError),
        ({"autoreset_seeds": 1}, TypeError),
        ({"backend_kwargs": [1]}, TypeError),
        ({"backend": "shmen"}, UnknownNameError),
        ({"group_map": 3, "layout": "parallel"}, ValueError),
        ({"info_format": "list", "layout": "parallel"}, OptionConflictError),
        ({"group_map": "by_prefix"}, OptionConflictError),
    ],
)
def test_a_spec_and_make_vec_refuse_an_option_with_one_message(values, error):
    with pytest.raises(error) as from_make_vec:
        ma.make_vec(SPREAD, **{"num_envs": 1, **values})
    with pytest.raises(error) as from_spec:
        MultiAgentSpec(env=SPREAD, **values)
    assert str(from_spec.value) == str(from_make_vec.value)


def test_a_spec_holds_a_module_path_only():
    with pytest.raises(
        TypeError, match=r'env must be a PettingZoo module path such as "mpe2.simple_spread_v3"'
    ):
        MultiAgentSpec(env=lambda: None)


def test_checks_normalise_what_they_take():
    checked = check_make_vec_options({"autoreset_mode": "NextStep", "backend_kwargs": None})
    assert checked == {"autoreset_mode": "next_step", "backend_kwargs": {}}


def test_to_dict_writes_the_table_a_file_has_and_from_dict_reads_it_back():
    spec = MultiAgentSpec(
        env=SPREAD,
        env_kwargs={"N": 2},
        num_envs=3,
        backend="shmem",
        backend_kwargs={"num_workers": 2},
        layout="parallel",
        group_map={"team": ["agent_0", "agent_1"]},
        seed=7,
    )
    data = spec.to_dict()
    assert data["multiagent"]["env"] == SPREAD and data["multiagent"]["layout"] == "parallel"
    assert data["num_envs"] == 3 and data["backend_kwargs"] == {"num_workers": 2}
    assert "versions" in data
    assert MultiAgentSpec.from_dict(data) == spec
    with pytest.raises(ValueError, match=r"unknown keys \['wrappers'\]"):
        MultiAgentSpec.from_dict({**data, "wrappers": []})
