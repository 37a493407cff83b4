"""`torchwm.registry`: the entries of one kind of plugin name, and the options each entry takes."""

from __future__ import annotations

import pytest

from torchwm.errors import DuplicateNameError
from torchwm.registry import REQUIRED, Registry, options_of, signature_options


def test_duplicate_name_is_an_error_naming_both_plugins():
    reg = Registry("backend")
    reg.register("fast", lambda spec: None, plugin="first")
    with pytest.raises(DuplicateNameError, match="'fast'.*'first'.*'second'"):
        reg.register("fast", lambda spec: None, plugin="second")


def test_override_replaces_and_keeps_the_new_plugin():
    reg = Registry("backend")
    reg.register("fast", lambda spec: 1, plugin="first")
    reg.register("fast", lambda spec: 2, plugin="second", override=True)
    assert reg.get("fast").plugin == "second"
    assert reg.get("fast").factory(None) == 2


@pytest.mark.parametrize(
    ("name", "factory", "message"),
    [
        ("", lambda spec: None, "a backend name must be a non-empty string, got '' from plugin 'mine'"),
        (3, lambda spec: None, "a backend name must be a non-empty string, got 3 from plugin 'mine'"),
        (
            "fast",
            "not callable",
            "the backend 'fast' from plugin 'mine' must be callable, got 'not callable'",
        ),
    ],
)
def test_a_bad_name_or_factory_is_refused_before_anything_is_registered(name, factory, message):
    reg = Registry("backend")
    with pytest.raises(TypeError, match=message):
        reg.register(name, factory, plugin="mine")
    assert reg.names() == [] and name not in reg


def test_entries_come_in_name_order_with_their_metadata():
    reg = Registry("wrapper")
    reg.register("zoom", lambda env: env, plugin="p", description="last")
    reg.register("clip", lambda env: env, plugin="p", family="atari")
    assert reg.names() == ["clip", "zoom"] and [entry.name for entry in reg] == ["clip", "zoom"]
    assert reg.get("clip").metadata == {"family": "atari"} and reg.get("zoom").kind == "wrapper"


def test_options_are_declared_or_read_from_the_factory_after_its_first_argument():
    def factory(env, size=4, *, padding="zero", needed, **more):
        return env

    assert signature_options(factory) == {
        "size": 4,
        "padding": "zero",
        "needed": REQUIRED,
        "**more": REQUIRED,
    }
    reg = Registry("backend")
    reg.register("read", factory)
    reg.register("declared", factory, options={"workers": 2})
    assert options_of(reg.get("read")) == signature_options(factory)
    assert options_of(reg.get("declared")) == {"workers": 2}
    # A factory whose signature cannot be read takes any keyword.
    assert signature_options(type) == {"**options": REQUIRED}
