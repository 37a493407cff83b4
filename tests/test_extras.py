"""`torchwm.extras`: the one-line error for a missing optional dependency, naming the extra and the command
that installs it from where this torchwm came from (never the registry's project of the same name), as the
command line (``torchwm bench --plot``, a rendering env) and ``torchwm.to_torch`` say it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.commands import python_c

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

    # The checkout these tests belong to: torchwm itself may be installed elsewhere (site-packages).
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert set(extras.EXTRAS) <= set(pyproject["project"]["optional-dependencies"])


def test_the_install_source_is_the_url_pip_recorded_else_this_checkout(monkeypatch, tmp_path):
    class Installed:
        def read_text(self, name):
            return (
                '{"url": "file:///opt/my%20torchwm", "dir_info": {}}' if name == "direct_url.json" else None
            )

    monkeypatch.setattr(extras.importlib.metadata, "distributions", lambda name: [Installed()])
    assert extras.install_source() == "/opt/my torchwm"
    monkeypatch.setattr(extras.importlib.metadata, "distributions", lambda name: [])
    module = tmp_path / "checkout" / "torchwm" / "extras.py"
    module.parent.mkdir(parents=True)
    monkeypatch.setattr(extras, "__file__", str(module))
    assert extras.install_source() == "<your torchwm checkout>"
    (tmp_path / "checkout" / "pyproject.toml").write_text("")
    assert extras.install_source() == str((tmp_path / "checkout").resolve())


@pytest.mark.parametrize("extra", sorted(extras.EXTRAS))
def test_the_install_command_installs_the_extra_with_this_torchwm(monkeypatch, extra):
    monkeypatch.setattr(extras, "install_source", lambda: "/src/torchwm")
    assert extras.install_command(extra) == f'pip install "/src/torchwm[{extra}]"'


# -- the extra named where it is missing -----------------------------------------------------------------


def _assert_extra_hint(stderr, extra):
    line = stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, stderr
    assert f"[{extra}] extra" in line and f'[{extra}]"' in line and 'pip install "' in line
    assert "pip install torchwm" not in line and "'torchwm[" not in line and '"torchwm[' not in line


def test_bench_plot_without_matplotlib_names_the_plot_extra_before_measuring(tmp_path):
    result = python_c(
        "import sys; sys.modules['matplotlib'] = None\n"
        "from torchwm.cli import main\n"
        "sys.exit(main(['bench', '--backends', 'sync', '--num-envs', '2', '--plot', "
        f"{str(tmp_path / 'x.png')!r}]))"
    )
    assert result.returncode == 2
    _assert_extra_hint(result.stderr, "plot")


def test_rendering_without_pygame_names_the_render_extra(tmp_path):
    result = python_c(
        "import sys; sys.modules['pygame'] = None\n"
        "from torchwm.cli import main\n"
        "sys.exit(main(['run', 'cartpole_pixels', '--steps', '2', '--no-progress']))"
    )
    assert result.returncode == 2
    _assert_extra_hint(result.stderr, "render")


def test_to_torch_without_torch_names_the_torch_extra():
    result = python_c("import sys; sys.modules['torch'] = None\nimport torchwm.torch_tensors")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("torchwm.extras.MissingExtraError: torchwm.to_torch needs torch")
    _assert_extra_hint(last, "torch")
