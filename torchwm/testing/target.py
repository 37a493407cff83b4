"""What a check is given and what it gives back: `BackendUnderTest`, `CheckResult`, and the comparisons
the checks share.

A backend tells the kit which checks do not apply to it and which options to run them under with its
registration's ``conformance`` metadata (docs/plugins/testing.md). torchwm's own backends register
none: the kit keeps theirs in `BUILTIN_CONFORMANCE`, so that the production modules carry nothing
that only the checks read.
"""

from __future__ import annotations

import dataclasses
import unittest
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

import torchwm
from torchwm.plugins import registry
from torchwm.spec import setup_keywords
from torchwm.testing.envs import ATARI_FRAME_LIMIT, ATARI_ID, COUNTDOWN_ID

DEADLINE = 60.0  # seconds a check waits for what must happen, generous for a loaded machine

# Every check runs under each start method, with envs split over two workers, and with the parent
# stepping worker 0's share next to one worker process (inline=True).
PROCESS_BACKEND_VARIANTS: list[dict[str, Any]] = [
    {"context": method, "num_workers": 2} for method in ("fork", "forkserver", "spawn")
] + [{"context": method, "num_workers": 2, "inline": True} for method in ("fork", "forkserver")]

# The checks ALE's engine cannot meet, and why (docs/atari.md says the same).
ALE_NATIVE_SKIPS = {
    "check_matches_sync": "ALE draws no-ops with its own C++ RNG (0..noop_max-1) and seeds sticky actions "
    "with the raw seed, where Gymnasium's AtariEnv derives both from a SeedSequence (no-ops "
    "1..noop_max): same seed, other streams. Equal arrays hold with noop_max=0 and no "
    "sticky actions (tests/vector/test_ale_native.py)",
    "check_partial_and_async": "AtariVectorEnv steps all envs (or the batch of its last result) together: "
    "step(actions, env_ids=<a subset>) is refused with NotImplementedError",
    "check_batch_size": "batch_size=k is ALE's EnvPool-style asynchronous mode: reset() and recv() return "
    "k envs and send() takes k actions for those envs; it does not promise that every env comes back",
    "check_attributes": "the envs are C++ objects: set_attr is refused with NotImplementedError (get_attr "
    "answers the spaces, render_mode and get_action_meanings)",
    "check_restore_state": "ALE's AtariVectorEnv cannot clone or restore one env: clone_state and "
    "restore_state raise NotImplementedError naming shmem",
    "check_a_damaged_state_changes_no_env": "no clone_state or restore_state (see check_restore_state)",
    "check_restore_after_a_restart_steps_the_restored_state": "no clone_state or restore_state, and no "
    "restart_on_crash",
    "check_clone_after_a_restart_names_the_lost_episode": "no clone_state or restore_state, and no "
    "restart_on_crash",
    **{
        name: "ALE's C++ AtariVectorEnv builds its envs from an env id: it cannot run PettingZoo envs, "
        "which torchwm.multiagent gives backends as factories"
        for name in (
            "check_multiagent_layouts_match_sync",
            "check_multiagent_env_ids",
            "check_multiagent_restart_announces_every_lost_episode",
            "check_multiagent_restore_state",
        )
    },
}

# The ``conformance`` metadata of torchwm's own backends, by backend name: read when the backend's
# registration has none of its own.
BUILTIN_CONFORMANCE: dict[str, dict[str, Any]] = {
    "subproc": {"variants": PROCESS_BACKEND_VARIANTS},
    "shmem": {"variants": PROCESS_BACKEND_VARIANTS},
    "ale-native": {"skip": ALE_NATIVE_SKIPS},
}


@dataclasses.dataclass
class BackendUnderTest:
    """A backend and the options to build it with, as the checks see it."""

    name: str
    backend_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def metadata(self) -> dict[str, Any]:
        return registry("backend").get(self.name).metadata

    @property
    def family(self) -> str:
        return self.metadata.get("family", "generic")

    @property
    def conformance(self) -> dict[str, Any]:
        """The backend's registered ``conformance`` metadata, else the kit's own for a torchwm backend."""
        metadata = self.metadata
        if "conformance" in metadata:
            return dict(metadata["conformance"])
        return BUILTIN_CONFORMANCE.get(self.name, {})

    @property
    def skips(self) -> dict[str, str]:
        """The checks that do not apply to this backend, each with the reason."""
        return dict(self.conformance.get("skip", {}))

    @property
    def variants(self) -> list[dict[str, Any]]:
        """The backend_kwargs each check runs with, one run per entry (``[{}]``: once, with none)."""
        return [dict(variant) for variant in self.conformance.get("variants", [{}])]

    def make(self, num_envs: int = 4, *, backend: str | None = None, **options: Any) -> Any:
        """The check env on this backend (or on ``backend``, for comparisons).

        ``options``: `torchwm.make_vec`'s setup options (``seed``, ``autoreset_mode``, ``autoreset_seeds``,
        ...: whatever `torchwm.spec.setup_options` declares) go to make_vec; any other keyword is a
        backend option, over the variant's (on ``backend``, only those given).
        """
        taken = setup_keywords()
        setup = {name: value for name, value in options.items() if name in taken}
        backend_kwargs = {name: value for name, value in options.items() if name not in taken}
        kwargs = {**self.backend_kwargs, **backend_kwargs} if backend is None else {}
        kwargs.update(setup.pop("backend_kwargs", None) or {})
        atari = self.family == "atari"
        frame_limit: dict[str, Any] = {"max_num_frames_per_episode": ATARI_FRAME_LIMIT} if atari else {}
        return torchwm.make_vec(
            ATARI_ID if atari else COUNTDOWN_ID,
            num_envs,
            backend=backend or self.name,
            backend_kwargs=kwargs,
            **setup,
            **frame_limit,
        )

    def reference(self, num_envs: int, autoreset_mode: str) -> gym.vector.SyncVectorEnv:
        """Gymnasium's own SyncVectorEnv on the check env."""
        mode = torchwm.spec.AUTORESET_MODES[autoreset_mode]
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make(COUNTDOWN_ID) for _ in range(num_envs)], autoreset_mode=mode
        )


class CheckSkipped(unittest.SkipTest):
    """A check that cannot run here, raised with what is missing (an extra, a feature the backend refuses):
    `run_checks` reports it skipped with that reason, and pytest (which takes `unittest.SkipTest` as a skip)
    a skipped test."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check's outcome on a backend, as `run_checks` gives it."""

    name: str
    passed: bool
    message: str = ""
    skipped: bool = False


def random_actions(envs: Any, steps: int, seed: int = 0) -> list[np.ndarray]:
    """``steps`` batches of random discrete actions for ``envs``, the same for the same ``seed``."""
    space = envs.single_action_space
    rng = np.random.default_rng(seed)
    return [rng.integers(0, space.n, size=envs.num_envs) for _ in range(steps)]


def assert_same(what: str, step: int, expected: Any, got: Any) -> None:
    """`AssertionError` showing both arrays unless they are equal."""
    if not np.array_equal(np.asarray(expected), np.asarray(got)):
        raise AssertionError(f"{what} differ at step {step}:\nexpected {expected!r}\ngot      {got!r}")


def env_info(infos: dict[str, Any], row: int) -> dict[str, Any]:
    """Row ``row``'s own infos, read back from a batch of infos by their ``_key`` masks (``env_id`` left
    out: Gymnasium's vector envs have none)."""
    own: dict[str, Any] = {}
    for key, value in infos.items():
        if key == "env_id" or (isinstance(key, str) and key.startswith("_") and key[1:] in infos):
            continue
        mask = infos.get(f"_{key}")
        if mask is None or mask[row]:
            own[key] = env_info(value, row) if isinstance(value, dict) else value[row]
    return own


def assert_same_info(what: str, step: int, expected: dict[str, Any], got: dict[str, Any]) -> None:
    """`assert_same` for two envs' infos (as `env_info` gives them), key by key."""
    if set(expected) != set(got):
        raise AssertionError(
            f"{what} differ at step {step}: expected keys {sorted(expected)}, got {sorted(got)}"
        )
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_same_info(f"{what}[{key!r}]", step, value, got[key])
        else:
            assert_same(f"{what}[{key!r}]", step, value, got[key])


def raises(call: Callable[[], Any]) -> BaseException | None:
    """What ``call()`` raised, or None."""
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the check looks at it
        return error
    return None
