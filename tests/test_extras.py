"""`torchwm.extras`: the one-line error for a missing optional dependency, naming the extra and the command
that installs it from where this torchwm came from (never the registry's project of the same name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchwm import extras
from torchwm.errors import TorchwmError


def test_a_missing_extra_names_what_needs_it_the_package_and_the_command(monkeypatch):
    monkeypatch.setattr(extras, "install_source", lambda: "/src/torchwm")
    error = extras.missing_extra("plot", "torchwm bench --plot")
    assert str(error) == (
        "torchwm bench --plot needs matplotlib, which is in torchwm's [plot] extra: "
        'pip install "/src/torchwm[plot]"'
    )
    assert isinstance(error, ImportError) and isinstance(error, TorchwmError)


def test_every_extra_named_is_one_of_pyprojects():
    import tomllib

    pyproject = tomllib.loads((Path(extras.__file__).parents[1] / "pyproject.toml").read_text())
    assert set(extras.EXTRAS) <= set(pyproject["project"]["optional-dependencies"])


def test_the_install_source_is_the_url_pip_recorded_else_this_checkout(monkeypatch):
    class Installed:
        def read_text(self, name):
            return (
                '{"url": "file:///opt/my%20torchwm", "dir_info": {}}' if name == "direct_url.json" else None
            )

    monkeypatch.setattr(extras.importlib.metadata, "distributions", lambda name: [Installed()])
    assert extras.install_source() == "/opt/my torchwm"
    monkeypatch.setattr(extras.importlib.metadata, "distributions", lambda name: [])
    assert extras.install_source() == str(Path(extras.__file__).resolve().parents[1])


@pytest.mark.parametrize("extra", sorted(extras.EXTRAS))
def test_the_install_command_installs_the_extra_with_this_torchwm(monkeypatch, extra):
    monkeypatch.setattr(extras, "install_source", lambda: "/src/torchwm")
    assert extras.install_command(extra) == f'pip install "/src/torchwm[{extra}]"'
