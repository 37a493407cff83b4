"""Checks of multi-agent envs (`torchwm.multiagent.make_vec`) on a backend: PettingZoo envs, each with all
its agents on one worker, give the arrays of ``sync`` in both layouts, step by ``env_ids`` naming envs,
announce every episode a worker restart lost on each agent's row, and restore saved states exactly.

They step `CountdownAgentsEnv` (`torchwm.testing.multiagent_envs`) and need PettingZoo: without it each
check raises `CheckSkipped` (pytest shows a skip with the reason, `run_checks` a skipped result),
never a failure. A backend that builds its envs from an env id (``ale-native``, ``envpool``) cannot run
them and registers them as skipped.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pickle
from typing import Any

import numpy as np

from torchwm.extras import missing_extra
from torchwm.testing.target import DEADLINE, BackendUnderTest, CheckSkipped, assert_same

N = 4  # PettingZoo envs; A = 3 agents each
A = 3


def _pettingzoo() -> None:
    """`CheckSkipped` where PettingZoo is not installed: the checks cannot build a multi-agent env."""
    if importlib.util.find_spec("pettingzoo") is None:
        raise CheckSkipped(str(missing_extra("pettingzoo", "each multi-agent check")))


def _make(
    target: BackendUnderTest,
    *,
    layout: str = "agents",
    backend: str | None = None,
    seed: int = 0,
    autoreset_mode: str = "same_step",
    **backend_kwargs: Any,
) -> Any:
    """``N`` `CountdownAgentsEnv` envs on the target backend (or on ``backend``, for comparisons)."""
    import torchwm.multiagent
    from torchwm.testing.multiagent_envs import countdown_agents

    kwargs = {**target.backend_kwargs, **backend_kwargs} if backend is None else {}
    return torchwm.multiagent.make_vec(
        [countdown_agents(A)] * N,
        N,
        backend=backend or target.name,
        layout=layout,
        seed=seed,
        autoreset_mode=autoreset_mode,
        backend_kwargs=kwargs,
    )


def _by_agent(actions: np.ndarray, agents: list[str], rows: int) -> dict[str, np.ndarray]:
    """Row actions ``(rows * A,)`` as the parallel layout's dict by agent of ``(rows,)``."""
    return {agent: actions.reshape(rows, A)[:, k] for k, agent in enumerate(agents)}


def _assert_same_step(what: str, t: int, want: Any, got: Any) -> None:
    names = ("observations", "rewards", "terminations", "truncations")
    for name, expected, part in zip(names, want[:4], got[:4], strict=True):
        if isinstance(expected, dict):
            for agent in expected:
                assert_same(f"{what}: {name} of {agent}", t, expected[agent], part[agent])
        else:
            assert_same(f"{what}: {name}", t, expected, part)


def check_multiagent_layouts_match_sync(target: BackendUnderTest) -> None:
    """Both layouts, in each autoreset mode, give the arrays of the ``sync`` backend over episodes that end
    and autoreset: all of an env's agents on one worker, rows env-major."""
    _pettingzoo()
    rng = np.random.default_rng(0)
    plan = [rng.integers(0, 3, size=N * A) for _ in range(12)]
    for layout in ("agents", "parallel"):
        for mode in ("same_step", "next_step"):
            with (
                _make(target, layout=layout, autoreset_mode=mode) as envs,
                _make(target, layout=layout, autoreset_mode=mode, backend="sync") as ref,
            ):
                what = f"layout={layout!r}, autoreset_mode={mode!r}"
                obs, _ = envs.reset()
                want, _ = ref.reset()
                _assert_same_step(what, 0, (want, {}, {}, {}), (obs, {}, {}, {}))
                for t, rows in enumerate(plan, start=1):
                    actions = _by_agent(rows, envs.agents, N) if layout == "parallel" else rows
                    _assert_same_step(what, t, ref.step(actions), envs.step(actions))


def check_multiagent_env_ids(target: BackendUnderTest) -> None:
    """``env_ids`` name PettingZoo envs: ``step(actions, env_ids=[2, 0])`` takes all agents' actions of envs
    2 then 0, returns their rows in that order with ``infos["env_id"]`` per row, as ``sync`` does; a
    ``send`` then ``recv`` does the same, with ``in_flight_ids`` naming envs meanwhile."""
    _pettingzoo()
    with _make(target) as envs, _make(target, backend="sync") as ref:
        envs.reset()
        ref.reset()
        actions = np.array([1, 2, 0, 2, 2, 1])
        got = envs.step(actions, env_ids=[2, 0])
        assert_same("infos['env_id'] of step(env_ids=[2, 0])", 1, np.repeat([2, 0], A), got[4].get("env_id"))
        _assert_same_step("step(env_ids=[2, 0])", 1, ref.step(actions, env_ids=[2, 0]), got)
        envs.send(actions, env_ids=[3, 1])
        flying = envs.in_flight_ids
        assert flying == [1, 3], f"in_flight_ids after send(env_ids=[3, 1]) is {flying}, expected [1, 3]"
        rows: dict[int, Any] = {}
        while envs.in_flight_ids:
            obs, rewards, *_, infos = envs.recv(timeout=DEADLINE)
            ids = np.asarray(infos["env_id"])
            for e in dict.fromkeys(ids.tolist()):
                rows[e] = (obs[ids == e], rewards[ids == e])
        want = ref.step(actions, env_ids=[3, 1])
        for k, e in enumerate([3, 1]):
            assert_same(f"observations of env {e} sent by env_ids", 2, want[0][k * A : k * A + A], rows[e][0])
            assert_same(f"rewards of env {e} sent by env_ids", 2, want[1][k * A : k * A + A], rows[e][1])


def check_multiagent_restart_announces_every_lost_episode(target: BackendUnderTest) -> None:
    """With ``restart_on_crash`` (on a backend that has it), a worker that dies restarts and every env it
    held ends its episode on every agent's row: truncated, not terminated, reward 0 (no step ran),
    ``infos["worker_restarted"]``, the rows held before in ``final_obs`` (same_step); the env in flight
    in its result, the idle ones in their next step. Every other env steps on as on ``sync``."""
    _pettingzoo()
    from torchwm.testing.multiagent_envs import arm

    try:
        envs = _make(target, restart_on_crash=True)
    except TypeError:
        return  # no restart_on_crash on this backend
    with envs, contextlib.closing(_make(target, backend="sync")) as ref:
        envs.reset()
        ref.reset()
        held = np.array(envs.step(np.ones(N * A, dtype=np.int64))[0], copy=True)
        ref.step(np.ones(N * A, dtype=np.int64))
        # The last env: with ``inline`` the first worker's envs run in this process.
        envs.call(arm, "crash", os.getpid(), env_ids=[N - 1])
        obs, rewards, terminations, truncations, infos = envs.step(np.full(A, 2), env_ids=[N - 1])
        if "worker_restarted" not in infos and not truncations.any():
            return  # the env runs in this process (a backend of threads): it did not crash
        _assert_restarted(
            f"env {N - 1}, crashed in its step", range(A), rewards, terminations, truncations, infos
        )
        assert_same(f"final_obs of env {N - 1}'s rows", 1, held[-A:], np.stack(infos["final_obs"]))
        others = list(range(N - 1))
        want = ref.step(np.full((N - 1) * A, 2), env_ids=others)
        obs, rewards, terminations, truncations, infos = envs.step(np.full((N - 1) * A, 2), env_ids=others)
        restarted = np.asarray(infos.get("worker_restarted", np.zeros((N - 1) * A, dtype=bool)))
        restarted = restarted & np.asarray(infos.get("_worker_restarted", np.ones_like(restarted)))
        for i in others:
            rows = range(i * A, i * A + A)
            if restarted[i * A]:
                _assert_restarted(
                    f"env {i}, idle on the crashed worker", rows, rewards, terminations, truncations, infos
                )
                assert_same(
                    f"final_obs of env {i}'s rows",
                    2,
                    held[i * A : i * A + A],
                    np.stack(infos["final_obs"][rows.start : rows.stop]),
                )
                continue
            for name, expected, part in zip(
                ("observations", "rewards"), want[:2], (obs, rewards), strict=True
            ):
                assert_same(
                    f"{name} of env {i}, not restarted",
                    2,
                    expected[rows.start : rows.stop],
                    part[rows.start : rows.stop],
                )


def _assert_restarted(
    what: str, rows: range, rewards: Any, terminations: Any, truncations: Any, infos: Any
) -> None:
    rows_ = list(rows)
    assert np.asarray(truncations)[rows_].all() and not np.asarray(terminations)[rows_].any(), (
        f"{what}: every agent's row must end truncated, not terminated; got truncations "
        f"{np.asarray(truncations)[rows_]}, terminations {np.asarray(terminations)[rows_]}"
    )
    assert (np.asarray(rewards)[rows_] == 0).all(), (
        f"{what}: no step ran, so no reward; got {np.asarray(rewards)[rows_]}"
    )
    assert np.asarray(infos.get("worker_restarted", np.zeros(len(rewards), dtype=bool)))[rows_].all(), (
        f"{what}: infos['worker_restarted'] must be on every agent's row, got {infos.get('worker_restarted')}"
    )
    assert np.asarray(infos.get("_final_obs", np.zeros(len(rewards), dtype=bool)))[rows_].all(), (
        f"{what}: under same_step the rows held before the crash are the final observations"
    )


def check_multiagent_restore_state(target: BackendUnderTest) -> None:
    """``restore_state(clone_state())`` of whole PettingZoo envs (the state pickled), then the same actions,
    gives the same arrays in both layouts, episodes ending and autoresetting meanwhile."""
    _pettingzoo()
    rng = np.random.default_rng(1)
    plan = [rng.integers(0, 3, size=N * A) for _ in range(10)]
    for layout in ("agents", "parallel"):
        with _make(target, layout=layout) as envs:
            envs.reset()
            _copied_step(envs, layout, plan[0])
            states = pickle.loads(pickle.dumps(envs.clone_state()))
            first = [_copied_step(envs, layout, actions) for actions in plan]
            envs.restore_state(states)
            for t, actions in enumerate(plan, start=1):
                got = _copied_step(envs, layout, actions)
                _assert_same_step(f"layout={layout!r}, after restore_state", t, first[t - 1], got)


def _copied_step(envs: Any, layout: str, actions: np.ndarray) -> tuple[Any, ...]:
    """A step of row actions in either layout: copies of its observations, rewards and flags."""
    given: Any = _by_agent(actions, envs.agents, N) if layout == "parallel" else actions
    return tuple(
        {key: np.copy(value) for key, value in part.items()} if isinstance(part, dict) else np.copy(part)
        for part in envs.step(given)[:4]
    )
