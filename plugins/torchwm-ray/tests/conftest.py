"""Fixtures: one local Ray instance for a whole test module, started by the tests, not by torchwm.

The ``ray`` backend then finds Ray running, uses it, and leaves it running when an
env closes (it stops only a Ray it started itself), so the module pays Ray's start once.

Ray's token authentication is turned off for the whole test run, before anything starts Ray:
the two-node test's ``ray start`` nodes and every local Ray must agree on it, and a Ray
process reads the setting once. Every node these tests start listens on loopback only.

Under pytest-xdist (``-n``, ``--dist loadgroup``) with the whole suite, each test module here is one
unit of work (tests/conftest.py's ``xdist_scope``): one worker runs the module, with its one Ray;
modules run in parallel.
"""

import os

os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"

import pytest  # noqa: E402
import ray  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    assert not ray.is_initialized(), "a previous test module left Ray connected"
    # address="local": a Ray of this module's own, never one another program (or test worker) started.
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    yield
    ray.shutdown()
