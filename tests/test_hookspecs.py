"""`torchwm.hookspecs`: the hooks a plugin implements, each documented with an example."""

from __future__ import annotations

import pluggy

from torchwm import hookspecs, plugins


def test_every_hook_has_a_docstring_with_an_example():
    for name in plugins.HOOK_KINDS:
        doc = getattr(hookspecs, name).__doc__
        assert doc and "register(" in doc, f"hook {name} needs a docstring with an example"


def test_each_hook_is_a_spec_of_torchwms_project_and_hookimpl_marks_an_implementation():
    assert {name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "torchwm_spec")} == set(
        plugins.HOOK_KINDS
    )

    class Plugin:
        @hookspecs.hookimpl
        def register_wrappers(self, register):
            register("mark", lambda env: env)

    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    manager.register(Plugin())
    seen = []
    manager.hook.register_wrappers(register=lambda name, factory, **metadata: seen.append(name))
    assert seen == ["mark"]
