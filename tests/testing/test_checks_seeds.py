"""`torchwm.testing.checks_seeds`: where seeded autoresets' seeds come from. Each check fails on a backend
that breaks its rule (one of tests/testing/broken.py's, no process) and passes on ``sync``."""

import pytest

from testing.broken import RestoredEnvsChangeSeeds, broken_backend, check_fails
from torchwm.testing import BackendUnderTest, checks_seeds

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    (
        "check_a_restored_state_keeps_the_envs_own_seeds",
        RestoredEnvsChangeSeeds,
        "episode seeds after env 0's state was restored into env 1",
    ),
]
RESTART = "a worker's restart: sync has no worker (tests/conformance runs it on the process backends)"
# The checks not tested here, and why.
NOT_HERE = {
    "check_a_restarted_worker_goes_on_with_its_envs_seeds": RESTART,
}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_seeds, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_seeds).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
