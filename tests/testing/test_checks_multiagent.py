"""`torchwm.testing.checks_multiagent`: PettingZoo envs under `torchwm.multiagent` on a backend. Each check
fails on a backend that breaks its rule (one of tests/testing/broken.py's, no process) and passes on
``sync``."""

import pytest

from testing.broken import ResetsInsteadOfRestoring, SortsEnvIds, broken_backend, check_fails
from torchwm.testing import BackendUnderTest, checks_multiagent

pytest.importorskip("pettingzoo")

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    ("check_multiagent_env_ids", SortsEnvIds, "infos['env_id'] of step(env_ids=[2, 0]) differ"),
    ("check_multiagent_restore_state", ResetsInsteadOfRestoring, "after restore_state: observations differ"),
]
NOT_YET = "not yet: no one-method break of sync found that it catches"
RESTART = "a worker's restart: sync has no worker (tests/conformance runs it on the process backends)"
# The checks not tested here, and why.
NOT_HERE = {
    "check_multiagent_layouts_match_sync": NOT_YET,
    "check_multiagent_restart_announces_every_lost_episode": RESTART,
}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_multiagent, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name
        for name, value in vars(checks_multiagent).items()
        if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
