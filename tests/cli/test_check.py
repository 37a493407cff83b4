"""``torchwm check CONFIG`` on a multi-agent config: valid, the resolved config; else every error with its
key path, as for single-agent configs."""

from __future__ import annotations

import textwrap

import torchwm.multiagent as ma
from torchwm.cli import main


def write(tmp_path, text: str):
    path = tmp_path / "config.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_valid_multiagent_config_passes_and_prints_its_resolved_config(tmp_path, capsys):
    path = write(
        tmp_path,
        """\
        num_envs = 2
        [multiagent]
        env = "mpe2.simple_spread_v3"
        env_kwargs = { N = 2 }
        """,
    )
    assert main(["check", str(path)]) == 0
    captured = capsys.readouterr()
    assert f"torchwm check: {path}: valid (mpe2.simple_spread_v3 x 2 on sync)" in captured.err
    resolved = tmp_path / "resolved.toml"
    resolved.write_text(captured.out)
    assert ma.load_config(resolved) == ma.load_config(path)


def test_the_shipped_simple_spread_config_passes(capsys):
    assert main(["check", "simple_spread"]) == 0
    assert 'env = "mpe2.simple_spread_v3"' in capsys.readouterr().out


def test_every_error_is_reported_with_its_key(tmp_path, capsys):
    path = write(
        tmp_path,
        """\
        num_envs = 0
        backend = "shmem"
        [backend_kwargs]
        num_worker = 2
        [multiagent]
        env = "mpe2.simple_spread_v3"
        layout = "rows"
        pad_spaces = "yes"
        dead_agent = "zero"
        """,
    )
    assert main(["check", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    keys = [line.removeprefix(f"torchwm check: error: {path}: ").partition(":")[0] for line in lines]
    assert keys == [
        "num_envs",
        "multiagent.layout",
        "multiagent.pad_spaces",
        "multiagent.dead_agent",
        "backend_kwargs.num_worker",
    ]
    assert "multiagent.layout: layout must be one of ['agents', 'parallel', 'aec'], got 'rows'" in lines[1]


def test_what_make_vec_refuses_of_the_env_is_found_before_any_worker(tmp_path, capsys):
    bad_kwargs = write(
        tmp_path,
        """\
        [multiagent]
        env = "mpe2.simple_spread_v3"
        env_kwargs = { M = 3 }
        """,
    )
    assert main(["check", str(bad_kwargs)]) == 2
    err = capsys.readouterr().err.strip()
    assert "multiagent.env_kwargs: building the env 'mpe2.simple_spread_v3' failed: " in err
    assert "'M'" in err and len(err.splitlines()) == 1
    groups = write(
        tmp_path,
        """\
        [multiagent]
        env = "mpe2.simple_spread_v3"
        layout = "parallel"
        group_map = { team = ["agent_0"] }
        """,
    )
    assert main(["check", str(groups)]) == 2
    assert "multiagent.group_map: group_map must place each of possible_agents" in capsys.readouterr().err
    turn_based = write(
        tmp_path,
        """\
        [multiagent]
        env = "pettingzoo.classic.tictactoe_v3"
        """,
    )
    assert main(["check", str(turn_based)]) == 2
    assert "multiagent.env: module 'pettingzoo.classic.tictactoe_v3' has no parallel_env()" in (
        capsys.readouterr().err
    )
    assert main(["check", str(turn_based), "--set", "multiagent.layout=aec"]) == 0
