"""Every ```python example in README.md and docs/ runs as written.

Each page runs in a fresh interpreter (its blocks in order, as one script), in an
empty directory holding the files the page shows (a ```yaml or ```toml block whose
first line is ``# NAME``), the way a reader would paste them.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(ROOT.glob("docs/**/*.md"))
# Pages whose every block other tests run as written, and check more of than that it runs.
RUN_BY_OTHER_TESTS = {
    ROOT / "docs" / "training.md": (
        "tests/test_training_recipes.py",  # CleanRL, Stable-Baselines3, skrl
        "tests/integrations/test_sb3.py",  # multi-agent: SB3's PPO on pistonball
        "tests/integrations/test_torchrl.py",
        "tests/integrations/test_rllib.py",
        "tests/integrations/test_tianshou.py",  # its Collector and AsyncCollector examples
        "tests/integrations/test_torchrl_pettingzoo.py",  # TorchRL on a PettingZoo env
        "tests/integrations/test_tianshou_tic_tac_toe.py",  # Tianshou's tic-tac-toe
    ),
}
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
NAMED_FILE = re.compile(r"^```(?:yaml|toml)\n# ([\w.-]+)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def write_page_files(page: Path, directory: Path) -> None:
    """The config files a page shows, written into ``directory`` under the names they give."""
    for name, body in NAMED_FILE.findall(page.read_text()):
        (directory / name).write_text(f"# {name}\n{body}")


def python_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if python_blocks(p) and p not in RUN_BY_OTHER_TESTS],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_docs_examples_run(page, tmp_path):
    script = "\n\n".join(python_blocks(page))
    path = tmp_path / "example.py"
    path.write_text(script)
    write_page_files(page, tmp_path)
    result = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert result.returncode == 0, (
        f"{page.name} examples failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    )


def test_every_docs_page_is_linked_from_the_index():
    index = (ROOT / "docs" / "index.md").read_text()
    for page in PAGES:
        relative = page.relative_to(ROOT / "docs").as_posix()
        if relative == "index.md" or (relative.startswith("plugins/") and relative != "plugins/index.md"):
            continue
        assert f"({relative})" in index, f"docs/index.md does not link {relative}"


def test_the_pages_left_out_above_are_read_by_the_tests_that_run_them():
    for page, tests in RUN_BY_OTHER_TESTS.items():
        for test in tests:
            assert f'"{page.name}"' in (ROOT / test).read_text(), f"{test} does not read {page.name}"


def test_the_performance_page_is_short_and_names_the_command_and_cpu_of_every_run_it_cites():
    # A user's page: what to pick and the headline ratios; the runs' own figures live in
    # benchmarks/HISTORY.md. Every run the table cites keeps its command and CPU on the page.
    page = (ROOT / "docs" / "performance.md").read_text()
    assert len(page.splitlines()) < 250
    table = page[page.index("## Headline ratios") : page.index("```text")]
    cited = set()
    for row in table.splitlines():
        if row.startswith("| ") and not row.startswith("| comparison"):
            cited |= set(re.findall(r"\b([A-Z]2?)\b", row.rstrip(" |").rsplit("|", 1)[-1]))
    runs = page[page.index("```text") : page.index("```", page.index("```text") + 7)]
    headers = re.findall(r"^# (.*)$", runs, re.MULTILINE)  # "# A: EPYC family 26, 2026-11-25, ..."
    named = {letter for header in headers for letter in re.findall(r"\b([A-Z]2?)\b", header)}
    assert cited and cited <= named, cited - named
    run_headers = [header for header in headers if re.match(r"[A-Z]2?[:,]", header)]
    assert all("EPYC family" in header for header in run_headers), run_headers
    assert "benchmarks/HISTORY.md" in page
