"""Faults on the ``ray`` backend that are Ray's own, and what follows them.

tests/vector/faults/ holds every backend, Ray's default configuration on one node among them
(steps through a shared block), to the faults contract (an env that raises, a hang, an actor process
killed, segfaulted or exited, a reply that cannot be pickled, Ctrl-C mid-step). Here: faults on Ray's
own channels (``shared_memory=False``), with the compiled graph and with actor calls, which actor a
hang names, the real deadline of a timed-out call, and a step over actor calls waiting outside Ray
(where ``ray.shutdown()`` from another thread cannot leave it spinning). After each, the
vector env must raise a clear error before its deadline, then either work (a reset and steps give
the arrays of a fresh ``sync`` env with the same seed) or say that it is closed; and leave no actor
process behind after ``close()``.

The faulty env is defined here and travels to the actors by value (Ray's cloudpickle), since the
actor processes cannot import this test module.
"""

import sys
import threading
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
import ray
from ray import cloudpickle
from support.processes import wait_until_ended

import torchwm
from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError, WorkerError
from torchwm.testing import CountdownEnv

FAULT_ID = "torchwm_ray_tests/Fault-v0"
TIMEOUT = 20.0  # the backend's timeout in these tests, in seconds: every error must come before it


class FaultEnv(CountdownEnv):
    """`CountdownEnv` that misbehaves once at its next step, as ``set_attr("fault", ...)`` says."""

    def __init__(self, render_mode=None):
        super().__init__(render_mode)
        self.fault = None

    def pause(self, seconds):
        time.sleep(seconds)
        return seconds

    def step(self, action):
        fault, self.fault = self.fault, None
        if fault == "raise":
            raise RuntimeError("injected fault")
        if fault == "hang":
            time.sleep(3600)
        if fault == "slow":
            time.sleep(0.5)
        if fault == "slower":
            time.sleep(3.0)
        return super().step(action)


if FAULT_ID not in gym.registry:
    gym.register(FAULT_ID, entry_point=FaultEnv)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ACTIONS = np.ones(4, dtype=np.int64)


def make(**backend_kwargs):
    return torchwm.make_vec(
        FAULT_ID,
        4,
        backend="ray",
        seed=0,
        backend_kwargs={"num_actors": 2, "timeout": TIMEOUT, "shared_memory": False, **backend_kwargs},
    )


def inject(envs, env, fault):
    faults = [None] * 4
    faults[env] = fault
    envs.set_attr("fault", faults)


def assert_works_like_a_fresh_sync_env(envs):
    """A full reset and a few steps give the arrays of a fresh ``sync`` env with the same seed."""
    with torchwm.make_vec(FAULT_ID, 4, backend="sync") as ref:
        got, want = envs.reset(seed=5), ref.reset(seed=5)
        assert np.array_equal(got[0], want[0])
        for step in range(3):
            actions = np.array([step % 3, 1, 2, 0])
            got, want = envs.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "rewards", "terminations", "truncations"), got[:4], want[:4]):
                assert np.array_equal(a, b), f"step {step}: {name} {a.tolist()} != sync's {b.tolist()}"


def started(**backend_kwargs):
    """A reset env that has stepped once (so the compiled graph is built) and its actors' pids."""
    envs = make(**backend_kwargs)
    envs.reset()
    envs.step(ACTIONS)
    return envs, [ray.get(actor.describe.remote(), timeout=60)["pid"] for actor in envs.actors]


@pytest.mark.parametrize("backend_kwargs", [{}, {"compiled_graph": False}], ids=["graph", "actor_calls"])
def test_an_env_that_raises_is_named_and_the_env_stays_usable(local_ray, backend_kwargs):
    envs, pids = started(**backend_kwargs)
    try:
        inject(envs, 2, "raise")
        with pytest.raises(
            WorkerError,
            match=r"env 2 on Ray actor 1 \(envs \[2, 3\]\) raised RuntimeError\('injected fault'\)",
        ) as caught:
            envs.step(ACTIONS)
        assert (caught.value.env_index, caught.value.worker_index) == (2, 1)
        assert "injected fault" in caught.value.remote_traceback
        # Nothing is left in flight; the other envs stepped (their step counts went on), env 2 did not.
        assert envs.get_attr("steps") == (2, 2, 1, 2)
        with pytest.raises(gym.error.ResetNeeded, match=r"envs \[2\] must be reset"):
            envs.step(ACTIONS)
        envs.reset(env_ids=[2])
        obs = envs.step(ACTIONS)[0]
        assert obs[:, 3].tolist() == [3.0, 3.0, 1.0, 3.0]  # each env's own step count: no stale row
        assert_works_like_a_fresh_sync_env(envs)
    finally:
        envs.close()
    wait_until_ended(pids, 60)


@pytest.mark.parametrize(
    ("env", "actor"), [(1, "Ray actor 0 \\(envs \\[0, 1\\]\\)"), (3, "Ray actor 1 \\(envs \\[2, 3\\]\\)")]
)
def test_a_hang_past_the_timeout_raises_in_time_and_closes_the_env(local_ray, env, actor):
    envs, pids = started(timeout=3)
    try:
        inject(envs, env, "hang")
        started_at = time.monotonic()
        # The actor that hangs is named (a graph's result covers every actor: it is asked which is late).
        with pytest.raises(
            EnvTimeoutError, match=rf"{actor} did not answer within 3 s while stepping.*now closed"
        ):
            envs.step(ACTIONS)
        # In time, and closing did not wait for the hung step (an hour) to end.
        assert time.monotonic() - started_at < TIMEOUT
        # A compiled graph's step cannot be waited for again: the env says it is closed.
        assert envs.closed
        with pytest.raises(ClosedEnvironmentError):
            envs.reset()
    finally:
        envs.close()
    wait_until_ended(pids, 60)


def test_without_the_graph_a_hang_times_out_each_wait_and_close_ends_it(local_ray):
    envs, pids = started(timeout=3, compiled_graph=False)
    try:
        inject(envs, 1, "hang")
        with pytest.raises(EnvTimeoutError, match=r"envs \[0, 1\] did not finish their step within 3 s"):
            envs.step(ACTIONS)
        # The step is still in flight: recv() waits for it again, with its own deadline, and does not spin.
        with pytest.raises(EnvTimeoutError, match=r"within 1 s"):
            envs.recv(timeout=1)
    finally:
        envs.close()
    wait_until_ended(pids, 60)


def test_a_timed_out_call_names_the_real_deadline_and_later_calls_get_their_own_replies(local_ray):
    envs, pids = started(timeout=1)
    try:
        with pytest.raises(
            EnvTimeoutError,
            match=r"Ray actor 0 \(envs \[0, 1\]\) did not answer within 1 s "
            r"while calling 'pause'",
        ):
            envs.call("pause", 2)
        envs.timeout = TIMEOUT
        assert envs.get_attr("steps") == (1, 1, 1, 1)  # not the late reply of pause()
        assert_works_like_a_fresh_sync_env(envs)
    finally:
        envs.close()
    wait_until_ended(pids, 60)


def test_a_step_over_actor_calls_waits_outside_ray(local_ray, monkeypatch):
    """A step that Ray's actor calls carry never blocks inside ``ray.wait``: one under way when another
    thread calls ``ray.shutdown()`` can spin inside Ray for ever, whatever its timeout. The env waits on
    the results' futures instead, and its steps still give ``sync``'s arrays."""
    envs, pids = started(compiled_graph=False)
    try:
        timeouts = []
        real_wait = ray.wait

        def recording_wait(*args, **kwargs):
            timeouts.append(kwargs.get("timeout"))
            return real_wait(*args, **kwargs)

        monkeypatch.setattr(ray, "wait", recording_wait)
        inject(envs, 3, "slow")  # the step waits for env 3 for half a second
        started_at = time.monotonic()
        envs.step(ACTIONS)
        assert time.monotonic() - started_at >= 0.5
        assert timeouts and set(timeouts) == {0}, timeouts  # polls only
        monkeypatch.undo()
        assert_works_like_a_fresh_sync_env(envs)
    finally:
        envs.close()
    wait_until_ended(pids, 60)


@pytest.mark.parametrize("backend_kwargs", [{}, {"compiled_graph": False}], ids=["graph", "actor_calls"])
def test_close_from_another_thread_mid_step_gives_closed_environment_error(local_ray, backend_kwargs):
    """close() while another thread's step waits for a slow env: that thread gets ClosedEnvironmentError,
    not the raw error of a killed actor or a freed buffer, and neither thread hangs."""
    envs, pids = started(**backend_kwargs)
    try:
        inject(envs, 3, "slower")  # 3 s: a margin for the step to be still waiting when close() comes
        outcome: list[BaseException | str] = []

        def step():
            try:
                envs.step(ACTIONS)
                outcome.append("stepped")
            except BaseException as error:  # noqa: BLE001 - checked below
                outcome.append(error)

        stepping = threading.Thread(target=step, daemon=True)
        stepping.start()
        time.sleep(0.2)  # the step waits for env 3's 3 s
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium's warning about the pending step
            envs.close()
        stepping.join(TIMEOUT)
        assert not stepping.is_alive(), "the stepping thread hangs after close()"
        assert len(outcome) == 1 and isinstance(outcome[0], ClosedEnvironmentError), outcome
        assert "another thread closed" in str(outcome[0])
        with pytest.raises(ClosedEnvironmentError):
            envs.step(ACTIONS)
    finally:
        envs.close()
    wait_until_ended(pids, 60)
