"""`torchwm.cli`: the ``torchwm`` command as a whole: every command docs/cli.md and the tutorial show
runs, and the page names every command the parser has.
"""

import json
from pathlib import Path

import pytest
from support.commands import torchwm_cli

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
TUTORIAL = ROOT / "docs" / "tutorial.md"
# The pages whose ```bash blocks are torchwm commands on the config files the page itself shows
# (docs/performance.md's commands use docs/cli.md's breakout64.yaml).
COMMAND_PAGES = {CLI_DOC: CLI_DOC, ROOT / "docs" / "performance.md": CLI_DOC, TUTORIAL: TUTORIAL}
# Flags appended to a documented command so that it runs in seconds; each only makes the work smaller.
SHORTER = {
    "run": ["--steps", "20", "--no-progress"],
    "bench": ["--steps", "5", "--repeats", "1", "--num-envs", "2", "--no-progress"],
    "record": ["--no-progress"],
}


def _documented_commands() -> dict[str, Path]:
    """Each command a page shows in a ```bash block, with the page whose config files it uses."""
    import re

    commands: dict[str, Path] = {}
    for page, files in COMMAND_PAGES.items():
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.DOTALL | re.MULTILINE):
            for line in filter(None, map(str.strip, block.splitlines())):
                commands.setdefault(line, files)
    return commands


def test_the_cli_page_shows_commands_for_config_bench_check_and_print_config():
    commands = _documented_commands()
    for expected in (
        "torchwm bench breakout64.yaml",
        "torchwm check breakout64.yaml",
        "torchwm run breakout64.yaml --print-config",
    ):
        assert expected in commands


def test_the_tutorial_checks_benchmarks_and_records_its_config():
    commands = [c for c, files in _documented_commands().items() if files == TUTORIAL]
    for verb in ("check", "bench", "run"):
        assert any(c.startswith(f"torchwm {verb} my_breakout.yaml") for c in commands), verb
    assert any("--video" in c for c in commands)


@pytest.mark.parametrize("command", list(_documented_commands()))
def test_documented_command_runs(tmp_path, command):
    import shlex

    import yaml
    from test_docs import write_page_files

    write_page_files(_documented_commands()[command], tmp_path)
    words = shlex.split(command)
    assert words[0] == "torchwm"
    result = torchwm_cli(
        *words[1:],
        *SHORTER.get(words[1], []),
        cwd=tmp_path,
        timeout=600,
        env={"MINARI_DATASETS_PATH": str(tmp_path / "datasets")},  # torchwm record's datasets
    )
    assert result.returncode == 0, result.stderr
    if ("--print-config" in words or words[1] == "check") and words[2].endswith(".yaml"):
        assert yaml.safe_load(result.stdout)["id"] == "ALE/Breakout-v5"  # YAML in, YAML out
    if words[1:] == ["check", "--config", "pong"]:
        assert 'id = "ALE/Pong-v5"' in result.stdout  # pong.toml: TOML
    if "--json" in words:
        rows = json.loads((tmp_path / words[words.index("--json") + 1]).read_text())["results"]
        assert rows and all(r["obs_matches_config"] for r in rows if r["obs_shape"] is not None)
    if words[1] == "bench":
        assert "steps/s" in result.stdout
    if "--video" in words:
        assert (tmp_path / words[words.index("--video") + 1]).is_dir()


def test_docs_cli_names_every_command_in_its_opening_and_gives_each_a_section():
    import argparse
    import re

    from torchwm.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    page = (ROOT / "docs" / "cli.md").read_text()
    opening = page.split("\n\n")[1]
    for command in commands.choices:
        assert f"`{command}`" in opening, command
        assert re.search(rf"^## `torchwm {command}\b", page, re.MULTILINE), command
    # A count goes stale when a command is added (the page said "four" of five).
    assert not re.search(r"\b(two|three|four|five|six|seven) commands\b", opening), opening
