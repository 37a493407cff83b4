"""Checks of partial and asynchronous calls: ``env_ids`` in any order, ``send``/``recv``, resets while
other envs step, ``recv(timeout=, min_ready=)`` and ``batch_size``; each env's rows stay its own."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from torchwm.errors import AlreadyPendingCallError, UnsupportedStackError
from torchwm.testing.target import (
    BackendUnderTest,
    assert_same,
    assert_same_info,
    env_info,
)


def check_partial_and_async(target: BackendUnderTest) -> None:
    """reset(env_ids=), step(actions, env_ids=) and send/recv return the right rows and infos['env_id']."""
    n = 4
    with target.make(n, seed=0) as envs, target.make(n, backend="sync", seed=0) as ref:
        envs.reset()
        ref.reset()
        ids = [1, 3]
        actions = np.array([1, 2])
        got = envs.step(actions, env_ids=ids)
        want = ref.step(actions, env_ids=ids)
        assert_same("infos['env_id'] of step(env_ids=[1, 3])", 1, np.array(ids), got[4].get("env_id"))
        for name, a, b in zip(("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]):
            assert_same(f"{name} of step(env_ids=[1, 3])", 1, a, b)
        # Every env, listed in another order: each env gets its own action, rows come in that order.
        order = [3, 0, 2, 1]
        actions = np.array([2, 0, 1, 2])  # env 3's, env 0's, env 2's, env 1's
        got = envs.step(actions, env_ids=order)
        want = ref.step(actions[np.argsort(order)])
        assert_same(f"infos['env_id'] of step(env_ids={order})", 1, np.array(order), got[4].get("env_id"))
        for name, a, b in zip(("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]):
            assert_same(f"{name} of step(env_ids={order})", 1, a[order], b)
        obs, infos = envs.reset(env_ids=[2], seed=40)
        ref_obs, _ = ref.reset(env_ids=[2], seed=40)
        assert_same("reset(env_ids=[2]) observations", 2, ref_obs, obs)
        envs.send(np.zeros(n, dtype=np.int64))
        got = envs.recv()
        ref.send(np.zeros(n, dtype=np.int64))
        want = ref.recv()
        for name, a, b in zip(("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]):
            assert_same(f"{name} of send/recv", 3, a, b)


def _ordered_ids(rng: np.random.Generator, n: int, whole: bool) -> list[int]:
    """Env ids in a random order: every env (``whole``), or a random subset."""
    count = n if whole else int(rng.integers(1, n + 1))
    return rng.permutation(n)[:count].tolist()


def check_env_ids_order(target: BackendUnderTest) -> None:
    """step(actions, env_ids=...) with ids in any order: each env gets its own action, the rows come in
    the order of ``env_ids``, and each row's infos (``final_obs`` included) are its env's.

    Generic backends are compared, step by step, with one Gymnasium ``SyncVectorEnv`` per env (same
    seed, same autoreset mode); Atari backends, which step every env at once, with the same backend
    stepped in env order.
    """
    n, steps = 4, 24
    rng = np.random.default_rng(5)
    atari = target.family == "atari"
    for mode in ("next_step", "same_step"):
        try:
            envs = target.make(n, autoreset_mode=mode, seed=11)
        except UnsupportedStackError:
            if mode == "next_step":
                raise
            continue  # a backend without same_step (EnvPool's) says so at construction
        with envs:
            if atari:
                twin = target.make(n, autoreset_mode=mode, seed=11)
                references: list[Any] = []
            else:
                twin = None
                references = [target.reference(1, mode) for _ in range(n)]
            try:
                envs.reset()
                if twin is not None:
                    twin.reset()
                for i, ref in enumerate(references):
                    ref.reset(seed=11 + i)
                for t in range(1, steps + 1):
                    ids = _ordered_ids(rng, n, whole=atari or t % 4 == 0)
                    actions = rng.integers(0, envs.single_action_space.n, size=len(ids))
                    obs, rewards, term, trunc, infos = envs.step(actions, env_ids=ids)
                    assert_same(
                        f"infos['env_id'] of step(env_ids={ids})", t, np.array(ids), infos.get("env_id")
                    )
                    if twin is not None:
                        by_env = np.argsort(ids)
                        want = twin.step(actions[by_env])
                        want_rows = [tuple(np.asarray(a)[ids] for a in want[:4])]
                        want_infos = [env_info(want[4], i) for i in ids]
                    else:
                        want_rows, want_infos = [], []
                        for k, i in enumerate(ids):
                            result = references[i].step(actions[k : k + 1])
                            want_rows.append(tuple(np.asarray(a)[0] for a in result[:4]))
                            want_infos.append(env_info(result[4], 0))
                        want_rows = [tuple(np.stack(column) for column in zip(*want_rows))]
                    for name, a, b in zip(
                        ("observations", "rewards", "terminations", "truncations"),
                        want_rows[0],
                        (obs, rewards, term, trunc),
                    ):
                        assert_same(f"{name} of step(env_ids={ids}) ({mode})", t, a, b)
                    for k, i in enumerate(ids):
                        assert_same_info(
                            f"infos of env {i} (row {k}) of step(env_ids={ids}) ({mode})",
                            t,
                            want_infos[k],
                            env_info(infos, k),
                        )
            finally:
                if twin is not None:
                    twin.close()
                for ref in references:
                    ref.close()


def check_reset_while_others_step(target: BackendUnderTest) -> None:
    """An env whose result was received can be reset, and stepped again, while other envs are in flight;
    every env's rows stay its own (compared with one Gymnasium ``SyncVectorEnv`` per env). An env in
    flight cannot be reset (AlreadyPendingCallError, nothing changes). A backend that steps its batch as a
    whole (``resets_while_stepping = False``) refuses any reset while a step is in flight."""
    n, k = 4, 2
    with target.make(n, seed=0, batch_size=k) as envs:
        if not envs.resets_while_stepping or target.family == "atari":
            _, infos = envs.reset()
            # An asynchronous reset returns whichever envs were ready first, not necessarily 0..k-1.
            ready = infos["env_id"].tolist() if "env_id" in infos else list(range(envs.batch_size))
            envs.send(np.zeros(envs.batch_size, dtype=np.int64), env_ids=ready)
            try:
                envs.reset(env_ids=[0])
            except AlreadyPendingCallError:
                envs.recv()
                return
            if envs.resets_while_stepping:
                return  # an Atari backend that resets freely: its streams are not Gymnasium's to compare
            raise AssertionError("resets_while_stepping is False, but a reset ran while a step was in flight")
        references = [target.reference(1, "next_step") for _ in range(n)]
        rng = np.random.default_rng(2)
        try:
            envs.reset(seed=3)
            for i, ref in enumerate(references):
                ref.reset(seed=3 + i)
            idle = list(range(n))
            sent: dict[int, int] = {}  # the action in flight of each env
            for t in range(1, 13):
                actions = rng.integers(0, 3, size=len(idle))
                envs.send(actions, env_ids=idle)
                sent.update(zip(idle, actions.tolist(), strict=True))
                obs, rewards, *_, infos = envs.recv()
                ids = infos["env_id"].tolist()
                for row, i in enumerate(ids):
                    want = references[i].step(np.array([sent[i]]))
                    assert_same(f"observation of env {i}", t, want[0][0], obs[row])
                    assert_same(f"reward of env {i}", t, want[1][0], rewards[row])
                in_flight = sorted(set(range(n)) - set(ids))
                try:
                    envs.reset(env_ids=in_flight[:1])
                except AlreadyPendingCallError:
                    pass
                else:
                    raise AssertionError(f"reset(env_ids={in_flight[:1]}) of an env in flight was accepted")
                # Reset one of the envs just received while the others are in flight.
                seed = 100 + t
                obs, _ = envs.reset(env_ids=ids[:1], seed=seed)
                want_obs, _ = references[ids[0]].reset(seed=seed + ids[0])
                assert_same(
                    f"reset observation of env {ids[0]} while envs {in_flight} step", t, want_obs, obs
                )
                idle = ids
        finally:
            for ref in references:
                ref.close()


def check_recv_deadline(target: BackendUnderTest) -> None:
    """recv(timeout=T, min_ready=1) returns the envs ready by T (at least one) instead of raising, and the
    others come back with a later recv, with their own results."""
    if target.family == "atari":
        return  # the check slows one env down through CountdownEnv's `delay`
    n, slow = 4, 0
    with target.make(n, seed=0) as envs, target.make(n, seed=0, backend="sync") as ref:
        envs.reset()
        ref.reset()
        envs.set_attr("delay", [1.5 if i == slow else 0.0 for i in range(n)])
        actions = np.array([0, 1, 2, 1])
        envs.send(actions)
        want = ref.step(actions)
        got_ids: list[int] = []
        while len(got_ids) < n:
            obs, rewards, term, trunc, infos = envs.recv(timeout=0.3, min_ready=1)
            ids = infos["env_id"].tolist() if "env_id" in infos else list(range(n))
            assert ids and not set(ids) & set(got_ids), (
                f"recv(timeout=0.3, min_ready=1) returned envs {ids} after envs {got_ids} came back"
            )
            for row, i in enumerate(ids):
                assert_same(f"observation of env {i}", 1, want[0][i], obs[row])
                assert_same(f"reward of env {i}", 1, want[1][i], rewards[row])
            got_ids += ids
        assert sorted(got_ids) == list(range(n)), f"every env must come back once, got {got_ids}"


def check_batch_size(target: BackendUnderTest) -> None:
    """With batch_size=k, recv() returns k envs with infos['env_id'], and every env comes back."""
    n, k = 4, 2
    with target.make(n, seed=0, batch_size=k) as envs:
        envs.reset()
        envs.send(np.zeros(n, dtype=np.int64))
        seen: list[int] = []
        for _ in range(n // k):
            obs, rewards, *_, infos = envs.recv()
            assert obs.shape[0] == k and rewards.shape == (k,), (
                f"recv with batch_size={k}: expected {k} rows, got {obs.shape[0]}"
            )
            seen += infos["env_id"].tolist()
        assert sorted(seen) == list(range(n)), f"every env must come back exactly once, got env ids {seen}"
        envs.send(np.zeros(k, dtype=np.int64), env_ids=seen[:k])
        *_, infos = envs.recv()
        assert sorted(infos["env_id"].tolist()) == sorted(seen[:k]), (
            f"recv after send(env_ids={seen[:k]}) returned {infos['env_id']}"
        )


def check_reset_rows_in_env_ids_order(target: BackendUnderTest) -> None:
    """reset(env_ids=..., seed=[...]) in any order: each row is the env of ``env_ids`` at that position,
    reset with its own seed (compared with Gymnasium's SyncVectorEnv), whether the ids are one worker's
    envs or all of them."""
    if target.family == "atari":
        return
    n = 4
    with target.make(n, seed=0) as envs, contextlib.closing(target.reference(n, "next_step")) as ref:
        envs.reset(seed=0)
        for ids in ([3, 2], [3, 2, 1, 0], [1, 0, 3]):
            seeds = [20 + i for i in range(len(ids))]
            obs, infos = envs.reset(env_ids=ids, seed=seeds)
            by_env = dict(zip(ids, seeds, strict=True))
            want, _ = ref.reset(seed=[by_env.get(i, 0) for i in range(n)])
            assert_same(f"observations of reset(env_ids={ids}, seed={seeds})", 0, want[ids], obs)


def check_rows_of_a_send_without_env_ids_come_in_env_order(target: BackendUnderTest) -> None:
    """A send of every env without ``env_ids`` whose envs come back in parts (``recv(timeout=,
    min_ready=)``): each part's rows are in env order, whatever order an earlier send named."""
    if target.family == "atari":
        return
    n = 4
    with target.make(n, seed=0) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(n, dtype=np.int64), env_ids=[3, 2, 1, 0])
        envs.set_attr("delay", [1.0, 1.0, 0.0, 0.0])
        envs.send(np.zeros(n, dtype=np.int64))
        got: list[int] = []
        while len(got) < n:
            *_, infos = envs.recv(timeout=0.3, min_ready=1)
            ids = infos["env_id"].tolist() if "env_id" in infos else list(range(n))
            assert ids == sorted(ids), f"a send without env_ids came back as rows of envs {ids}, not in order"
            got += ids
