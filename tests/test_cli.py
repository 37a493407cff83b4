"""The `torchwm` command: list, run, bench, check; bad input is one line on stderr and exit status 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchwm.cli import main
from torchwm.plugins import registry

ROOT = Path(__file__).resolve().parent.parent


def torchwm_cli(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "torchwm", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "MPLBACKEND": "Agg"})


def test_list_names_plugin_distribution_and_options(capsys):
    assert main(["list", "backends"]) == 0
    out = capsys.readouterr().out
    assert "sync" in out and "torchwm.vector.sync" in out and "torchwm 0.1.0" in out
    assert main(["list", "wrappers"]) == 0
    out = capsys.readouterr().out
    assert "frame_stack" in out and "stack_size=4" in out


def test_run_an_env_id_prints_speed_and_returns(capsys):
    assert main(["run", "CartPole-v1", "--num-envs", "2", "--steps", "300", "--seed", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "steps per second" in out and "episodes finished" in out and "return: mean" in out


def test_run_with_a_user_policy(tmp_path, monkeypatch, capsys):
    (tmp_path / "always_left.py").write_text(
        "import numpy as np\ndef policy(obs, action_space):\n    return np.zeros(len(obs), dtype=np.int64)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "CartPole-v1", "--num-envs", "1", "--steps", "100", "--seed", "0", "--no-progress",
                 "--policy", "always_left:policy"]) == 0
    out = capsys.readouterr().out
    # Always pushing left ends every CartPole episode in about 10 steps.
    episodes = int(out.split("episodes finished:")[1].split()[0])
    assert episodes >= 5


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.*")), ids=lambda p: p.name)
def test_example_configs_run_from_the_command_line(path):
    backend = __import__("torchwm").load_config(path).backend
    if backend not in registry("backend"):
        pytest.skip(f"backend {backend!r} is a plugin that is not installed here")
    result = torchwm_cli("run", str(path), "--steps", "30", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "steps per second" in result.stdout


def test_print_config_is_the_resolved_config():
    result = torchwm_cli("run", "configs/pong.toml", "--print-config")
    assert result.returncode == 0, result.stderr
    for line in ('id = "ALE/Pong-v5"', "repeat_action_probability = 0.25", "noop_max = 30", 'autoreset_mode = "next_step"'):
        assert line in result.stdout


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        (None, ".toml", "bad.toml: no such"),
        ("id = [unclosed\n", ".toml", "bad.toml"),
        ("id: [CartPole-v1\n", ".yaml", "bad.yaml"),
        ("!!python/object/apply:os.system ['echo hacked']\n", ".yaml", "safe_load"),
        ('id = "CartPole-v1"\nnum_env = 2\n', ".toml", "num_env"),
        ('id = "CartPole-v1"\n[[wrappers]]\nname = "frame_stack"\nstack_size = "four"\n', ".toml",
         'wrappers[0].stack_size: expected an integer, got "four"'),
        ('id = "CartPole-v1"\nbackend = "shmemm"\n', ".toml", "unknown backend 'shmemm'"),
        ('id = "CartPole-v1"\n[[wrappers]]\nname = "nope"\n', ".toml", "unknown wrapper 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    if content is not None:
        path.write_text(content)
    assert main(["run", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_command_line_option_is_status_2():
    result = torchwm_cli("run", "CartPole-v1", "--stepz", "3")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_bench_writes_a_table_json_and_plot(tmp_path):
    plot, data = tmp_path / "bench.png", tmp_path / "bench.json"
    result = torchwm_cli("bench", "--env", "CartPole-v1", "--backends", "gym-sync,sync", "--num-envs", "2,4",
                         "--steps", "50", "--repeats", "1", "--plot", str(plot), "--json", str(data), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "gym-sync" in result.stdout and "sync" in result.stdout
    rows = json.loads(data.read_text())
    assert {(r["backend"], r["num_envs"]) for r in rows} == {("gym-sync", 2), ("gym-sync", 4), ("sync", 2), ("sync", 4)}
    assert all(r["steps_per_second"] > 0 for r in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_runs_the_conformance_kit_on_a_backend(capsys):
    assert main(["check", "sync"]) == 0
    out = capsys.readouterr().out
    assert "check_autoreset_same_step" in out and "check_close" in out


def test_check_reports_a_broken_backend(fresh_plugins, capsys):
    import numpy as np

    import torchwm
    from torchwm import plugins
    from torchwm.vector.sync import SyncVectorEnv

    class NeverResets(SyncVectorEnv):
        def _reset_envs(self, ids, seeds, options):
            infos = super()._reset_envs(ids, [None] * len(ids), options)
            self._observations[ids] = np.float32(0)
            return infos

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("broken", NeverResets)

    plugins.register_plugin(Plugin(), name="broken-plugin")
    assert main(["check", "broken"]) == 1
    assert "FAIL" in capsys.readouterr().out.upper()
