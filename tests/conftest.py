"""Shared fixtures: a clean plugin state around tests that change it.

tests/conformance also runs installed plugin backends (Ray's among them): the single-node
Ray it starts keeps to loopback (Ray otherwise binds to the machine's own network address;
the setting also forbids multi-node clusters, which only the ray plugin's own tests start)
and asks for no auth token. Set before Ray is imported.
"""

import os

import pytest

from torchwm import plugins

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Plugins load again from scratch for this test, and once more after it."""
    plugins.reset()
    yield monkeypatch
    plugins.reset()
