"""Checks of faults: an env's error belongs to the call that collects that env, a step past the timeout
can be waited for again, and a restarted worker announces every episode it lost."""

from __future__ import annotations

import contextlib
import os
import time

import numpy as np

from torchwm.testing.target import (
    DEADLINE,
    BackendUnderTest,
    assert_same,
    raises,
)


def check_an_env_error_fails_its_own_send_only(target: BackendUnderTest) -> None:
    """One env's error is raised by the call that collects that env, as soon as it is known: a step sent
    before it comes back afterwards with its own rows; a reset of another env beside the failing step
    resets that env; the error does not wait for a slow env of another send. On a backend that steps in
    ``send`` the error may come from ``send``."""
    if target.family == "atari":
        return
    n, one = 4, np.array([1])
    with target.make(n, seed=0) as envs, target.make(n, seed=0, backend="sync") as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        want = ref.step(one, env_ids=[2])
        envs.set_attr("delay", [0.0, 0.0, 0.5, 0.0])
        envs.set_attr("broken", [True, False, False, False])
        envs.send(one, env_ids=[2])
        error = raises(lambda: (envs.send(one, env_ids=[0]), envs.recv()))
        assert error is not None and "broke on purpose" in str(error), (
            f"env 0's error was not raised by its send or recv: {error!r}"
        )
        obs, rewards, *_, infos = envs.recv()
        assert infos.get("env_id", np.arange(n)).tolist() == [2], (
            f"the recv after env 0's error returned envs {infos.get('env_id')}, expected env 2's step"
        )
        assert_same("observation of env 2 sent before env 0's error", 1, want[0], obs)
        assert_same("reward of env 2 sent before env 0's error", 1, want[1], rewards)
        # A reset of env 1 while env 0's step fails resets env 1; env 0's error is its own recv's.
        envs.reset(env_ids=[0], seed=0)
        envs.set_attr("delay", [0.3, 0.0, 0.0, 0.0])
        sent = raises(lambda: envs.send(one, env_ids=[0]))
        obs, _ = envs.reset(env_ids=[1], seed=5)
        want_obs, _ = ref.reset(env_ids=[1], seed=5)
        assert_same("reset of env 1 beside env 0's failing step", 0, want_obs, obs)
        error = sent or raises(envs.recv)
        assert error is not None and "broke on purpose" in str(error), (
            f"env 0's error was not raised by the recv that collects it: {error!r}"
        )
        # The error comes when it is known, not after a slow step of another env.
        envs.reset(env_ids=[0], seed=0)
        envs.set_attr("delay", [0.0, 0.0, 3.0, 0.0])
        started = time.monotonic()
        error = raises(lambda: (envs.send(np.zeros(n, dtype=np.int64)), envs.recv()))
        waited = time.monotonic() - started
        assert error is not None and "broke on purpose" in str(error), f"expected env 0's error: {error!r}"
        assert waited < 2.0, f"env 0's error came after {waited:.1f} s: it waited for env 2's 3 s step"


def check_recv_waits_again_after_a_timeout(target: BackendUnderTest) -> None:
    """A step that outlasts the backend's timeout: recv() raises EnvTimeoutError (a TimeoutError), the
    step stays in flight, and recv(timeout=longer) returns its own rows."""
    if target.family == "atari":
        return
    n = 2
    with target.make(n, seed=0) as envs, target.make(n, seed=0, backend="sync") as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        actions = np.array([1, 2])
        want = ref.step(actions)
        envs.set_attr("delay", [1.5, 0.0])
        envs.timeout = 0.5
        first = raises(lambda: envs.step(actions))
        if first is None:
            return  # a backend that steps in the caller's process has nothing to time out
        assert isinstance(first, TimeoutError), f"a step past the timeout raised {first!r}"
        obs, rewards, *_ = envs.recv(timeout=DEADLINE)
        assert_same("observations of the step waited for again", 1, want[0], obs)
        assert_same("rewards of the step waited for again", 1, want[1], rewards)


def check_a_restart_announces_every_lost_episode(target: BackendUnderTest) -> None:
    """With ``restart_on_crash`` (on a backend that has it), a worker that dies restarts, and every env it
    held says that its episode ended (truncated, ``infos["worker_restarted"]``): the env in flight in its
    result, the idle ones in their next step. Every other env steps on as Gymnasium's SyncVectorEnv."""
    if target.family == "atari":
        return
    n = 4
    try:
        envs = target.make(n, seed=0, restart_on_crash=True)
    except TypeError:
        return  # no restart_on_crash on this backend
    with envs, contextlib.closing(target.reference(n, "next_step")) as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        ref.step(np.zeros(n, dtype=np.int64))
        envs.step(np.zeros(n, dtype=np.int64))
        # The last env: with ``inline`` the first worker's envs run in this process.
        envs.set_attr("crash", os.getpid(), env_ids=[n - 1])
        *_, truncations, infos = envs.step(np.array([1]), env_ids=[n - 1])
        if "worker_restarted" not in infos and not truncations[0]:
            return  # the env runs in this process (a backend of threads): it did not crash
        assert truncations[0] and infos.get("worker_restarted", [False])[0], (
            f"the crashed env's step: truncated {truncations}, infos {infos}"
        )
        others = list(range(n - 1))
        want = ref.step(np.ones(n, dtype=np.int64))
        obs, rewards, _, truncations, infos = envs.step(np.ones(n - 1, dtype=np.int64), env_ids=others)
        restarted = infos.get("worker_restarted", np.zeros(n - 1, dtype=bool))
        for row, i in enumerate(others):
            if restarted[row]:
                assert truncations[row], f"env {i}, restarted while idle, did not end its episode"
                continue
            assert_same(f"observation of env {i}, not restarted", 2, want[0][i], obs[row])
            assert_same(f"reward of env {i}, not restarted", 2, want[1][i], rewards[row])
