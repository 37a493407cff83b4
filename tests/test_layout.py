"""The tests are laid out as the package: every module of `torchwm` has a test file named after it at the
mirrored path, so that a module's tests are found where its name says. A module added without one fails
here until its file is written. A test file may hold tests of more than its module, and tests of one
behaviour across modules (``tests/vector/faults/``, one file per kind of fault; ``tests/conformance``;
``tests/test_bad_input.py``) have files of their own beside them.

The rule, for a module at ``torchwm/<path>/<name>.py``:

- a module: ``tests/<path>/test_<name>.py`` (``torchwm/vector/transports/pipe.py`` ->
  ``tests/vector/transports/test_pipe.py``, ``torchwm/factory.py`` -> ``tests/test_factory.py``); a
  private module ``_<name>.py`` the same, its underscore dropped;
- a package's ``__init__.py`` that defines a function or a class: ``tests/<path>/test_<package>.py``
  (``torchwm/wrappers/__init__.py`` -> ``tests/wrappers/test_wrappers.py``, ``torchwm/__init__.py`` ->
  ``tests/test_torchwm.py``); one of only a docstring, imports and ``__all__`` has nothing of its own to test;
- a ``__main__.py`` none: it hands over to its package's command, whose tests are that command's.

The suite imports test files in pytest's default ``prepend`` mode: a test file in a folder without an
``__init__.py`` is imported by its base name, one in a package by its dotted name from the first folder up
that is none (``tests/multiagent/test_sources.py`` is ``multiagent.test_sources``). Two test files of one
name would clash, so that is checked: where two modules share a name (``torchwm/sources.py`` and
``torchwm/multiagent/sources.py``), the test folder of one of them is a package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "torchwm"
TESTS = ROOT / "tests"
# pyproject.toml's testpaths.
TEST_PATHS = [
    TESTS,
    ROOT / "plugins" / "torchwm-ray" / "tests",
    ROOT / "plugins" / "torchwm-envpool" / "tests",
]


def defines_something(module: Path) -> bool:
    """Whether ``module`` defines a function or a class at its top level (not only imports and names)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for node in tree.body)


def mirrored_test_file(module: Path, package: Path, tests: Path) -> Path | None:
    """The test file the rule names for ``module`` of ``package`` (its tests in ``tests``), or None."""
    folder = tests / module.parent.relative_to(package)
    if module.name == "__main__.py":
        return None
    if module.name == "__init__.py":
        # The package's folder in the tests (``tests`` itself for the top package) and its name.
        return folder / f"test_{module.parent.name}.py" if defines_something(module) else None
    return folder / f"test_{module.name.lstrip('_')}"


def expected_test_files(package: Path, tests: Path) -> dict[Path, Path]:
    """Each module under ``package`` that needs a test file, and that file in ``tests``."""
    expected = {}
    for module in sorted(package.rglob("*.py")):
        if "__pycache__" in module.parts:
            continue
        test = mirrored_test_file(module, package, tests)
        if test is not None:
            expected[module] = test
    return expected


def missing_test_files(package: Path, tests: Path) -> list[str]:
    return [
        f"{module.relative_to(package.parent)} has no {test.relative_to(tests.parent)}"
        for module, test in expected_test_files(package, tests).items()
        if not test.is_file()
    ]


def imported_name(test: Path) -> str:
    """The module name pytest's ``prepend`` mode imports ``test`` as: its dotted path from the first folder
    up that is not a package."""
    parts = [test.stem]
    folder = test.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def clashing_test_files(paths: list[Path]) -> dict[str, list[str]]:
    """The test files under ``paths`` that pytest would import under one name, by that name."""
    seen: dict[str, list[str]] = {}
    for path in paths:
        for test in sorted(path.rglob("test_*.py")):
            seen.setdefault(imported_name(test), []).append(str(test.relative_to(path.parent)))
    return {name: files for name, files in seen.items() if len(files) > 1}


def test_every_module_has_a_test_file_named_after_it():
    assert missing_test_files(PACKAGE, TESTS) == []


def test_a_module_added_without_a_test_file_is_named(tmp_path):
    package, tests = tmp_path / "torchwm", tmp_path / "tests"
    (package / "transports").mkdir(parents=True)
    (package / "cli").mkdir(parents=True)
    (tests / "transports").mkdir(parents=True)
    for module in (
        "__init__.py",
        "pool.py",
        "transports/__init__.py",
        "transports/pipe.py",
        "transports/new.py",
        "cli/run.py",
    ):
        (package / module).write_text("")
    (tests / "test_pool.py").write_text("")
    (tests / "transports" / "test_pipe.py").write_text("")
    (tests / "test_new.py").write_text("")  # at the wrong place: the module is in transports/
    assert missing_test_files(package, tests) == [
        "torchwm/cli/run.py has no tests/cli/test_run.py",
        "torchwm/transports/new.py has no tests/transports/test_new.py",
    ]


@pytest.mark.parametrize(
    ("module", "test"),
    [
        ("vector/transports/shared_memory.py", "vector/transports/test_shared_memory.py"),
        ("vector/pool_stepper.py", "vector/test_pool_stepper.py"),
        ("factory.py", "test_factory.py"),
        ("multiagent/sources.py", "multiagent/test_sources.py"),
        ("wrappers/__init__.py", "wrappers/test_wrappers.py"),
        ("cli/run.py", "cli/test_run.py"),
        ("bench/run.py", "bench/test_run.py"),
        ("command_line.py", "test_command_line.py"),
        ("testing/checks_states.py", "testing/test_checks_states.py"),
        ("__init__.py", "test_torchwm.py"),
    ],
)
def test_the_test_file_of_a_module_mirrors_its_path(module, test):
    assert expected_test_files(PACKAGE, TESTS)[PACKAGE / module] == TESTS / test


def test_a_private_module_drops_its_underscore_and_main_and_a_bare_init_need_none(tmp_path):
    package, tests = tmp_path / "torchwm", tmp_path / "tests"
    (package / "bare").mkdir(parents=True)
    (package / "__init__.py").write_text("def make():\n    pass\n")
    (package / "__main__.py").write_text("from torchwm import make\n\nmake()\n")
    (package / "_kernel.py").write_text("")
    (package / "bare" / "__init__.py").write_text(
        '"""Only names."""\n\nfrom torchwm import make\n\n__all__ = ["make"]\n'
    )
    (package / "bare" / "one.py").write_text("")
    assert expected_test_files(package, tests) == {
        package / "__init__.py": tests / "test_torchwm.py",
        package / "_kernel.py": tests / "test_kernel.py",
        package / "bare" / "one.py": tests / "bare" / "test_one.py",
    }


def test_no_two_test_files_are_imported_under_one_name():
    assert clashing_test_files(TEST_PATHS) == {}


def test_test_files_of_one_base_name_clash_unless_a_folder_is_a_package(tmp_path):
    tests = tmp_path / "tests"
    for folder in ("multiagent", "vector", "testing"):
        (tests / folder).mkdir(parents=True)
    for test in ("test_sources.py", "multiagent/test_sources.py", "test_envs.py", "testing/test_envs.py"):
        (tests / test).write_text("")
    (tests / "vector" / "test_envs.py").write_text("")
    assert clashing_test_files([tests]) == {
        "test_envs": ["tests/test_envs.py", "tests/testing/test_envs.py", "tests/vector/test_envs.py"],
        "test_sources": ["tests/multiagent/test_sources.py", "tests/test_sources.py"],
    }
    (tests / "multiagent" / "__init__.py").write_text("")
    (tests / "testing" / "__init__.py").write_text("")
    assert imported_name(tests / "testing" / "test_envs.py") == "testing.test_envs"
    assert clashing_test_files([tests]) == {"test_envs": ["tests/test_envs.py", "tests/vector/test_envs.py"]}
