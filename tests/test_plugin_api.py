"""The plugins of this repository build on torchwm's declared plugin API only (`torchwm.plugin_api`).

Every .py under plugins/*/torchwm_*/ is parsed with `ast`, its doctests too: an import of a torchwm
module other than ``torchwm``, ``torchwm.plugin_api`` and ``torchwm.errors`` fails, naming file and line.
The examples of docs/plugins/ keep to the same modules, and may also use ``torchwm.plugins`` (register
a plugin at run time) and ``torchwm.testing`` (the conformance kit).
"""

from __future__ import annotations

import ast
import doctest
import re
from pathlib import Path

import pytest

import torchwm.plugin_api

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_FILES = sorted(ROOT.glob("plugins/*/torchwm_*/**/*.py"))
ALLOWED = {"torchwm", "torchwm.plugin_api", "torchwm.errors"}
# The plugin author's pages may also register a plugin at run time and run the conformance kit.
ALLOWED_IN_DOCS = ALLOWED | {"torchwm.plugins", "torchwm.testing"}
PLUGIN_PAGES = sorted(ROOT.glob("docs/plugins/*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def torchwm_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of a torchwm module in ``tree`` (``from torchwm import x``: the module
    ``torchwm.x`` when x is a submodule, else ``torchwm``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torchwm":
                found += [
                    (
                        node.lineno,
                        f"torchwm.{alias.name}" if _is_module(f"torchwm.{alias.name}") else "torchwm",
                    )
                    for alias in node.names
                ]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name == "torchwm" or name.startswith("torchwm.")]


def _is_module(name: str) -> bool:
    return (ROOT / Path(*name.split("."))).is_dir() or (ROOT / Path(*name.split("."))).with_suffix(
        ".py"
    ).is_file()


def forbidden_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: module`` for each import of ``path`` (its code and its doctests) outside `ALLOWED`."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found = torchwm_imports(tree)
    parser = doctest.DocTestParser()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if not docstring:
                continue
            # The docstring's first line in the file: the line of its string constant.
            first_line = node.body[0].lineno
            for example in parser.get_examples(docstring):
                try:
                    example_tree = ast.parse(example.source)
                except SyntaxError:
                    continue
                found += [(first_line + example.lineno, name) for _, name in torchwm_imports(example_tree)]
    relative = path.relative_to(root)
    return [f"{relative}:{line}: imports {name}" for line, name in sorted(found) if name not in ALLOWED]


def test_the_check_finds_an_internal_import(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        '"""A plugin.\n\n>>> from torchwm.vector.pool import WorkerPool\n"""\n\n'
        "import torchwm\nfrom torchwm.plugin_api import WorkerHandle\nfrom torchwm.spec import VecSpec\n"
        "from torchwm import factory\n"
    )
    found = torchwm_imports(ast.parse(plugin.read_text()))
    assert (8, "torchwm.spec") in found and (9, "torchwm.factory") in found and (6, "torchwm") in found
    assert forbidden_imports(plugin, root=tmp_path) == [
        "plugin.py:3: imports torchwm.vector.pool",
        "plugin.py:8: imports torchwm.spec",
        "plugin.py:9: imports torchwm.factory",
    ]


def test_there_are_plugins_to_check():
    assert {path.parent.name for path in PLUGIN_FILES} == {"torchwm_ray", "torchwm_envpool"}


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_import_only_the_plugin_api(path):
    assert forbidden_imports(path) == []


@pytest.mark.parametrize("page", PLUGIN_PAGES, ids=lambda path: path.name)
def test_the_plugin_pages_import_only_the_plugin_api(page):
    found = [
        name
        for block in FENCE.findall(page.read_text(encoding="utf-8"))
        for _, name in torchwm_imports(ast.parse(block))
    ]
    assert [name for name in found if name not in ALLOWED_IN_DOCS] == []


def test_every_declared_name_exists():
    missing = [name for name in torchwm.plugin_api.__all__ if not hasattr(torchwm.plugin_api, name)]
    assert missing == []
    assert len(set(torchwm.plugin_api.__all__)) == len(torchwm.plugin_api.__all__)


def test_the_api_holds_what_a_transport_author_needs():
    needed = {
        "WorkerGroup",
        "WorkerHandle",
        "Deadline",
        "WorkerGone",
        "StepLost",
        "Batch",
        "WorkerPayload",
        "PoolSettings",
        "WorkerPool",
        "split_envs",
        "check_count",
        "check_timeout",
        "check_batch_size",
        "Step",
        "Reset",
        "ErrorReply",
        "error_reply",
        "EnvGroup",
        "VecSpec",
        "VectorEnv",
        "parse_for",
        "hookimpl",
    }
    assert needed <= set(torchwm.plugin_api.__all__)
    assert torchwm.plugin_api.VectorEnv is torchwm.VectorEnv
    assert torchwm.plugin_api.hookimpl is torchwm.hookimpl
