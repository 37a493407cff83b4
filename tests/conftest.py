"""Shared fixtures: a clean plugin state around tests that change it."""

import pytest

from torchwm import plugins


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Plugins load again from scratch for this test, and once more after it."""
    plugins.reset()
    yield monkeypatch
    plugins.reset()
