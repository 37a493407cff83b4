"""`torchwm.testing.checks_stepping`: spaces, autoresets, seeding and bad actions. Each check fails on a
backend that breaks its rule (one of tests/testing/broken.py's, no process) and passes on ``sync``."""

import pytest

from testing.broken import (
    FirstResetIgnoresMakeSeed,
    Float64Observations,
    NoisyObservations,
    OneSeedForAll,
    PaysDouble,
    ReportsWrongEpisodeSeeds,
    TakesAnyActionCount,
    broken_backend,
    check_fails,
)
from torchwm.testing import BackendUnderTest, checks_stepping

# Each check, the backend that breaks its rule and what the check's error says.
BROKEN = [
    ("check_spaces_and_dtypes", Float64Observations, "float64 not in Box"),
    ("check_autoreset_next_step", PaysDouble, "rewards differ at step 1"),
    ("check_autoreset_same_step", PaysDouble, "rewards differ at step 1"),
    ("check_autoreset_disabled", PaysDouble, "rewards differ at step 1"),
    ("check_same_seed_same_trajectory", NoisyObservations, "arrays of two runs with the same seed differ"),
    ("check_matches_sync", PaysDouble, "arrays of 'broken' and 'sync' differ"),
    ("check_envs_differ", OneSeedForAll, "env 0 and env 1 gave the same observations"),
    (
        "check_first_reset_uses_make_seed",
        FirstResetIgnoresMakeSeed,
        "reset() after make_vec(seed=21) and reset(seed=21) differ",
    ),
    ("check_seeded_autoresets", ReportsWrongEpisodeSeeds, "infos['episode_seed'][0] differ"),
    ("check_bad_actions_rejected", TakesAnyActionCount, "was accepted; expected ValueError"),
]
# The checks not tested here, and why.
NOT_HERE = {}


@pytest.mark.parametrize(("check", "broken", "says"), BROKEN, ids=[check for check, _, _ in BROKEN])
def test_a_check_fails_on_a_backend_that_breaks_its_rule_and_passes_on_sync(
    fresh_plugins, check, broken, says
):
    check = getattr(checks_stepping, check)
    check(BackendUnderTest("sync"))
    check_fails(check, broken_backend(broken), says)


def test_every_check_of_the_module_is_tested_here_or_says_why_not():
    checks = {
        name for name, value in vars(checks_stepping).items() if name.startswith("check_") and callable(value)
    }
    assert checks == {check for check, _, _ in BROKEN} | set(NOT_HERE)
