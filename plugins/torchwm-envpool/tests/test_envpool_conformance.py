"""torchwm's conformance kit on the ``envpool`` backend: the checks the plugin registered as not
applicable really do not hold for EnvPool (so no skip hides a check that would pass).

Every check that applies runs in torchwm's own tests/conformance, which takes every installed backend.
"""

import pytest
from torchwm_envpool import DIFFERENCES

import torchwm.testing
from torchwm.errors import UnsupportedStackError

TARGET = torchwm.testing.BackendUnderTest("envpool")


def test_the_registered_differences_are_the_skipped_checks():
    skipped = {c.__name__ for c in torchwm.testing.CHECKS} - {
        c.__name__ for c in torchwm.testing.checks_for("envpool")
    }
    assert skipped == set(DIFFERENCES) == set(TARGET.skips)


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_each_skipped_check_fails_on_envpool(name):
    check = next(c for c in torchwm.testing.CHECKS if c.__name__ == name)
    # AssertionError: a difference in the arrays; the others: a call EnvPool cannot make.
    with pytest.raises((AssertionError, UnsupportedStackError, ValueError, NotImplementedError)):
        check(TARGET)
