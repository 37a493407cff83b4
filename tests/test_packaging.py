"""The package as a user installs it: the right torchwm from every documented command, a slim core,
package data (configs, py.typed, LICENSE) in the wheel, and no reference to a missing document.

The name ``torchwm`` on PyPI belongs to another project (a world-model library, 0.2.1 to 0.4.2), so
no install command, hint or message of this project may let pip look ``torchwm`` up there: every
command that installs a plugin installs this checkout's core in the same command, and the plugins
pin ``torchwm==0.1.*``, a version that project never had.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# The releases of the other project called torchwm on PyPI.
REGISTRY_TORCHWM_VERSIONS = ("0.2.1", "0.3.0", "0.3.1", "0.3.2", "0.4.0", "0.4.1", "0.4.2")
PLUGINS = sorted((ROOT / "plugins").glob("torchwm-*/pyproject.toml"))


def documented_files() -> list[Path]:
    """Where a user reads an install command: the README, docs, plugin READMEs, configs and the package's
    messages."""
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("**/*.md")),
        *sorted((ROOT / "plugins").glob("*/README.md")),
        *sorted((ROOT / "torchwm").glob("**/*.py")),
        *sorted((ROOT / "torchwm" / "configs").glob("*.*")),
    ]
    return [f for f in files if f.is_file()]


def install_commands() -> list[tuple[str, list[str]]]:
    """(where, arguments) of every ``pip install`` written in the documented files."""
    found = []
    for path in documented_files():
        for match in re.finditer(r"pip install ([^\n`#;&]*)", path.read_text(encoding="utf-8")):
            try:
                args = shlex.split(match.group(1).rstrip(" .'"))
            except ValueError:  # an unbalanced quote inside an f-string: take the words as they are
                args = match.group(1).split()
            found.append((f"{path.relative_to(ROOT)}: pip install {match.group(1).strip()}", args))
    return found


def requirements_of(args: list[str]) -> list[tuple[str, str]]:
    """Each thing a command installs, as ("local", path) or ("name", project name)."""
    found, editable = [], False
    for arg in args:
        if arg in ("-e", "--editable"):
            editable = True
            continue
        if arg.startswith("-"):
            continue
        if editable or arg.lstrip("\"'").startswith((".", "/", "~", "<", "{")) or "/" in arg:
            found.append(("local", arg))
        else:
            found.append(("name", Requirement(arg).name.lower()))
        editable = False
    return found


def is_plugin(kind: str, target: str) -> bool:
    base = re.sub(r"\[.*\]$", "", target.strip("\"'")).rstrip("/").rsplit("/", 1)[-1]
    return base.startswith("torchwm-") or "plugins/torchwm-" in target


def test_no_install_command_looks_torchwm_up_on_the_registry():
    commands = install_commands()
    assert len(commands) >= 10, commands  # the README's two, the plugin READMEs', the docs', the hints
    for where, args in commands:
        installs = requirements_of(args)
        assert ("name", "torchwm") not in installs, f"{where}: would install PyPI's torchwm, another project"
        if any(is_plugin(kind, target) for kind, target in installs):
            cores = [t for kind, t in installs if kind == "local" and not is_plugin(kind, t)]
            assert cores, f"{where}: installs a plugin without this checkout's core in the same command"


def test_plugins_pin_this_core_and_no_release_of_the_other_project():
    core = PYPROJECT["project"]["version"]
    assert PLUGINS
    for path in PLUGINS:
        requirements = [Requirement(r) for r in tomllib.loads(path.read_text())["project"]["dependencies"]]
        (torchwm,) = [r for r in requirements if r.name == "torchwm"]
        assert torchwm.specifier.contains(core), f"{path}: {torchwm} does not admit this core ({core})"
        taken = [v for v in REGISTRY_TORCHWM_VERSIONS if torchwm.specifier.contains(v)]
        assert not taken, f"{path}: {torchwm} admits PyPI's other torchwm {taken}"


def test_the_core_leaves_plotting_rendering_and_torch_to_extras():
    names = {Requirement(r).name.lower(): Requirement(r) for r in PYPROJECT["project"]["dependencies"]}
    for heavy in ("matplotlib", "pygame", "pygame-ce", "torch"):
        assert heavy not in names
    assert not names["gymnasium"].extras  # [classic-control] would bring pygame
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {Requirement(r).name for r in extras["plot"]} == {"matplotlib"}
    assert Requirement(extras["render"][0]).extras == {"classic-control"}
    assert {Requirement(r).name for r in extras["torch"]} == {"torch"}


def test_the_readme_test_command_installs_every_extra_the_tests_use():
    readme = (ROOT / "README.md").read_text()
    command = readme.split("<!-- test command -->", 1)[1].split("```bash\n", 1)[1].splitlines()[0]
    extras = re.search(r'"\.\[([a-z,]+)\]"', command).group(1).split(",")
    assert {"test", "torch", "plot", "render", "video", "tianshou", "torchrl", "rllib"} <= set(extras)
    assert "./plugins/torchwm-ray" in command and "./plugins/torchwm-envpool" in command


def test_the_installed_torchwm_is_this_project_from_a_local_source():
    """Run under the README's test command (CI), this checks pip took torchwm from the checkout."""
    # The torchwm.egg-info that pip's in-tree build leaves in the checkout is not an install: skip it
    # (the checkout's root is on sys.path under `python -m pytest`).
    installed = [
        d
        for d in importlib.metadata.distributions(name="torchwm")
        if Path(str(d.locate_file(""))).resolve() != ROOT
    ]
    assert installed, "torchwm is not installed"
    for dist in installed:
        assert dist.metadata["Summary"] == PYPROJECT["project"]["description"]
        direct_url = dist.read_text("direct_url.json")
        assert direct_url is not None, (
            "torchwm was installed from an index, not from a checkout or a local file"
        )
        assert json.loads(direct_url)["url"].startswith("file://")


def test_no_file_refers_to_a_design_document_the_repository_does_not_have():
    missing = "DESIGN" + ".md"  # spelt in two parts so that this file does not refer to it either
    assert not (ROOT / missing).exists()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    files = (
        tracked.stdout.split()
        if tracked.returncode == 0
        else [str(p.relative_to(ROOT)) for p in documented_files()]
    )
    offenders = [
        name
        for name in files
        if (ROOT / name).is_file() and missing in (ROOT / name).read_text(encoding="utf-8", errors="replace")
    ]
    assert offenders == []


def test_the_wheel_holds_the_configs_the_typing_marker_and_the_license(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "plugins", "tests"
        ),
    )
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "out"), str(source)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if (
        result.returncode != 0
        and "Could not find a version that satisfies the requirement setuptools" in result.stderr
    ):
        pytest.skip("no package index reachable to fetch setuptools>=77 for the build")
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (tmp_path / "out").glob("torchwm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    shipped = {f"torchwm/configs/{p.name}" for p in (ROOT / "torchwm" / "configs").iterdir()}
    assert shipped and shipped <= names
    assert "torchwm/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "License-Expression: MIT" in metadata and "Classifier: License ::" not in metadata
    core = [
        line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert core and not any(
        heavy in line for line in core for heavy in ("matplotlib", "pygame", "torch ", "classic-control")
    )


def test_the_readme_extras_table_lists_every_extra():
    table = re.findall(r"^\| `([a-z0-9]+)` \|", (ROOT / "README.md").read_text(), re.MULTILINE)
    assert set(table) == set(PYPROJECT["project"]["optional-dependencies"]), table


def test_the_version_is_the_installed_one_as_torchwm_version_prints_it():
    import torchwm

    assert torchwm.__version__ == importlib.metadata.version("torchwm") == PYPROJECT["project"]["version"]
    printed = subprocess.run(
        [sys.executable, "-m", "torchwm", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert printed.strip() == f"torchwm {torchwm.__version__}"
