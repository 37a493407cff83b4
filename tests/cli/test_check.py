"""`torchwm check` (`torchwm.cli.check`): the conformance kit on a backend, a broken backend reported, a
config told from a backend, and a valid config printed resolved in its own format.
"""

from support.commands import BREAKOUT64, torchwm_cli

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
