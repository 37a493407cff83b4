"""`torchwm.testing.checks_async`: ``env_ids``, ``send``/``recv``, deadlines and ``batch_size``. Each check
fails on a backend that breaks its rule (one of tests/testing/broken.py's, no process) and passes on
``sync``."""

import pytest

from testing.broken import (
    FirstResetIgnoresMakeSeed,
    OneSeedForAll,
    SortsEnvIds,
    SortsResetIds,
    broken_backend,
    check_fails,
)
from torchwm.testing import BackendUnderTest, checks_async

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    ("check_partial_and_async", SortsEnvIds, "infos['env_id'] of step(env_ids=[3, 0, 2, 1]) differ"),
    ("check_env_ids_order", SortsEnvIds, "infos['env_id'] of step(env_ids=[0, 3, 1]) differ"),
    ("check_reset_while_others_step", OneSeedForAll, "observation of env 1 differ"),
    ("check_recv_deadline", FirstResetIgnoresMakeSeed, "observation of env 0 differ"),
    (
        "check_reset_rows_in_env_ids_order",
        SortsResetIds,
        "observations of reset(env_ids=[3, 2], seed=[20, 21]) differ",
    ),
]
NOT_YET = "not yet: no one-method break of sync found that it catches"
# The checks not tested here, and why.
NOT_HERE = {
    "check_batch_size": NOT_YET,
    "check_rows_of_a_send_without_env_ids_come_in_env_order": NOT_YET,
}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_async, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_async).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
