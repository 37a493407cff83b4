"""Checks of ``clone_state``/``restore_state``: a restore then the same actions gives the same arrays, a
state that does not fit changes no env, and a worker's restart (``restart_on_crash``) never makes a state
of an episode the caller does not hold, nor keeps a restored env from stepping."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
from typing import Any

import numpy as np

from torchwm.errors import WorkerError
from torchwm.testing.target import (
    BackendUnderTest,
    assert_same,
    random_actions,
)

_NAMES = ("observations", "rewards", "terminations", "truncations")


def check_restore_state(target: BackendUnderTest) -> None:
    """``restore_state(clone_state())`` then the same actions gives the same observations, rewards,
    terminations and truncations (episodes ending and autoresetting meanwhile); a state survives pickle
    and restored into another env, that env follows the first."""
    steps = 30
    with target.make(2, seed=0) as envs:
        envs.reset()
        for actions in random_actions(envs, 5, seed=1):
            envs.step(actions)
        states = envs.clone_state()
        plan = random_actions(envs, steps, seed=2)
        first = [tuple(np.array(x, copy=True) for x in envs.step(a)[:4]) for a in plan]
        obs, _ = envs.restore_state(pickle.loads(pickle.dumps(states)))
        assert_same(
            "observations returned by restore_state", 0, np.stack([s.observation for s in states]), obs
        )
        names = ("observations", "rewards", "terminations", "truncations")
        for t, actions in enumerate(plan, start=1):
            got = envs.step(actions)
            for name, want, part in zip(names, first[t - 1], got[:4], strict=True):
                assert_same(f"after restore_state, {name}", t, want, part)
        envs.restore_state([states[0], states[0]])
        for t, actions in enumerate(plan, start=1):
            got = envs.step(np.array([actions[0], actions[0]]))
            for name, want, part in zip(names, first[t - 1], got[:4], strict=True):
                assert_same(f"env 0's state restored into env 1, {name}", t, want[0], part[1])


def _states_can_be_saved(target: BackendUnderTest) -> None:
    """Fails on a backend that cannot clone states (it registers these checks as skipped, with why)."""
    with target.make(2, seed=0) as envs:
        envs.reset(seed=0)
        envs.clone_state()


def _restarted_idle_worker(envs: Any, n: int) -> tuple[np.ndarray, dict] | None:
    """Crash the worker of env ``n - 1`` with a step of that env alone (its other envs idle); that step's
    (observations, infos), or None when no worker restarted (the env runs in this process)."""
    envs.set_attr("crash", os.getpid(), env_ids=[n - 1])
    obs, _, _, truncations, infos = envs.step(np.array([1]), env_ids=[n - 1])
    if "worker_restarted" not in infos and not truncations[0]:
        return None
    return np.array(obs, copy=True), infos


def check_restore_after_a_restart_steps_the_restored_state(target: BackendUnderTest) -> None:
    """With ``restart_on_crash`` (on a backend that has it), envs whose worker died and was restarted, one
    of them idle then, and that are then restored, step from the restored states: their next steps apply
    their actions (no restart is reported any more) and give the arrays of Gymnasium's `SyncVectorEnv`
    from the same point, as without the crash."""
    _states_can_be_saved(target)
    if target.family == "atari":
        return  # the crash is an attribute of the generic check env
    n = 4
    try:
        envs = target.make(n, seed=0, restart_on_crash=True)
    except TypeError:
        return  # no restart_on_crash on this backend
    with envs, contextlib.closing(target.reference(n, "next_step")) as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        envs.step(np.ones(n, dtype=np.int64))
        ref.step(np.ones(n, dtype=np.int64))
        states = envs.clone_state()  # before the crash flag is set: the states hold none
        if _restarted_idle_worker(envs, n) is None:
            return  # the env runs in this process (a backend of threads): it did not crash
        ids = [n - 2, n - 1]
        obs, _ = envs.restore_state([states[i] for i in ids], env_ids=ids)
        assert_same(
            "observations returned by restore_state", 1, np.stack([states[i].observation for i in ids]), obs
        )
        for t, actions in enumerate(random_actions(envs, 8, seed=3), start=2):
            want = ref.step(actions)
            *got, infos = envs.step(actions)
            restarted = np.asarray(infos.get("worker_restarted", np.zeros(n, dtype=bool)))
            assert not restarted.any(), (
                f"step {t}: envs {np.flatnonzero(restarted).tolist()} reported their worker's restart after "
                f"restore_state put them in the states saved before it; their action was not applied"
            )
            for name, a, b in zip(_NAMES, want[:4], got, strict=True):
                assert_same(f"{name} of envs restored after their worker's restart", t, a, b)


def check_clone_after_a_restart_names_the_lost_episode(target: BackendUnderTest) -> None:
    """With ``restart_on_crash``, ``clone_state`` of envs whose worker was restarted while they were idle
    (their episodes lost, which their next step reports) never returns their new episodes' states: it
    raises `WorkerError` naming the env and the restart and changes nothing, and the envs' next step still
    reports the restart. A backend whose envs lost nothing returns states of the episodes the caller holds
    (each state's observation is the env's last one)."""
    _states_can_be_saved(target)
    if target.family == "atari":
        return  # the crash is an attribute of the generic check env
    n = 4
    try:
        envs = target.make(n, seed=0, restart_on_crash=True)
    except TypeError:
        return  # no restart_on_crash on this backend
    with envs:
        envs.reset(seed=0)
        last = np.array(envs.step(np.ones(n, dtype=np.int64))[0], copy=True)
        crashed = _restarted_idle_worker(envs, n)
        if crashed is None:
            return  # the env runs in this process (a backend of threads): it did not crash
        last[n - 1] = crashed[0][0]
        try:
            states: Any = envs.clone_state()
        except Exception as exc:  # noqa: BLE001 - the check looks at it
            error: Exception | None = exc
        else:
            error = None
        if error is None:
            for i, state in enumerate(states):
                assert_same(
                    f"env {i}'s state from clone_state: its observation (the env's last one)",
                    1,
                    last[i],
                    state.observation,
                )
            return
        assert isinstance(error, WorkerError) and "restart" in str(error) and "env " in str(error), (
            f"clone_state of envs that lost their episodes to a worker's restart raised {error!r}; "
            f"expected a WorkerError naming the env and the restart"
        )
        others = list(range(n - 1))
        *_, truncations, infos = envs.step(np.ones(n - 1, dtype=np.int64), env_ids=others)
        restarted = np.asarray(infos.get("worker_restarted", np.zeros(n - 1, dtype=bool)))
        assert restarted.any(), (
            f"after clone_state refused ({error}), no env reported the restart at its next step: "
            f"infos {infos}"
        )
        assert truncations[restarted].all(), (
            f"the envs that lost their episodes were not truncated: {truncations}"
        )
        envs.clone_state()  # every loss reported: the states are the caller's episodes again


def _damaged(state: Any) -> Any:
    """``state`` with one attribute left out of the state of a layer whose rule says what it saves
    (Gymnasium's TimeLimit or OrderEnforcing, torchwm's fused Atari env), as another version might pickle
    it."""
    for k, (name, layer_state) in enumerate(state.layers):
        known = name.rpartition(".")[2] in ("TimeLimit", "OrderEnforcing", "FusedAtariEnv")
        if known and isinstance(layer_state, dict) and layer_state:
            cut = dict(list(layer_state.items())[1:])
            layers = (*state.layers[:k], (name, cut), *state.layers[k + 1 :])
            return dataclasses.replace(state, layers=layers)
    raise AssertionError(
        f"the state {state!r} has no TimeLimit, OrderEnforcing or FusedAtariEnv layer to damage"
    )


def _steps(envs: Any, plan: list[np.ndarray]) -> list[tuple[np.ndarray, ...]]:
    return [tuple(np.array(part, copy=True) for part in envs.step(actions)[:4]) for actions in plan]


def check_a_damaged_state_changes_no_env(target: BackendUnderTest) -> None:
    """``restore_state`` of two states whose second is damaged (a layer's state without an attribute its
    rule saves) raises `TypeError` or `ValueError` (not `KeyError`) before any env changes: neither env was
    restored, so the envs step on exactly as they do from the states they were in."""
    n = 2
    with target.make(n, seed=0) as envs:
        envs.reset(seed=0)
        _steps(envs, random_actions(envs, 2, seed=5))
        states = envs.clone_state()
        _steps(envs, random_actions(envs, 2, seed=6))
        before = envs.clone_state()
        try:
            envs.restore_state([states[0], _damaged(states[1])])
        except Exception as exc:  # noqa: BLE001 - the check looks at it
            error: Exception | None = exc
        else:
            error = None
        assert isinstance(error, (TypeError, ValueError)) and not isinstance(error, LookupError), (
            f"restore_state of a damaged state raised {error!r}; expected TypeError or ValueError"
        )
        plan = random_actions(envs, 6, seed=7)
        now = _steps(envs, plan)
        envs.restore_state(before)
        for t, (got, want) in enumerate(zip(now, _steps(envs, plan), strict=True), start=1):
            for name, a, b in zip(_NAMES, want, got, strict=True):
                assert_same(f"{name} after a refused restore (no env may have changed)", t, a, b)
