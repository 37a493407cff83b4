"""`torchwm bench` as the command line registers it (`torchwm.cli.bench`): the same parser as ``python -m
torchwm.bench``. What the command does is tested with it, in tests/bench/test_command.py; here too, a
multi-agent config: env and agent steps per second on torchwm's backends, the single-agent peers listed
as not measured, with the reason.
"""

from __future__ import annotations

import math
import subprocess
import sys

from support.commands import ROOT, torchwm_cli

from torchwm.bench import format_table, run_bench
from torchwm.cli import main
from torchwm.setup_config import load_setup_config


def test_bench_and_python_m_bench_are_one_parser():
    as_command = torchwm_cli("bench", "--help")
    as_module = subprocess.run(
        [sys.executable, "-m", "torchwm.bench", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert as_command.returncode == as_module.returncode == 0
    assert as_command.stdout == as_module.stdout
    for flag in ("--backend-kwargs", "--set", "--num-envs", "--repeats", "--plot", "--json", "--no-progress"):
        assert flag in as_command.stdout
    # docs/performance.md's flag works with torchwm bench too.
    result = torchwm_cli(
        "bench",
        "--backends",
        "sync",
        "--num-envs",
        "2",
        "--steps",
        "10",
        "--repeats",
        "1",
        "--backend-kwargs",
        '{"sync": {"copy": false}}',
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr


# -- multi-agent configs --------------------------------------------------------------------------------
CONFIG = {"num_envs": 2, "seed": 0, "multiagent": {"env": "mpe2.simple_spread_v3", "env_kwargs": {"N": 3}}}


def test_run_bench_measures_a_multiagent_spec_with_its_agents():
    spec = load_setup_config(CONFIG)[0]
    results = run_bench(spec, ["sync", "gym-sync"], [2], steps=5, repeats=1, isolate=False)
    sync, gym_sync = results
    assert sync.steps_per_second > 0 and sync.agents_per_env == 3
    assert sync.obs_shape == [6, 18]  # 2 envs x 3 agents, a row each
    assert math.isnan(gym_sync.steps_per_second)
    assert gym_sync.skipped.startswith("it measures single-agent envs")
    table = format_table(results, "sync")
    columns = next(line for line in table.splitlines() if line.startswith("mpe2")).split()
    # env, envs, backend, steps/s, agent steps/s, ratio, PSS, repeats
    assert columns[3:5] == [f"{sync.steps_per_second:,.0f}", f"{sync.steps_per_second * 3:,.0f}"]
    assert "agent steps/s" in table.splitlines()[0]


def test_torchwm_bench_takes_a_multiagent_config(tmp_path, capsys):
    path = tmp_path / "spread.toml"
    path.write_text('num_envs = 2\nseed = 0\n[multiagent]\nenv = "mpe2.simple_spread_v3"\n')
    args = ["bench", str(path), "--steps", "5", "--repeats", "1", "--backends", "sync,shmem", "--no-progress"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "mpe2.simple_spread_v3 {}, layout agents, 2 envs, seed 0, backend sync" in captured.err
    rows = [line for line in captured.out.splitlines() if line.startswith("mpe2.simple_spread_v3")]
    assert [line.split()[2] for line in rows] == ["sync", "shmem"]
    assert "agent steps/s" in captured.out
