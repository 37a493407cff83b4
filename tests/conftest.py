"""Shared fixtures: a clean plugin state around tests that change it; the Ray tests kept together.

tests/conformance also runs installed plugin backends (Ray's among them): the Ray it starts
asks for no auth token and sends no usage stats, as the ray plugin's own tests (which run in
the same pytest process) expect. Set before Ray is imported.

Under pytest-xdist (``-n``), the tests of one module that run on the ``ray`` backend are in one
xdist group (``ray:<module>``), as each of the ray plugin's test modules is: with ``--dist
loadgroup`` a module's Ray tests run in one worker process, one after another, so that the local Ray
the module's first test starts serves the rest. Modules run in parallel, each worker with its own Ray.
"""

import os
import re
from pathlib import Path

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


TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        # The test id's parameters name the backend ("[ray]", "[ray:check_...]", "[ray-0-...]").
        params = item.name.partition("[")[2]
        if item.path.is_relative_to(TESTS) and re.search(r"\bray\b", params):
            item.add_marker(pytest.mark.xdist_group(f"ray:{item.path.stem}"))
