"""Every conformance check of `torchwm.testing` on every registered backend.

A backend joins by being registered (built-in or plugin); it needs no test
code here. Checks a backend registered as not applicable (with the reason,
``conformance={"skip": {...}}``) are left out, and ``conformance={"variants":
[...]}`` runs every check once per set of backend options.
"""

import sys

import pytest

from torchwm import testing
from torchwm.plugins import registry


@pytest.fixture(scope="module", autouse=True)
def _stop_ray_when_done():
    """The ray plugin, if installed, keeps its local Ray between checks; nothing may outlive this module."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def _cases():
    for backend in registry("backend").names():
        for number, backend_kwargs in enumerate(testing.variants(backend)):
            label = (
                backend
                if len(testing.variants(backend)) == 1
                else f"{backend}-{number}-" + "-".join(f"{v}" for v in backend_kwargs.values())
            )
            for check in testing.checks_for(backend):
                yield pytest.param(backend, backend_kwargs, check, id=f"{label}:{check.__name__}")


@pytest.mark.parametrize(("backend", "backend_kwargs", "check"), list(_cases()))
def test_conformance(backend, backend_kwargs, check):
    check(testing.BackendUnderTest(backend, backend_kwargs))
