"""`torchwm.testing.checks_states`: ``clone_state``/``restore_state``, under faults too. Each check fails
on a backend that breaks its rule (one of tests/testing/broken.py's, no process) and passes on ``sync``."""

import pytest

from testing.broken import RestoresNothing, RestoresOneByOne, broken_backend, check_fails
from torchwm.testing import BackendUnderTest, checks_states

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    ("check_restore_state", RestoresNothing, "after restore_state, observations differ"),
    (
        "check_a_damaged_state_changes_no_env",
        RestoresOneByOne,
        "after a refused restore (no env may have changed)",
    ),
]
RESTART = "a worker's restart: sync has no worker (tests/conformance runs it on the process backends)"
# The checks not tested here, and why.
NOT_HERE = {
    "check_restore_after_a_restart_steps_the_restored_state": RESTART,
    "check_clone_after_a_restart_names_the_lost_episode": RESTART,
}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_states, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_states).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
