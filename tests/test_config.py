"""Config files: formats, validation messages, env interpolation, overrides, the resolved config."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

import torchwm
from torchwm.config import (
    apply_overrides,
    dump_config,
    interpolate_env,
    load_run_config,
    parse_value,
    tomllib,
)
from torchwm.errors import ConfigError, UnknownNameError
from torchwm.factory import resolve_spec

ROOT = Path(__file__).resolve().parent.parent

CARTPOLE = {
    "id": "CartPole-v1",
    "num_envs": 2,
    "seed": 3,
    "autoreset_mode": "same_step",
    "wrappers": [{"name": "frame_stack", "stack_size": 3}],
}


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


# -- formats ------------------------------------------------------------------------------------


def test_toml_yaml_json_and_dict_give_the_same_spec(tmp_path):
    expected = resolve_spec(
        "CartPole-v1",
        2,
        seed=3,
        autoreset_mode="same_step",
        wrappers=[{"name": "frame_stack", "stack_size": 3}],
    )
    toml_file = write(
        tmp_path / "c.toml",
        """
        id = "CartPole-v1"
        num_envs = 2
        seed = 3
        autoreset_mode = "same_step"
        [[wrappers]]
        name = "frame_stack"
        stack_size = 3
    """,
    )
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(yaml.safe_dump(CARTPOLE))
    json_file = tmp_path / "c.json"
    json_file.write_text(json.dumps(CARTPOLE))
    for source in (CARTPOLE, toml_file, str(yaml_file), json_file):
        assert torchwm.load_config(source) == expected, source


def test_defaults_match_make_vec():
    assert torchwm.load_config({"id": "ALE/Pong-v5"}) == resolve_spec("ALE/Pong-v5")


def test_size_adds_the_pixels_wrapper_first():
    spec = torchwm.load_config({"id": "CartPole-v1", "size": [64, 48], "wrappers": ["frame_stack"]})
    assert [w.name for w in spec.wrappers] == ["pixels", "frame_stack"]
    assert spec.wrappers[0].kwargs == {
        "width": 64,
        "height": 48,
        "render_only": True,
        "render_key": "pixels",
        "obs_key": "state",
    }


def test_run_table_is_read_and_checked():
    spec, run = load_run_config({"id": "CartPole-v1", "run": {"steps": 7, "policy": "mod.sub:act"}})
    assert (run.steps, run.policy) == (7, "mod.sub:act")
    assert spec.id == "CartPole-v1"
    with pytest.raises(ConfigError, match=r"^run\.steps: expected an integer >= 1, got 0$"):
        load_run_config({"id": "CartPole-v1", "run": {"steps": 0}})
    with pytest.raises(ConfigError, match=r'^run\.policy: expected module:function, got "random"$'):
        load_run_config({"id": "CartPole-v1", "run": {"policy": "random"}})


def test_make_vec_from_config_builds_dicts_files_and_specs(tmp_path):
    spec = torchwm.load_config(CARTPOLE)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CARTPOLE))
    for source in (CARTPOLE, path, spec):
        with torchwm.make_vec_from_config(source) as envs:
            assert envs.spec == spec
            obs, _ = envs.reset()
            assert obs.shape == (2, 3, 4)
    with torchwm.make_vec_from_config(spec, overrides=["num_envs=1"]) as envs:
        assert envs.spec == spec.replace(num_envs=1)


# -- errors name the key --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {
                "id": "ALE/Pong-v5",
                "wrappers": [{"name": "atari_preprocessing"}, {"name": "frame_stack", "stack_size": "four"}],
            },
            'wrappers[1].stack_size: expected an integer, got "four"',
        ),
        (
            {"id": "CartPole-v1", "wrappers": [{"name": "frame_stack", "padding": "one"}]},
            "wrappers[0].padding: expected 'zero' or 'reset', got \"one\"",
        ),
        (
            {"id": "CartPole-v1", "wrappers": [{"name": "frame_stack", "stack": 2}]},
            "wrappers[0].stack: wrapper 'frame_stack' has no option 'stack' (did you mean 'stack_size'?); "
            "its options are: stack_size, padding",
        ),
        (
            {"id": "CartPole-v1", "wrappers": [{"stack_size": 2}]},
            "wrappers[0].name: expected the name of a registered wrapper, got no name key",
        ),
        (
            {"id": "CartPole-v1", "wrappers": [{"name": "resize"}]},
            "wrappers[0]: wrapper 'resize': option 'width' is required and was not given",
        ),
        (
            {"id": "CartPole-v1", "wrappers": [{"name": "atari_preprocessing"}]},
            "wrappers[0]: wrapper 'atari_preprocessing' works only on atari envs, and 'CartPole-v1' is not "
            "one",
        ),
        (
            {"id": "CartPole-v1", "wrappers": [3]},
            "wrappers[0]: expected a wrapper name or a table with a name key, got 3",
        ),
        ({"id": "CartPole-v1", "num_envs": "4"}, 'num_envs: expected an integer, got "4"'),
        ({"id": "CartPole-v1", "num_envs": 0}, "num_envs: expected an integer >= 1, got 0"),
        ({"id": "CartPole-v1", "seed": 1.5}, "seed: expected an integer, got 1.5"),
        ({"id": "CartPole-v1", "fused": "yes"}, 'fused: expected true or false, got "yes"'),
        (
            {"id": "CartPole-v1", "autoreset_seeds": "yes"},
            'autoreset_seeds: expected true or false, got "yes"',
        ),
        (
            {"id": "CartPole-v1", "size": [64]},
            "size: expected two positive integers [width, height], got [64]",
        ),
        ({"id": "CartPole-v1", "env_kwargs": [1]}, "env_kwargs: expected a table, got [1]"),
        (
            {"id": "CartPole-v1", "num_envz": 2},
            "num_envz: unknown key (did you mean 'num_envs'?); the keys are: autoreset_mode, "
            "autoreset_seeds, backend, ",
        ),
        (
            {"id": "CartPole-v1", "run": {"step": 2}},
            "run.step: unknown key (did you mean 'steps'?); the keys are: policy, steps",
        ),
        ({"num_envs": 2}, "id: required key missing"),
        (
            {"id": "CartPole-v1", "autoreset_mode": "sometimes"},
            "autoreset_mode: autoreset_mode must be one of",
        ),
        (
            {"id": "CartPole-v1", "family": "atari"},
            "family: 'CartPole-v1' is a generic env, but the config says 'atari'",
        ),
    ],
)
def test_bad_values_name_the_key(data, message):
    with pytest.raises(ConfigError) as info:
        torchwm.load_config(data)
    assert str(info.value).startswith(message), str(info.value)


def test_unknown_names_keep_the_registry_error_as_cause():
    with pytest.raises(
        ConfigError, match=r"^backend: unknown backend 'shmen'\. Did you mean 'shmem'"
    ) as info:
        torchwm.load_config({"id": "CartPole-v1", "backend": "shmen"})
    assert isinstance(info.value.__cause__, UnknownNameError)
    with pytest.raises(
        ConfigError, match=r"^wrappers\[0\]\.name: unknown wrapper 'frame_stak'\. Did you mean 'frame_stack'"
    ):
        torchwm.load_config({"id": "CartPole-v1", "wrappers": [{"name": "frame_stak"}]})
    with pytest.raises(ConfigError, match=r"^id: unknown env id 'CartPol-v1'\. Did you mean 'CartPole-v1'"):
        torchwm.load_config({"id": "CartPol-v1"})


def test_file_errors_start_with_the_file_name(tmp_path):
    bad = write(
        tmp_path / "bad.toml",
        """
        id = "CartPole-v1"
        [[wrappers]]
        name = "frame_stack"
        stack_size = "four"
    """,
    )
    with pytest.raises(
        ConfigError, match=r"bad\.toml: wrappers\[0\]\.stack_size: expected an integer, got \"four\"$"
    ):
        torchwm.load_config(bad)
    assert isinstance(ConfigError("x"), ValueError)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("broken.toml", "id = \n", r"broken\.toml: not valid TOML: Invalid value \(at line 1, column 6\)"),
        ("broken.yaml", "id: [unclosed\n", r"broken\.yaml: not valid YAML \(line 2, column 1\)"),
        ("broken.json", "{", r"broken\.json: not valid JSON"),
        (
            "evil.yaml",
            "id: !!python/object/apply:os.system [echo hacked]\n",
            r"evil\.yaml: not allowed in a config \(line 1\): could not determine a constructor for the tag "
            r"'tag:yaml\.org,2002:python/object/apply:os\.system'; configs hold plain data only",
        ),
        (
            "list.yaml",
            "- 1\n- 2\n",
            r"list\.yaml: expected a table of keys \(id, num_envs, \.\.\.\) at the top, got list",
        ),
        (
            "notes.txt",
            "id = 1",
            r"notes\.txt: not a config file: expected a name ending in \.toml, \.yaml, \.yml, \.json, "
            r"got 'notes\.txt'",
        ),
    ],
)
def test_unreadable_files(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        torchwm.load_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: no such file$"):
        torchwm.load_config(tmp_path / "nope.toml")


# -- environment variables ----------------------------------------------------------------------


def test_env_interpolation(monkeypatch):
    monkeypatch.setenv("TWM_ENVS", "3")
    monkeypatch.setenv("TWM_NAME", "Cart")
    monkeypatch.delenv("TWM_UNSET", raising=False)
    data = interpolate_env(
        {
            "num_envs": "${TWM_ENVS}",
            "seed": "${TWM_UNSET:-7}",
            "id": "${TWM_NAME}Pole-v1",
            "env_kwargs": {"note": "$${TWM_ENVS} and ${TWM_UNSET:-}"},
            "wrappers": [{"name": "frame_stack", "stack_size": "${TWM_UNSET:-2}"}],
        }
    )
    # A whole-value reference takes the type of its text; inside a longer string it stays text.
    assert data == {
        "num_envs": 3,
        "seed": 7,
        "id": "CartPole-v1",
        "env_kwargs": {"note": "${TWM_ENVS} and "},
        "wrappers": [{"name": "frame_stack", "stack_size": 2}],
    }


def test_env_interpolation_in_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TWM_ENVS", "5")
    path = write(
        tmp_path / "c.yaml",
        """
        id: CartPole-v1
        num_envs: ${TWM_ENVS}
        backend: ${TWM_BACKEND_UNSET:-sync}
    """,
    )
    spec = torchwm.load_config(path)
    assert (spec.num_envs, spec.backend) == (5, "sync")


def test_unset_variable_without_default_names_the_key(monkeypatch):
    monkeypatch.delenv("TWM_UNSET", raising=False)
    with pytest.raises(
        ConfigError, match=r"^wrappers\[0\]\.stack_size: the environment variable TWM_UNSET is not set"
    ):
        torchwm.load_config(
            {"id": "CartPole-v1", "wrappers": [{"name": "frame_stack", "stack_size": "${TWM_UNSET}"}]}
        )


# -- overrides ----------------------------------------------------------------------------------


def test_overrides_reach_nested_keys_and_list_items():
    data = {"id": "ALE/Pong-v5", "wrappers": [{"name": "atari_preprocessing"}, {"name": "frame_stack"}]}
    out = apply_overrides(
        data,
        [
            "num_envs=16",
            "backend_kwargs.num_workers=2",
            "wrappers[1].stack_size=2",
            "size=[64, 64]",
            "seed=null",
            "id=ALE/Breakout-v5",
            "fused=false",
        ],
    )
    assert out == {
        "id": "ALE/Breakout-v5",
        "num_envs": 16,
        "backend_kwargs": {"num_workers": 2},
        "size": [64, 64],
        "seed": None,
        "fused": False,
        "wrappers": [{"name": "atari_preprocessing"}, {"name": "frame_stack", "stack_size": 2}],
    }
    assert data["wrappers"][1] == {"name": "frame_stack"}  # the input is not changed


def test_overrides_through_load_config():
    spec = torchwm.load_config(
        {"id": "CartPole-v1", "wrappers": [{"name": "frame_stack"}]},
        ["num_envs=4", "wrappers[0].stack_size=2", 'wrappers[0].padding="reset"'],
    )
    assert spec.num_envs == 4
    assert spec.wrappers[0].kwargs == {"stack_size": 2, "padding": "reset"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("num_envs", r"--set 'num_envs': expected key=value"),
        ("wrappers[3].stack_size=2", r"^wrappers\[3\]: no such item to override \(the list has 1 items"),
        ("a..b=1", r"--set 'a\.\.b': expected a key like"),
        ("id.x=1", r"^id\.x: id is a str, not a table$"),
        ("id.x.y=1", r"^id\.x\.y: id is a str, not a table$"),
    ],
)
def test_bad_overrides(override, message):
    with pytest.raises(ConfigError, match=message):
        torchwm.load_config({"id": "CartPole-v1", "wrappers": [{"name": "frame_stack"}]}, [override])


def test_parse_value():
    assert parse_value("16") == 16
    assert parse_value("2.5") == 2.5
    assert parse_value("true") is True
    assert parse_value("null") is None
    assert parse_value('"16"') == "16"
    assert parse_value("[64, 64]") == [64, 64]
    assert parse_value("{a = 1}") == {"a": 1}
    assert parse_value("ALE/Pong-v5") == "ALE/Pong-v5"


# -- the resolved config ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        resolve_spec("ALE/Pong-v5", 2, seed=0),
        resolve_spec("PongNoFrameskip-v4", 1),
        resolve_spec("Pong-v4", 1),  # frameskip=(2, 5): a tuple, written as a list
        resolve_spec(
            "CartPole-v1", 2, size=(32, 32), autoreset_mode="disabled", backend_kwargs={"copy": False}
        ),
    ],
    ids=["pong-v5", "pong-noframeskip-v4", "pong-v4", "cartpole-pixels"],
)
@pytest.mark.parametrize("fmt", ["toml", "yaml", "json"])
def test_resolved_config_round_trips(spec, fmt, tmp_path):
    path = tmp_path / f"resolved.{fmt}"
    path.write_text(dump_config(spec, fmt))
    assert torchwm.load_config(path) == spec
    assert torchwm.load_config(spec.to_dict()) == spec


def test_resolved_config_makes_every_default_explicit():
    data = tomllib.loads(dump_config(resolve_spec("ALE/Pong-v5", 2, seed=0)))
    assert data["env_kwargs"]["repeat_action_probability"] == 0.25
    assert data["env_kwargs"]["frameskip"] == 1
    assert data["wrappers"][0] == {
        "name": "atari_preprocessing",
        "noop_max": 30,
        "frame_skip": 4,
        "screen_size": 84,
        "grayscale": True,
        "terminal_on_life_loss": False,
        "scale_obs": False,
        "grayscale_newaxis": False,
    }
    assert data["wrappers"][1] == {"name": "frame_stack", "stack_size": 4, "padding": "zero"}
    assert (data["autoreset_mode"], data["seed"], data["family"]) == ("next_step", 0, "atari")
    assert set(data["versions"]) == {"torchwm", "gymnasium", "ale-py"}


def test_other_versions_warn():
    data = resolve_spec("CartPole-v1").to_dict()
    data["versions"]["gymnasium"] = "0.0.1"
    with pytest.warns(UserWarning, match=r"written with gymnasium 0\.0\.1 \(installed: "):
        torchwm.load_config(data)


ROLLOUT = """
import sys
import numpy as np
import torchwm

envs = torchwm.make_vec_from_config(sys.argv[1])
obs, _ = envs.reset()
frames, rewards, dones = [obs], [], []
for step in range(int(sys.argv[3])):
    obs, reward, terminated, truncated, _ = envs.step(envs.action_space.sample())
    frames.append(obs)
    rewards.append(reward)
    dones.append(terminated | truncated)
envs.close()
np.savez(sys.argv[2], obs=np.stack(frames), rewards=np.stack(rewards), dones=np.stack(dones))
"""


def test_resolved_config_gives_the_same_trajectory_in_a_new_process(tmp_path):
    steps = 40
    with torchwm.make_vec("ALE/Pong-v5", num_envs=2, seed=11) as envs:
        resolved = tmp_path / "resolved.toml"
        resolved.write_text(dump_config(envs.spec))
        obs, _ = envs.reset()
        frames, rewards = [obs], []
        for _ in range(steps):
            obs, reward, _, _, _ = envs.step(envs.action_space.sample())
            frames.append(obs)
            rewards.append(reward)
    script = tmp_path / "rollout.py"
    script.write_text(ROLLOUT)
    out = tmp_path / "rollout.npz"
    result = subprocess.run(
        [sys.executable, str(script), str(resolved), str(out), str(steps)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    other = np.load(out)
    assert np.array_equal(other["obs"], np.stack(frames))
    assert np.array_equal(other["rewards"], np.stack(rewards))
    # Sticky actions (v5: 0.25) make the trajectory depend on the seed: a different seed must differ.
    with torchwm.make_vec_from_config(resolved, overrides=["seed=12"]) as envs:
        obs, _ = envs.reset()
        for _ in range(steps):
            obs, *_ = envs.step(envs.action_space.sample())
    assert not np.array_equal(obs, frames[-1])


# -- the example configs ------------------------------------------------------------------------

EXAMPLES = sorted(
    p for p in (ROOT / "torchwm" / "configs").iterdir() if p.suffix in (".toml", ".yaml", ".yml", ".json")
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_config_validates(path):
    raw = torchwm.config.read_config(path)
    if "multiagent" in raw:  # a multi-agent setup: torchwm.multiagent's loader reads it
        from torchwm.multiagent import load_config as load_multiagent_config

        spec = load_multiagent_config(path)
        assert (spec.env, spec.num_envs) == (raw["multiagent"]["env"], raw["num_envs"])
        return
    registered = torchwm.plugins.registry("backend").names()
    if raw.get("backend", "sync") in registered or "${" in str(raw.get("backend")):
        spec = torchwm.load_config(path)
    else:
        # A backend from a plugin that is not installed: the rest of the file must still validate.
        with pytest.raises(ConfigError, match=rf"backend: unknown backend {raw['backend']!r}"):
            torchwm.load_config(path)
        spec = torchwm.load_config(path, ['backend="sync"', "backend_kwargs={}"])
    assert spec.id == raw["id"]
    assert spec.num_envs == raw["num_envs"] if isinstance(raw["num_envs"], int) else spec.num_envs >= 1


def test_shipped_configs_load_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert torchwm.load_config("pong").id == "ALE/Pong-v5"
    assert set(torchwm.config.shipped_configs()) == {p.stem for p in EXAMPLES}
    with pytest.raises(ConfigError, match=r"pnog: not a config file .* \(did you mean 'pong'\?\)"):
        torchwm.load_config("pnog")


def test_a_name_is_a_shipped_config_and_a_path_with_a_suffix_is_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pong").write_text("not a config")  # a file without a suffix does not hide the shipped config
    (tmp_path / "pong.toml").write_text('id = "CartPole-v1"\n')
    assert torchwm.load_config("pong").id == "ALE/Pong-v5"
    assert torchwm.load_config("pong.toml").id == "CartPole-v1"


# -- options per backend ---------------------------------------------------------------------------


def test_only_the_table_of_the_backend_in_use_applies():
    data = {
        "id": "CartPole-v1",
        "num_envs": 2,
        "backend": "shmem",
        "backends": {"shmem": {"num_workers": 2, "timeout": 30}, "sync": {"copy": False}},
    }
    assert torchwm.load_config(data).backend_kwargs == {"num_workers": 2, "timeout": 30}
    assert torchwm.load_config(data, ['backend="sync"']).backend_kwargs == {"copy": False}
    # backend_kwargs applies to whichever backend is in use, over its table.
    assert torchwm.load_config({**data, "backend_kwargs": {"timeout": 5}}).backend_kwargs == {
        "num_workers": 2,
        "timeout": 5,
    }


def test_a_table_for_a_backend_not_installed_is_kept_and_a_typo_is_not():
    base = {"id": "CartPole-v1", "backend": "sync"}
    assert torchwm.load_config({**base, "backends": {"some-plugin-backend": {"x": 1}}}).backend_kwargs == {}
    with pytest.raises(ConfigError, match=r"backends.shmme: unknown backend 'shmme'. Did you mean 'shmem'"):
        torchwm.load_config({**base, "backends": {"shmme": {"num_workers": 2}}})


def test_a_misspelt_backend_option_names_its_table_and_the_closest_option():
    with pytest.raises(
        ConfigError,
        match=r"backends.shmem.num_worker: backend 'shmem' has no option 'num_worker' "
        r"\(did you mean 'num_workers'\?\)",
    ):
        torchwm.load_config(
            {"id": "CartPole-v1", "backend": "shmem", "backends": {"shmem": {"num_worker": 2}}}
        )


def test_switching_backend_drops_the_flat_options_it_does_not_take():
    data = {
        "id": "CartPole-v1",
        "num_envs": 2,
        "backend": "subproc",
        "backend_kwargs": {"num_workers": 2, "timeout": 9},
    }
    with pytest.warns(
        UserWarning, match=r"backend 'sync' does not take backend_kwargs num_workers \(options of 'subproc'\)"
    ):
        spec, _ = torchwm.config.load_run_config(data, backend="sync")
    assert spec.backend == "sync" and spec.backend_kwargs == {"timeout": 9}
    spec, _ = torchwm.config.load_run_config(data, backend="shmem")  # shmem takes both: nothing dropped
    assert spec.backend_kwargs == {"num_workers": 2, "timeout": 9}


def test_unknown_keys_suggest_the_closest():
    with pytest.raises(ConfigError, match=r"num_env: unknown key \(did you mean 'num_envs'\?\)"):
        torchwm.load_config({"id": "CartPole-v1", "num_env": 2})
    with pytest.raises(ConfigError, match=r"run.step: unknown key \(did you mean 'steps'\?\)"):
        torchwm.load_config({"id": "CartPole-v1", "run": {"step": 2}})


def test_env_kwargs_are_checked_against_the_env():
    with pytest.raises(
        ConfigError,
        match=r"env_kwargs.repeat_action_probabilty: the env 'ALE/Pong-v5' .*"
        r"\(did you mean 'repeat_action_probability'\?\)",
    ):
        torchwm.load_config({"id": "pong", "env_kwargs": {"repeat_action_probabilty": 0.1}})
    # gymnasium.make's own arguments are fine too.
    assert (
        torchwm.load_config({"id": "CartPole-v1", "env_kwargs": {"max_episode_steps": 7}}).env_kwargs[
            "max_episode_steps"
        ]
        == 7
    )


# -- a YAML alias bomb -------------------------------------------------------------------------------


def alias_bomb(depth=9):
    lines = [
        'a0: &a0 ["${X:-x}", "${X:-x}", "${X:-x}", "${X:-x}", "${X:-x}", "${X:-x}", "${X:-x}", "${X:-x}", '
        '"${X:-x}"]'
    ]
    for level in range(1, depth):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "id: CartPole-v1\nenv_kwargs:\n" + "\n".join("  " + line for line in lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_in_one_line_and_fast(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(alias_bomb())
    assert len(path.read_bytes()) < 700  # a few hundred bytes standing for 9**9 values
    with pytest.raises(ConfigError, match=r"expands to more than 100,000 values"):
        torchwm.load_config(path)
    # From the command line: one line, status 2, long before the deadline (the old code expanded
    # 387 million strings and was still busy after a minute).
    result = subprocess.run(
        [sys.executable, "-m", "torchwm", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "expands to more than" in result.stderr


def test_a_large_but_honest_config_is_not_refused():
    data = {
        "id": "CartPole-v1",
        "env_kwargs": {},
        "run": {"steps": 1},
        "versions": {f"p{i}": "1" for i in range(5000)},
    }
    assert torchwm.load_config(data).id == "CartPole-v1"


def test_the_config_keys_are_the_setup_options_and_the_files_own():
    """Each setup option (`torchwm.spec.setup_options`) is a key, with its default; the file adds only the
    backends tables, what the resolved config writes and [run]."""
    from torchwm.config import ConfigModel
    from torchwm.spec import setup_options

    options = [option.name for option in setup_options()]
    assert list(ConfigModel.model_fields) == [*options, "backends", "family", "versions", "run"]
    for option in setup_options():
        if option.name != "id":
            assert ConfigModel.model_fields[option.name].default == option.default, option.name
    assert ConfigModel.model_fields["id"].is_required()
