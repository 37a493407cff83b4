"""The package itself (`torchwm/__init__.py`): its public names imported on first use, and its version read
when first asked for, from the install or else from the checkout's pyproject.toml.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import torchwm

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_read_when_first_asked_for_not_at_import():
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torchwm; print('__version__' in vars(torchwm)); print(torchwm.__version__); "
            "from torchwm import __version__; print(__version__ is vars(torchwm)['__version__'])",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert shown == ["False", PYPROJECT["project"]["version"], "True"]


def test_a_source_tree_never_installed_has_its_pyproject_version(monkeypatch):
    import torchwm

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    # As if imported from this checkout (CI installs torchwm into site-packages, beside no pyproject.toml).
    monkeypatch.setattr(torchwm, "__file__", str(ROOT / "torchwm" / "__init__.py"))
    monkeypatch.delitem(vars(torchwm), "__version__", raising=False)  # read again, without the install
    assert torchwm.__version__ == PYPROJECT["project"]["version"]


def test_a_public_name_is_imported_from_its_module_on_first_use_and_kept(monkeypatch):
    monkeypatch.delitem(vars(torchwm), "list_wrappers", raising=False)
    assert "list_wrappers" not in vars(torchwm)
    assert torchwm.list_wrappers is sys.modules["torchwm.listing"].list_wrappers
    assert vars(torchwm)["list_wrappers"] is torchwm.list_wrappers  # later reads skip the hook
    assert set(torchwm.__all__) <= set(dir(torchwm))
    with pytest.raises(AttributeError, match="module 'torchwm' has no attribute '_private'"):
        torchwm._private  # noqa: B018
