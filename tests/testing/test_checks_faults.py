"""`torchwm.testing.checks_faults`: an env's error, a step past the timeout, a worker's restart. Each check
fails on a backend that breaks its rule (one of tests/testing/broken.py's, no process) and passes on
``sync``."""

import pytest

from testing.broken import HidesEnvErrors, broken_backend, check_fails
from torchwm.testing import BackendUnderTest, checks_faults

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    (
        "check_an_env_error_fails_its_own_send_only",
        HidesEnvErrors,
        "env 0's error was not raised by its send or recv",
    ),
]
RESTART = "a worker's restart: sync has no worker (tests/conformance runs it on the process backends)"
TIMEOUT = "a step past the timeout: sync steps in the caller (tests/conformance runs it on the others)"
# The checks not tested here, and why.
NOT_HERE = {
    "check_recv_waits_again_after_a_timeout": TIMEOUT,
    "check_a_restart_announces_every_lost_episode": RESTART,
}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_faults, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_faults).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
