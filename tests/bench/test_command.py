"""The ``torchwm bench`` command (`torchwm.bench.command`): the table, the JSON and the plot it writes, a
config's stack measured on the backends that can build it, and what it refuses before measuring.
"""

from __future__ import annotations

import json
import os

import pytest
from support.commands import BREAKOUT64, torchwm_cli

from bench.cpuinfo import proc_cpuinfo
from torchwm import bench
from torchwm.cli import main


def test_bench_writes_a_table_json_and_plot(tmp_path):
    plot, data = tmp_path / "bench.png", tmp_path / "bench.json"
    result = torchwm_cli(
        "bench",
        "--env",
        "CartPole-v1",
        "--backends",
        "gym-sync,sync",
        "--num-envs",
        "2,4",
        "--steps",
        "50",
        "--repeats",
        "1",
        "--plot",
        str(plot),
        "--json",
        str(data),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "gym-sync" in result.stdout and "sync" in result.stdout
    written = json.loads(data.read_text())
    rows = written["results"]
    assert {(r["backend"], r["num_envs"]) for r in rows} == {
        ("gym-sync", 2),
        ("gym-sync", 4),
        ("sync", 2),
        ("sync", 4),
    }
    assert all(r["steps_per_second"] > 0 for r in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The JSON says where and with what the figures were measured.
    import gymnasium
    import numpy

    assert written["machine"]["cores"] == os.cpu_count() and written["machine"]["cpu_model"]
    assert written["versions"]["gymnasium"] == gymnasium.__version__
    assert written["versions"]["numpy"] == numpy.__version__
    assert written["settings"]["repeats"] == 1 and written["settings"]["num_envs"] == [2, 4]
    # Progress on stderr while it runs: 2 sizes x 2 backends x (1 build + 1 repeat) ticks.
    assert "/8" in result.stderr


def test_bench_a_config_measures_its_stack_on_the_backends_and_gymnasium(tmp_path):
    config, data = tmp_path / "breakout64.yaml", tmp_path / "bench.json"
    config.write_text(BREAKOUT64)
    result = torchwm_cli(
        "bench",
        str(config),
        "--backends",
        "sync,gym-sync",
        "--steps",
        "5",
        "--repeats",
        "1",
        "--json",
        str(data),
        "--no-progress",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    written = json.loads(data.read_text())
    recorded = written["settings"]["config"]
    assert recorded["source"] == str(config)
    assert [(w["name"], w.get("screen_size"), w.get("stack_size")) for w in recorded["spec"]["wrappers"]] == [
        ("atari_preprocessing", 64, None),
        ("frame_stack", None, 2),
    ]
    assert recorded["spec"]["seed"] == 3 and recorded["obs_shape"] == [2, 64, 64]
    rows = written["results"]
    # the config's num_envs
    assert [(r["backend"], r["num_envs"]) for r in rows] == [("sync", 2), ("gym-sync", 2)]
    for r in rows:
        assert (
            r["obs_shape"] == [2, 2, 64, 64] and r["obs_matches_config"] is True and r["steps_per_second"] > 0
        )
    assert "ALE/Breakout-v5" in result.stdout and "x sync" in result.stdout


def test_bench_lists_what_cannot_build_the_stack_with_the_reason(tmp_path):
    config = tmp_path / "resized.yaml"
    config.write_text(
        "id: ALE/Breakout-v5\nnum_envs: 2\nwrappers:\n  - atari_preprocessing\n"
        "  - name: resize\n    width: 32\n    height: 32\n"
    )
    result = torchwm_cli(
        "bench",
        "--config",
        str(config),
        "--backends",
        "gym-sync,ale-native",
        "--steps",
        "5",
        "--repeats",
        "1",
        "--no-progress",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[2:3] == ["gym-sync"] for line in lines)
    assert any(line.startswith("not measured: ale-native: ") and "'resize'" in line for line in lines)
    # Nothing that can build it: one line, status 2.
    result = torchwm_cli("bench", str(config), "--backends", "ale-native", "--no-progress")
    assert result.returncode == 2 and "nothing measured" in result.stderr and "'resize'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bench_config_and_env_are_one_or_the_other(tmp_path):
    (tmp_path / "c.yaml").write_text("id: CartPole-v1\n")
    result = torchwm_cli("bench", "c.yaml", "--env", "CartPole-v1", cwd=tmp_path)
    assert result.returncode == 2 and "not both" in result.stderr
    # The command: a config given to --env says how to measure it.
    result = torchwm_cli("bench", "--env", "c.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "torchwm bench c.yaml" in result.stderr


def test_bench_a_config_asking_for_too_much_memory_is_one_line_naming_it(tmp_path, capsys):
    config = tmp_path / "huge.yaml"
    config.write_text("id: CartPole-v1\nwrappers:\n  - name: frame_stack\n    stack_size: 10000000000\n")
    assert main(["bench", str(config), "--no-progress"]) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()[-1:]
    # The words torchwm run says (one code for both), before any backend is measured.
    assert error.startswith(
        "torchwm bench: error: wrapper 'frame_stack' option stack_size=10000000000 asks for more memory than "
        "this machine has (Unable to allocate 149 GiB"
    ), error


@pytest.mark.parametrize(
    "flag, path, message",
    [
        ("--json", "missing/out.json", "the folder 'missing' does not exist"),
        ("--json", ".", "is a folder"),
        ("--plot", "missing/out.png", "the folder 'missing' does not exist"),
        ("--plot", "afile/out.png", "'afile' is a file, not a folder"),
        ("--plot", "out.nope", "matplotlib writes no 'nope' files"),
    ],
)
def test_bench_refuses_an_output_file_it_cannot_write_before_measuring(
    tmp_path, monkeypatch, capsys, flag, path, message
):
    from torchwm.bench import command

    def measured(*args, **kwargs):
        raise AssertionError("measured before checking where the results go")

    monkeypatch.setattr(command, "run_bench", measured)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main(["bench", "--backends", "sync", "--num-envs", "2", flag, path]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"torchwm bench: error: {flag} {path}: ")
    assert message in error[0]


def test_main_prints_the_table(capsys):
    from torchwm.cli import main

    assert (
        main(
            [
                "bench",
                "--env",
                "CartPole-v1",
                "--backends",
                "sync,ceiling",
                "--num-envs",
                "2",
                "--steps",
                "20",
                "--repeats",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "x sync" in out and "ceiling" in out and "CartPole-v1" in out


def test_bench_prints_and_records_what_ran(tmp_path, capsys):
    from torchwm.atari_kernel import kernel_status
    from torchwm.cli import main

    data = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "--env",
                "CartPole-v1",
                "--backends",
                "sync,shmem,subproc",
                "--num-envs",
                "2",
                "--steps",
                "20",
                "--repeats",
                "1",
                "--no-progress",
                "--json",
                str(data),
                "--backend-kwargs",
                '{"subproc": {"num_workers": 2, "inline": true}}',
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    written = json.loads(data.read_text())
    fields = proc_cpuinfo()
    machine = written["machine"]
    assert machine["cpu_family"] == fields["cpu family"] and machine["cpu_model"] == fields["model name"]
    assert machine["cpu_flags"]["avx2"] == ("avx2" in fields["flags"].split())
    assert machine["cpu_flags"]["avx512vbmi"] == ("avx512vbmi" in fields["flags"].split())
    assert written["atari_kernel"] == kernel_status()
    assert bench.describe_machine(written) in out  # what it printed is what it recorded
    assert f"{fields['model name']} (family {fields['cpu family']}, model {fields['model']}; " in out
    assert f"\nAtari kernel: {kernel_status()}\n" in out
    pools = {row["backend"]: row["pool"] for row in written["results"]}
    assert pools["sync"] is None
    assert pools["subproc"] == {"workers": 2, "envs_per_worker": [1, 1], "inline": True, "choice": None}
    # shmem with its split left unset measures it: the choice names the worker count it chose.
    shmem = pools["shmem"]
    assert sum(shmem["envs_per_worker"]) == 2 and len(shmem["envs_per_worker"]) == shmem["workers"]
    assert shmem["inline"] is False and shmem["choice"].startswith(f"{shmem['workers']} worker")
