"""`torchwm check` (`torchwm.cli.check`): the conformance kit on a backend, a broken backend reported, a
config told from a backend, and a valid config printed resolved in its own format; a multi-agent config
(a ``[multiagent]`` table) checked the same way, every error with its key path.
"""

from __future__ import annotations

import textwrap

from support.commands import BREAKOUT64, torchwm_cli

import torchwm.multiagent as ma
from torchwm.cli import main


def test_check_runs_the_conformance_kit_on_a_backend(capsys):
    assert main(["check", "sync"]) == 0
    out = capsys.readouterr().out
    assert "check_autoreset_same_step" in out and "check_close" in out


def test_check_reports_a_broken_backend(fresh_plugins, capsys):
    import numpy as np

    import torchwm
    from torchwm import plugins
    from torchwm.vector.base import VectorEnv
    from torchwm.vector.sync import SyncStepper

    class NeverResets(SyncStepper):
        def reset_envs(self, ids, seeds, options):
            infos = super().reset_envs(ids, [None] * len(ids), options)
            self.observations[ids] = np.float32(0)
            return infos

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("broken", lambda spec, **options: VectorEnv(NeverResets(spec, **options)))

    plugins.register_plugin(Plugin(), name="broken-plugin")
    assert main(["check", "broken"]) == 1
    assert "FAIL" in capsys.readouterr().out.upper()


def test_check_tells_a_config_from_a_backend(fresh_plugins, tmp_path):
    import torchwm
    from torchwm import plugins
    from torchwm.cli import check_target
    from torchwm.vector.sync import SyncVectorEnv

    assert check_target("sync", None) == ("backend", "sync")
    assert check_target("pong", None) == ("config", "pong")  # a shipped config, not a backend
    assert check_target("my.yaml", None) == ("config", "my.yaml")  # a config suffix, existing or not
    assert check_target("configs/sync", None) == ("config", "configs/sync")  # a path

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("cartpole", SyncVectorEnv)

    plugins.register_plugin(Plugin(), name="named-like-a-config")
    # Both a backend and a shipped config: the backend, as before check read configs; --config for the config.
    assert check_target("cartpole", None) == ("backend", "cartpole")
    assert check_target(None, "cartpole") == ("config", "cartpole")


def test_check_a_shipped_config_by_name(capsys):
    assert main(["check", "--config", "pong"]) == 0
    captured = capsys.readouterr()
    assert 'id = "ALE/Pong-v5"' in captured.out and "pong: valid" in captured.err  # pong.toml: TOML out


def test_check_a_valid_config_prints_its_resolved_spec_in_its_format(tmp_path):
    import yaml

    import torchwm

    (tmp_path / "breakout64.yaml").write_text(BREAKOUT64)
    result = torchwm_cli("check", "breakout64.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "breakout64.yaml: valid" in result.stderr
    printed = yaml.safe_load(result.stdout)  # YAML in, YAML out
    assert printed["wrappers"][0]["noop_max"] == 30  # every default explicit
    assert torchwm.load_config(printed) == torchwm.load_config(tmp_path / "breakout64.yaml")


# -- multi-agent configs --------------------------------------------------------------------------------
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
