"""`torchwm.cli.common`: ``--print-config`` of ``run`` and ``check`` keeps the file's format
(`config_format`), and the printed config runs the same run.
"""

import json

import pytest

from torchwm.cli import main


@pytest.mark.parametrize(
    ("name", "text", "parse"),
    [
        ("c.yaml", "id: CartPole-v1\nnum_envs: 2\n", "yaml"),
        ("c.yml", "id: CartPole-v1\nnum_envs: 2\n", "yaml"),
        ("c.json", '{"id": "CartPole-v1", "num_envs": 2}', "json"),
        ("c.toml", 'id = "CartPole-v1"\nnum_envs = 2\n', "toml"),
    ],
)
def test_print_config_keeps_the_files_format(tmp_path, capsys, name, text, parse):
    import yaml

    from torchwm.config import tomllib

    (tmp_path / name).write_text(text)
    assert main(["run", str(tmp_path / name), "--print-config"]) == 0
    out = capsys.readouterr().out
    data = {"yaml": yaml.safe_load, "json": json.loads, "toml": tomllib.loads}[parse](out)
    assert data["id"] == "CartPole-v1" and data["num_envs"] == 2 and data["autoreset_mode"] == "next_step"
    if parse != "toml":
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(out)


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
@pytest.mark.parametrize("printer", ["run", "check"])
def test_the_printed_config_runs_the_same_run(tmp_path, capsys, monkeypatch, suffix, printer):
    from torchwm.cli import run as cli
    from torchwm.config import load_run_config

    original = tmp_path / f"c{suffix}"
    original.write_text(
        {
            ".toml": 'id = "CartPole-v1"\nnum_envs = 2\nseed = 3\n[run]\nsteps = 5\n',
            ".yaml": "id: CartPole-v1\nnum_envs: 2\nseed: 3\nrun:\n  steps: 5\n",
            ".json": '{"id": "CartPole-v1", "num_envs": 2, "seed": 3, "run": {"steps": 5}}',
        }[suffix]
    )
    args = ["run", str(original), "--print-config"] if printer == "run" else ["check", str(original)]
    assert main(args) == 0
    printed = tmp_path / f"printed{suffix}"
    printed.write_text(capsys.readouterr().out)
    assert load_run_config(printed) == load_run_config(original)
    assert load_run_config(printed)[1].steps == 5

    # And torchwm run of the printed file runs as many steps as of the original (not the default 1000).
    sent = []
    monkeypatch.setattr(cli, "print_summary", lambda report, interrupted: sent.append(report.steps))
    assert main(["run", str(printed), "--no-progress"]) == 0
    assert main(["run", str(original), "--no-progress"]) == 0
    assert sent == [5, 5]
