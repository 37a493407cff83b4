"""`torchwm.wrappers.env_index`: the index of the env being built, for a wrapper factory (its use while a
spec's envs are built: tests/test_building.py)."""

from __future__ import annotations

import contextvars

from torchwm.wrappers.env_index import current_env_index, env_index_var


def test_the_index_is_none_outside_a_build_and_the_value_set_inside_one():
    assert current_env_index() is None
    token = env_index_var.set(3)
    try:
        assert current_env_index() == 3
        # A context variable: another context (a thread's) sees its own value, not this build's.
        assert contextvars.Context().run(current_env_index) is None
    finally:
        env_index_var.reset(token)
    assert current_env_index() is None
