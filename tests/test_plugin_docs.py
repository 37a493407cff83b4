"""The plugin author's docs keep up with the code: every hook of `torchwm.hookspecs` is documented
in docs/plugins/hooks.md with its exact signature, and so is the ``register`` callback; the example
plugins of docs/plugins/ install as packages, from the pages' own text, and run."""

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pluggy
import pytest
import tomllib

from torchwm import hookspecs, plugins

HOOKS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "plugins" / "hooks.md"


def documented_signature(function) -> str:
    """``name(param: Type, ...) -> Return`` as inspect gives it, annotations unquoted."""
    return f"{function.__name__}{inspect.signature(function)}".replace("'", "")


def hookspec_functions():
    marker = f"{hookspecs.PROJECT_NAME}_spec"
    return [f for _, f in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(f, marker)]


def test_hookspecs_are_found():
    names = {f.__name__ for f in hookspec_functions()}
    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    assert names == {name for name in dir(manager.hook) if not name.startswith("_")}


@pytest.mark.parametrize("hook", hookspec_functions(), ids=lambda f: f.__name__)
def test_every_hook_is_documented_with_its_exact_signature(hook):
    page = HOOKS_PAGE.read_text()
    signature = documented_signature(hook)
    assert f"def {signature}" in page, f"docs/plugins/hooks.md does not show `def {signature}`"
    assert f"## {hook.__name__}" in page, f"docs/plugins/hooks.md has no section `## {hook.__name__}`"


def test_the_register_callback_is_documented_with_its_exact_signature():
    parameters = list(inspect.signature(hookspecs.Register.__call__).parameters.values())[1:]  # without self
    signature = str(
        inspect.Signature(
            parameters, return_annotation=inspect.signature(hookspecs.Register.__call__).return_annotation
        )
    ).replace("'", "")
    assert f"register{signature}" in HOOKS_PAGE.read_text()


# -- the docs' example plugins install as packages and run -----------------------------------------------

DOCS = HOOKS_PAGE.parent
FENCE = re.compile(r"^```(python|toml)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def example_package(page: str) -> tuple[str, str, str]:
    """(distribution's pyproject.toml, module name, module text) of the page's example plugin: the first
    ```toml block with an entry point and the first ```python block, taken from the page as written."""
    blocks = FENCE.findall((DOCS / page).read_text())
    pyproject = next(
        text for kind, text in blocks if kind == "toml" and "[project.entry-points.torchwm]" in text
    )
    module_text = next(text for kind, text in blocks if kind == "python")
    (module_name,) = tomllib.loads(pyproject)["project"]["entry-points"]["torchwm"].values()
    return pyproject, module_name, module_text


def install_example(page: str, root: Path) -> tuple[Path, str]:
    """pip-installs the page's example plugin (no network: --no-deps, --no-build-isolation) into a
    directory of its own; returns that directory (for PYTHONPATH) and the entry-point name."""
    pyproject, module_name, module_text = example_package(page)
    source = root / "src"
    (source / module_name).mkdir(parents=True)
    (source / module_name / "__init__.py").write_text(module_text)
    if "[build-system]" not in pyproject:
        pyproject = (
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
            + pyproject
        )
    (source / "pyproject.toml").write_text(pyproject)
    target = root / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    entry_points = tomllib.loads(pyproject)["project"]["entry-points"]["torchwm"]
    return target, next(iter(entry_points))


USE_BACKEND = """
import sys
import numpy as np
import torchwm
name, options = sys.argv[1], {"num_workers": 2} if sys.argv[1] == "thread-pool" else {"num_threads": 2}
info = {b.name: b for b in torchwm.list_backends()}[name]
print(info.plugin, info.distribution, torchwm.plugins.failed_plugins())
with torchwm.make_vec("CartPole-v1", 4, backend=name, seed=0, backend_kwargs=options) as envs, \\
        torchwm.make_vec("CartPole-v1", 4, backend="sync", seed=0) as reference:
    assert np.array_equal(envs.reset()[0], reference.reset()[0])
    actions = np.ones(4, dtype=np.int64)
    assert np.array_equal(envs.step(actions)[0], reference.step(actions)[0])
print("ok")
"""


@pytest.mark.parametrize("page", ["transport.md", "tutorial.md"])
def test_the_docs_example_plugin_installs_and_runs_as_written(page, tmp_path):
    site, name = install_example(page, tmp_path)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    env.pop(plugins.REPORTED_ENV, None)
    out = subprocess.run(
        [sys.executable, "-c", USE_BACKEND, name],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    distribution = tomllib.loads((tmp_path / "src" / "pyproject.toml").read_text())["project"]["name"]
    assert out.stdout.split() == [name, distribution, "[]", "ok"]
    assert "not loaded" not in out.stderr
