"""The conformance kit: the checks every torchwm backend must pass, for us and for plugin authors.

Each check in `CHECKS` takes a `BackendUnderTest` and raises `AssertionError`
(with a message saying what was expected and what came) when the backend
breaks the vector contract of docs/concepts.md. torchwm's own ``tests/conformance``
runs every check on every registered backend; a plugin author runs them on
theirs::

    import pytest
    import torchwm.testing

    @pytest.mark.parametrize("check", torchwm.testing.checks_for("mybackend"), ids=lambda c: c.__name__)
    def test_conformance(check):
        check(torchwm.testing.BackendUnderTest("mybackend"))

or from the command line: ``torchwm check mybackend``.

Generic backends are checked on `CountdownEnv` (registered as
``torchwm/Countdown-v0``), whose episodes have a known, seed-dependent length
and end by termination or truncation, against Gymnasium's own
`SyncVectorEnv` in each autoreset mode. Backends registered with
``family="atari"`` (such as ``ale-native``) are checked on Pong with a short
frame limit. A backend that cannot meet a check registers
``conformance={"skip": {"check_name": "why"}}``, and ``conformance={"variants":
[{...backend_kwargs...}, ...]}`` runs every check once per variant (start
methods, for example). A check that cannot run where it is (a missing extra, a
feature the backend refuses) raises `CheckSkipped` with the reason, a skip for
`run_checks` and for pytest alike.

The checks live in modules by what they check: ``checks_stepping`` (spaces, autoreset, seeding, bad
actions), ``checks_states`` (``clone_state``/``restore_state``, under faults too), ``checks_async``
(``env_ids``, ``send``/``recv``, ``batch_size``), ``checks_calls`` (attributes, ``timeout``),
``checks_faults``, ``checks_seeds`` (where seeded autoresets' seeds come from), ``checks_datasets`` (what a
`VectorDataCollector` records over the backend: it needs the ``minari`` extra), ``checks_closing`` and
``checks_multiagent`` (PettingZoo envs under `torchwm.multiagent`: layouts against ``sync``,
``env_ids``, restarts, saved states); ``envs`` and ``multiagent_envs`` hold the envs they step and
``target`` what a check is given.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from torchwm.testing.checks_async import (
    check_batch_size,
    check_env_ids_order,
    check_partial_and_async,
    check_recv_deadline,
    check_reset_rows_in_env_ids_order,
    check_reset_while_others_step,
    check_rows_of_a_send_without_env_ids_come_in_env_order,
)
from torchwm.testing.checks_calls import (
    check_attributes,
    check_env_ids_in_calls,
    check_timeout_setter,
)
from torchwm.testing.checks_closing import (
    check_close,
    check_close_from_another_thread,
    check_close_from_two_threads_at_once,
)
from torchwm.testing.checks_datasets import check_every_recorded_episode_replays_from_its_seed
from torchwm.testing.checks_faults import (
    check_a_restart_announces_every_lost_episode,
    check_an_env_error_fails_its_own_send_only,
    check_recv_waits_again_after_a_timeout,
)
from torchwm.testing.checks_multiagent import (
    check_multiagent_env_ids,
    check_multiagent_layouts_match_sync,
    check_multiagent_restart_announces_every_lost_episode,
    check_multiagent_restore_state,
)
from torchwm.testing.checks_seeds import (
    check_a_restarted_worker_goes_on_with_its_envs_seeds,
    check_a_restored_state_keeps_the_envs_own_seeds,
)
from torchwm.testing.checks_states import (
    check_a_damaged_state_changes_no_env,
    check_clone_after_a_restart_names_the_lost_episode,
    check_restore_after_a_restart_steps_the_restored_state,
    check_restore_state,
)
from torchwm.testing.checks_stepping import (
    check_autoreset_disabled,
    check_autoreset_next_step,
    check_autoreset_same_step,
    check_bad_actions_rejected,
    check_envs_differ,
    check_first_reset_uses_make_seed,
    check_matches_sync,
    check_same_seed_same_trajectory,
    check_seeded_autoresets,
    check_spaces_and_dtypes,
)
from torchwm.testing.envs import ATARI_FRAME_LIMIT, ATARI_ID, COUNTDOWN_ID, CountdownEnv
from torchwm.testing.target import DEADLINE, BackendUnderTest, CheckResult, CheckSkipped

__all__ = [
    "ATARI_FRAME_LIMIT",
    "ATARI_ID",
    "CHECKS",
    "COUNTDOWN_ID",
    "DEADLINE",
    "BackendUnderTest",
    "CheckResult",
    "CheckSkipped",
    "CountdownEnv",
    "checks_for",
    "run_checks",
    "variants",
    "check_spaces_and_dtypes",
    "check_autoreset_next_step",
    "check_autoreset_same_step",
    "check_autoreset_disabled",
    "check_same_seed_same_trajectory",
    "check_matches_sync",
    "check_envs_differ",
    "check_first_reset_uses_make_seed",
    "check_seeded_autoresets",
    "check_bad_actions_rejected",
    "check_partial_and_async",
    "check_env_ids_order",
    "check_reset_while_others_step",
    "check_recv_deadline",
    "check_timeout_setter",
    "check_batch_size",
    "check_close",
    "check_close_from_two_threads_at_once",
    "check_close_from_another_thread",
    "check_attributes",
    "check_env_ids_in_calls",
    "check_reset_rows_in_env_ids_order",
    "check_rows_of_a_send_without_env_ids_come_in_env_order",
    "check_an_env_error_fails_its_own_send_only",
    "check_recv_waits_again_after_a_timeout",
    "check_a_restart_announces_every_lost_episode",
    "check_restore_state",
    "check_a_restored_state_keeps_the_envs_own_seeds",
    "check_a_restarted_worker_goes_on_with_its_envs_seeds",
    "check_a_damaged_state_changes_no_env",
    "check_restore_after_a_restart_steps_the_restored_state",
    "check_clone_after_a_restart_names_the_lost_episode",
    "check_multiagent_layouts_match_sync",
    "check_multiagent_env_ids",
    "check_multiagent_restart_announces_every_lost_episode",
    "check_multiagent_restore_state",
    "check_every_recorded_episode_replays_from_its_seed",
]

CHECKS: list[Callable[[BackendUnderTest], None]] = [
    check_spaces_and_dtypes,
    check_autoreset_next_step,
    check_autoreset_same_step,
    check_autoreset_disabled,
    check_same_seed_same_trajectory,
    check_matches_sync,
    check_envs_differ,
    check_first_reset_uses_make_seed,
    check_seeded_autoresets,
    check_bad_actions_rejected,
    check_partial_and_async,
    check_env_ids_order,
    check_reset_while_others_step,
    check_recv_deadline,
    check_timeout_setter,
    check_batch_size,
    check_close,
    check_close_from_two_threads_at_once,
    check_close_from_another_thread,
    check_attributes,
    check_env_ids_in_calls,
    check_reset_rows_in_env_ids_order,
    check_rows_of_a_send_without_env_ids_come_in_env_order,
    check_an_env_error_fails_its_own_send_only,
    check_recv_waits_again_after_a_timeout,
    check_a_restart_announces_every_lost_episode,
    check_restore_state,
    check_a_restored_state_keeps_the_envs_own_seeds,
    check_a_restarted_worker_goes_on_with_its_envs_seeds,
    check_a_damaged_state_changes_no_env,
    check_restore_after_a_restart_steps_the_restored_state,
    check_clone_after_a_restart_names_the_lost_episode,
    check_multiagent_layouts_match_sync,
    check_multiagent_env_ids,
    check_multiagent_restart_announces_every_lost_episode,
    check_multiagent_restore_state,
    check_every_recorded_episode_replays_from_its_seed,
]


def checks_for(backend: str) -> list[Callable[[BackendUnderTest], None]]:
    """The checks that apply to ``backend`` (all but those it registered as skipped, with a reason)."""
    skips = BackendUnderTest(backend).skips
    return [check for check in CHECKS if check.__name__ not in skips]


def variants(backend: str) -> list[dict[str, Any]]:
    """The backend_kwargs variants a backend asks to be checked with (``[{}]`` by default)."""
    return BackendUnderTest(backend).variants


def run_checks(backend: str, backend_kwargs: dict[str, Any] | None = None) -> list[CheckResult]:
    """Run every check on ``backend``; one result per check, failures with their message."""
    target = BackendUnderTest(backend, dict(backend_kwargs or {}))
    results = []
    for check in CHECKS:
        if check.__name__ in target.skips:
            results.append(CheckResult(check.__name__, True, target.skips[check.__name__], skipped=True))
            continue
        try:
            check(target)
        except CheckSkipped as exc:
            results.append(CheckResult(check.__name__, True, str(exc), skipped=True))
        except AssertionError as exc:
            results.append(CheckResult(check.__name__, False, str(exc)))
        except Exception:
            results.append(CheckResult(check.__name__, False, traceback.format_exc()))
        else:
            results.append(CheckResult(check.__name__, True))
    return results
