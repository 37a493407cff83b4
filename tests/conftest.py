"""Shared fixtures: a clean plugin state around tests that change it.

tests/conformance also runs installed plugin backends (Ray's among them): the Ray it starts
asks for no auth token and sends no usage stats, as the ray plugin's own tests (which run in
the same pytest process) expect. Set before Ray is imported.
"""

import os

import pytest

from torchwm import plugins

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Plugins load again from scratch for this test, and once more after it."""
    plugins.reset()
    yield monkeypatch
    plugins.reset()
