"""Checks of where seeded autoresets' seeds come from: an env's seeds are its own, not its state's, and a
restarted worker's envs go on with their own sequences (``autoreset_seeds=True``).

Episode ``k`` drawn by env ``i`` after ``reset(seed=s)`` starts with the first word of
``numpy.random.SeedSequence(s, spawn_key=(i, k))``, whatever moved the env meanwhile (a state restored into
it, a crash of its worker). Backends that refuse the option (`UnsupportedStackError`) pass.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from torchwm.errors import UnsupportedStackError
from torchwm.testing.target import BackendUnderTest, assert_same

# Steps enough for every CountdownEnv episode (3 to 7 steps) to end a few times.
_STEPS = 40


def _sequence(seed: int, env: int, drawn: int) -> list[int]:
    """The seeds env ``env`` reports after ``reset(seed=seed)``: ``seed + env``, then ``drawn`` drawn ones."""
    return [seed + env] + [
        int(np.random.SeedSequence(seed, spawn_key=(env, k)).generate_state(1)[0]) for k in range(drawn)
    ]


def _record(seen: dict[int, list[int]], infos: dict[str, Any], env_ids: list[int]) -> None:
    """Add each reported ``episode_seed`` of ``infos`` (rows ``env_ids``) to its env's list in ``seen``."""
    if "episode_seed" not in infos:
        return
    for row, env in enumerate(env_ids):
        if infos["_episode_seed"][row]:
            seen[env].append(int(infos["episode_seed"][row]))


def check_a_restored_state_keeps_the_envs_own_seeds(target: BackendUnderTest) -> None:
    """A state of env 0 restored into env 1 carries no env identity: env 1's next drawn episodes still
    take env 1's seeds, ``SeedSequence(s, spawn_key=(1, k))`` (and env 0 its own), as `sync` gives
    them."""
    if target.family != "generic":
        return
    n, seed = 2, 7
    try:
        envs = target.make(n, seed=seed, autoreset_seeds=True)
    except UnsupportedStackError:
        return
    seen: dict[int, list[int]] = {i: [] for i in range(n)}
    with envs:
        _, infos = envs.reset(seed=seed)
        _record(seen, infos, list(range(n)))
        states = envs.clone_state(env_ids=[0])
        envs.restore_state(states, env_ids=[1])
        for _ in range(_STEPS):
            *_, infos = envs.step(np.zeros(n, dtype=np.int64))
            _record(seen, infos, list(range(n)))
    for i in range(n):
        assert len(seen[i]) >= 3, f"env {i} reported too few episode seeds in {_STEPS} steps: {seen[i]}"
        assert_same(
            f"env {i}'s episode seeds after env 0's state was restored into env 1 (seed + i, then "
            f"SeedSequence({seed}, spawn_key=({i}, k)))",
            _STEPS,
            _sequence(seed, i, len(seen[i]) - 1),
            seen[i],
        )


def check_a_restarted_worker_goes_on_with_its_envs_seeds(target: BackendUnderTest) -> None:
    """With ``restart_on_crash`` (on a backend that has it), the envs of a worker restarted after a crash go
    on with their own seed sequences: env ``i``'s episodes, the one the restart starts included, report
    ``seed + i`` then ``SeedSequence(seed, spawn_key=(i, k))`` for ``k = 0, 1, ...`` with none left out or
    repeated, so that the run still replays from its seed."""
    if target.family != "generic":
        return
    n, seed = 4, 3
    try:
        envs = target.make(n, seed=seed, autoreset_seeds=True, restart_on_crash=True)
    except TypeError:
        return  # no restart_on_crash on this backend
    except UnsupportedStackError:
        return
    everyone = list(range(n))
    seen: dict[int, list[int]] = {i: [] for i in everyone}
    zeros = np.zeros(n, dtype=np.int64)
    with envs:
        _, infos = envs.reset()
        _record(seen, infos, everyone)
        for _ in range(_STEPS // 2):
            *_, infos = envs.step(zeros)
            _record(seen, infos, everyone)
        drawn_before = len(seen[n - 1]) - 1
        # The last env: with ``inline`` the first worker's envs run in this process.
        envs.set_attr("crash", os.getpid(), env_ids=[n - 1])
        *_, truncations, infos = envs.step(np.array([1]), env_ids=[n - 1])
        if "worker_restarted" not in infos and not truncations[0]:
            return  # the env runs in this process (a backend of threads): it did not crash
        _record(seen, infos, [n - 1])
        for _ in range(_STEPS // 2):
            *_, infos = envs.step(zeros)
            _record(seen, infos, everyone)
    assert drawn_before >= 1, f"env {n - 1} drew no episode before its worker's crash: {seen[n - 1]}"
    for i in everyone:
        assert len(seen[i]) > drawn_before + 2, f"env {i} reported too few episode seeds: {seen[i]}"
        assert_same(
            f"env {i}'s episode seeds across its worker's restart (seed + i, then "
            f"SeedSequence({seed}, spawn_key=({i}, k)) for k = 0, 1, ...)",
            _STEPS,
            _sequence(seed, i, len(seen[i]) - 1),
            seen[i],
        )
