"""The tests are laid out as the package: every module of `torchwm/vector` has a test file named after it at
the mirrored path (``torchwm/vector/transports/pipe.py`` -> ``tests/vector/transports/test_pipe.py``), so
that a module's tests are found where its name says. A module added without one fails here until its file
is written. A test file may hold tests of more than its module, and tests of one behaviour across modules
(``tests/vector/faults/``, one file per kind of fault) have files of their own beside them.

The suite collects test files by their base name (pytest's default ``prepend`` import mode, no
``__init__.py`` in test folders): two test files of one base name anywhere under the test paths would clash,
so that is checked too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "torchwm" / "vector"
TESTS = ROOT / "tests" / "vector"
# pyproject.toml's testpaths.
TEST_PATHS = [
    ROOT / "tests",
    ROOT / "plugins" / "torchwm-ray" / "tests",
    ROOT / "plugins" / "torchwm-envpool" / "tests",
]


def expected_test_files(package: Path, tests: Path) -> dict[Path, Path]:
    """Each module under ``package`` (not ``__init__.py``) and the test file named after it in ``tests``."""
    return {
        module: tests / module.parent.relative_to(package) / f"test_{module.name}"
        for module in sorted(package.rglob("*.py"))
        if module.name != "__init__.py" and "__pycache__" not in module.parts
    }


def missing_test_files(package: Path, tests: Path) -> list[str]:
    return [
        f"{module.relative_to(package.parent)} has no {test.relative_to(tests.parent)}"
        for module, test in expected_test_files(package, tests).items()
        if not test.is_file()
    ]


def test_every_vector_module_has_a_test_file_named_after_it():
    assert missing_test_files(PACKAGE, TESTS) == []


def test_a_module_added_without_a_test_file_is_named(tmp_path):
    package, tests = tmp_path / "vector", tmp_path / "tests" / "vector"
    (package / "transports").mkdir(parents=True)
    (tests / "transports").mkdir(parents=True)
    for module in (
        "__init__.py",
        "pool.py",
        "transports/__init__.py",
        "transports/pipe.py",
        "transports/new.py",
    ):
        (package / module).write_text("")
    (tests / "test_pool.py").write_text("")
    (tests / "transports" / "test_pipe.py").write_text("")
    (tests / "test_new.py").write_text("")  # at the wrong place: the module is in transports/
    assert missing_test_files(package, tests) == [
        "vector/transports/new.py has no vector/transports/test_new.py"
    ]


@pytest.mark.parametrize("module", ["transports/shared_memory.py", "pool_stepper.py"])
def test_the_test_file_of_a_module_mirrors_its_path(module):
    expected = expected_test_files(PACKAGE, TESTS)[PACKAGE / module]
    assert expected == TESTS / Path(module).parent / f"test_{Path(module).name}"


def test_no_two_test_files_share_a_base_name():
    seen: dict[str, list[str]] = {}
    for path in TEST_PATHS:
        for test in path.rglob("test_*.py"):
            seen.setdefault(test.name, []).append(str(test.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
