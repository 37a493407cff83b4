"""Every check of torchwm's conformance kit (`torchwm.testing.CHECKS`) on the ``ray`` backend."""

import pytest

import torchwm.testing


@pytest.mark.parametrize("check", torchwm.testing.CHECKS, ids=lambda check: check.__name__)
def test_ray_passes_conformance_check(local_ray, check):
    check(torchwm.testing.BackendUnderTest("ray"))
