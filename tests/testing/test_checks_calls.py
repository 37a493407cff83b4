"""`torchwm.testing.checks_calls`: the calls beside stepping (``get_attr``, ``set_attr``, ``call``, the
``timeout`` setter). Each check fails on a backend that breaks its rule (one of
tests/testing/broken.py's, no process) and passes on ``sync``."""

import pytest

from testing.broken import GetAttrIgnoresEnvIds, KeepsAnyTimeout, ReversesSetAttr, broken_backend, check_fails
from torchwm.testing import BackendUnderTest, checks_calls

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    ("check_attributes", ReversesSetAttr, "set_attr then get_attr gave"),
    ("check_env_ids_in_calls", GetAttrIgnoresEnvIds, "get_attr('action_space', env_ids=[2, 0]) gave"),
    ("check_timeout_setter", KeepsAnyTimeout, "timeout = 0 was accepted"),
]
# The checks not tested here, and why.
NOT_HERE = {}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_calls, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_calls).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
