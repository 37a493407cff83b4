"""`torchwm bench` as the command line registers it (`torchwm.cli.bench`): the same parser as ``python -m
torchwm.bench``. What the command does is tested with it, in tests/bench/test_command.py.
"""

import subprocess
import sys

from support.commands import ROOT, torchwm_cli


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
