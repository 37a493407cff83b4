"""`torchwm.testing.checks_datasets`: what a `VectorDataCollector` records over a backend. Each check fails
on a backend that breaks its rule (one of tests/testing/broken.py's, no process) and passes on ``sync``
(with the ``minari`` extra)."""

import pytest

from testing.broken import ReportsWrongEpisodeSeeds, broken_backend, check_fails
from torchwm.testing import BackendUnderTest, checks_datasets

pytest.importorskip("minari")

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    (
        "check_every_recorded_episode_replays_from_its_seed",
        ReportsWrongEpisodeSeeds,
        "the reset's observation from seed",
    ),
]
# The checks not tested here, and why.
NOT_HERE = {}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_datasets, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_datasets).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
