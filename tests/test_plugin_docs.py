"""The plugin author's docs keep up with the code: every hook of `torchwm.hookspecs` is documented
in docs/plugins/hooks.md with its exact signature, and so is the ``register`` callback."""

import inspect
from pathlib import Path

import pluggy
import pytest

from torchwm import hookspecs

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
    signature = str(inspect.Signature(parameters, return_annotation=inspect.signature(
        hookspecs.Register.__call__).return_annotation)).replace("'", "")
    assert f"register{signature}" in HOOKS_PAGE.read_text()
