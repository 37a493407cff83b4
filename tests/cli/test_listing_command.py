"""`torchwm list` (`torchwm.cli.listing_command`): every registered name with its plugin and options, the
Atari kernel's path and the shipped configs.
"""

from pathlib import Path

from torchwm.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "torchwm" / "configs"


def test_list_names_plugin_distribution_and_options(capsys):
    assert main(["list", "backends"]) == 0
    out = capsys.readouterr().out
    assert "sync" in out and "torchwm.vector.sync" in out and "torchwm 0.1.0" in out
    assert main(["list", "wrappers"]) == 0
    out = capsys.readouterr().out
    assert "frame_stack" in out and "stack_size=4" in out


def test_list_says_which_path_the_fused_atari_env_takes(capsys, monkeypatch):
    from torchwm import atari_kernel

    assert main(["list"]) == 0
    assert f"fused Atari env, after the emulator: {atari_kernel.kernel_status()}" in capsys.readouterr().out
    monkeypatch.setattr(atari_kernel, "KERNEL", None)
    monkeypatch.setattr(atari_kernel, "_WHY_NOT", "not built: no C compiler when torchwm was installed")
    assert main(["list"]) == 0
    assert "after the emulator: NumPy and OpenCV (not built: no C compiler" in capsys.readouterr().out


def test_list_configs_shows_the_shipped_configs(capsys):
    assert main(["list", "configs"]) == 0
    out = capsys.readouterr().out
    for path in CONFIGS.iterdir():
        assert path.stem in out
