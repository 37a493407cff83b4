"""Config files: TOML, YAML and dicts validated into a VecSpec, with errors that name the key."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import torchwm
from torchwm.config import dump_config, load_run_config
from torchwm.errors import ConfigError
from torchwm.factory import resolve_spec

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = sorted((ROOT / "configs").glob("*.*"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_example_config_validates(path):
    spec = torchwm.load_config(path)
    assert spec.num_envs >= 1 and spec.backend in {"shmem", "ale-native", "sync", "subproc", "ray"}


def test_toml_yaml_and_dict_give_the_same_spec(tmp_path):
    data = {"id": "CartPole-v1", "num_envs": 3, "seed": 4, "wrappers": [{"name": "clip_reward", "max_reward": 0.5}]}
    (tmp_path / "a.toml").write_text('id = "CartPole-v1"\nnum_envs = 3\nseed = 4\n[[wrappers]]\nname = "clip_reward"\nmax_reward = 0.5\n')
    (tmp_path / "a.yaml").write_text("id: CartPole-v1\nnum_envs: 3\nseed: 4\nwrappers:\n  - {name: clip_reward, max_reward: 0.5}\n")
    expected = resolve_spec("CartPole-v1", 3, seed=4, wrappers=[{"name": "clip_reward", "max_reward": 0.5}])
    assert torchwm.load_config(data) == torchwm.load_config(tmp_path / "a.toml") == torchwm.load_config(tmp_path / "a.yaml") == expected


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"id": "CartPole-v1", "num_env": 2}, "num_env"),
        ({"id": "CartPole-v1", "wrappers": [{"name": "clip_reward"}, {"name": "frame_stack", "stack_size": "four"}]},
         'wrappers[1].stack_size: expected an integer, got "four"'),
        ({"id": "CartPole-v1", "num_envs": "many"}, "num_envs"),
        ({"id": "CartPole-v1", "backend": "shmemm"}, "unknown backend 'shmemm'"),
        ({"id": "CartPole-v1", "wrappers": [{"name": "frame_stak"}]}, "unknown wrapper 'frame_stak'"),
        ({"id": "CartPole-v1", "wrappers": [{"name": "frame_stack", "stack": 2}]}, "wrappers[0]"),
        ({"num_envs": 2}, "id"),
    ],
)
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(ConfigError) as info:
        torchwm.load_config(data)
    assert message in str(info.value)


def test_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="missing.toml: no such file"):
        torchwm.load_config(tmp_path / "missing.toml")
    (tmp_path / "broken.toml").write_text("id = [unclosed\n")
    with pytest.raises(ConfigError, match="broken.toml"):
        torchwm.load_config(tmp_path / "broken.toml")
    (tmp_path / "evil.yaml").write_text("!!python/object/apply:os.system ['echo hacked']\n")
    with pytest.raises(ConfigError, match="safe_load"):
        torchwm.load_config(tmp_path / "evil.yaml")


def test_environment_variables_and_defaults(monkeypatch):
    monkeypatch.setenv("TWM_ENVS", "6")
    monkeypatch.delenv("TWM_UNSET", raising=False)
    spec = torchwm.load_config({"id": "CartPole-v1", "num_envs": "${TWM_ENVS}", "backend": "${TWM_UNSET:-sync}"})
    assert (spec.num_envs, spec.backend) == (6, "sync")


def test_set_overrides_dotted_keys():
    spec, run = load_run_config(
        ROOT / "configs" / "pong.toml",
        ["num_envs=3", "backend=sync", "wrappers[1].stack_size=2", "env_kwargs.repeat_action_probability=0.0", "run.steps=7"],
    )
    assert (spec.num_envs, spec.backend, spec.wrappers[1].kwargs["stack_size"]) == (3, "sync", 2)
    assert spec.env_kwargs["repeat_action_probability"] == 0.0 and run.steps == 7


ROLLOUT = """
import sys, numpy as np, torchwm
envs = torchwm.make_vec_from_config(sys.argv[1])
obs, _ = envs.reset()
out = [obs]
rng = np.random.default_rng(0)
for _ in range(40):
    obs, rewards, terminations, truncations, _ = envs.step(rng.integers(0, envs.single_action_space.n, envs.num_envs))
    out += [obs, rewards, terminations, truncations]
envs.close()
np.savez(sys.argv[2], *out)
"""


@pytest.mark.parametrize("fmt", ["toml", "yaml"])
def test_resolved_config_reproduces_trajectories_in_a_new_process(tmp_path, fmt):
    spec = resolve_spec("ALE/Breakout-v5", 2, seed=3, env_kwargs={"max_num_frames_per_episode": 600})
    text = dump_config(spec, fmt)
    for key in ("repeat_action_probability", "noop_max", "frame_skip", "autoreset_mode", "seed", "gymnasium", "ale-py"):
        assert key in text
    path = tmp_path / f"resolved.{fmt}"
    path.write_text(text)
    assert torchwm.load_config(path) == spec
    script = tmp_path / "rollout.py"
    script.write_text(ROLLOUT)
    runs = []
    for name in ("first", "second"):
        out = tmp_path / f"{name}.npz"
        subprocess.run([sys.executable, str(script), str(path), str(out)], check=True, timeout=120, env=dict(os.environ))
        runs.append(np.load(out))
    with torchwm.make_vec_from_config(spec) as envs:
        obs, _ = envs.reset()
    assert np.array_equal(runs[0]["arr_0"], obs)
    for key in runs[0].files:
        assert np.array_equal(runs[0][key], runs[1][key]), key
