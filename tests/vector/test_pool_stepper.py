"""The stepping loop of a worker pool (`torchwm.vector.pool_stepper`): ``batch_size`` batches of the first
envs ready, every env served in turn, and ``recv(min_ready=)`` that takes a lost step's error for what it
is."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from support.envs import SlowOnOneEnv
from support.processes import leaked_segments, wait_until_ended

import torchwm
from torchwm.errors import ClosedEnvironmentError, EnvTimeoutError

BACKENDS = ["subproc", "shmem"]


@pytest.mark.parametrize("min_ready", [None, 1])
def test_a_lost_step_closes_the_env_with_its_own_error_also_under_min_ready(min_ready):
    # StepLost (a step that can never be waited for again: Ray's compiled graph) stands in for a handle's
    # finish_step here. recv(min_ready=) must not take its error for the caller's deadline and wait again.
    from torchwm.errors import StepLost

    vec = torchwm.make_vec(
        "CartPole-v1", 4, backend="shmem", backend_kwargs={"num_workers": 2, "timeout": 30}
    )
    pids = vec.worker_pids
    vec.reset(seed=0)
    vec.send(np.zeros(4, dtype=np.int64))

    def lost(deadline):
        raise StepLost("worker 0 (a stand-in)")

    vec._stepper._handles[0].finish_step = lost
    with pytest.raises(
        EnvTimeoutError, match="this step cannot be waited for again, so this vector env is now"
    ):
        vec.recv(timeout=5, min_ready=min_ready)
    assert vec.closed
    with pytest.raises(ClosedEnvironmentError):
        vec.step(np.zeros(4, dtype=np.int64))
    wait_until_ended(pids, 30)
    assert leaked_segments() == []


gym.register("TorchwmTest/SlowWorker-v0", entry_point=SlowOnOneEnv)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_size_returns_first_ready_and_keeps_the_rest(backend):
    # Worker 0 (envs 0, 1) is fast; worker 1 (envs 2, 3) sleeps 2 x 1.5 s, a margin a loaded machine's
    # process wake-ups cannot eat: the first recv gets envs 0 and 1.
    with torchwm.make_vec(
        "TorchwmTest/SlowWorker-v0",
        4,
        backend=backend,
        seed=0,
        delay=1.5,
        backend_kwargs={"num_workers": 2, "batch_size": 2, "context": "fork"},
    ) as vec:
        vec.reset()
        vec.send(np.array([0, 0, 1, 1]))
        obs, rewards, _, _, infos = vec.recv()
        assert infos["env_id"].tolist() == [0, 1]
        assert np.array_equal(rewards, [0.0, 0.0])
        # Envs 0 and 1 may go again while 2 and 3 are still stepping.
        vec.send(np.array([0, 0]), env_ids=[0, 1])
        seen = []
        for _ in range(2):
            obs, rewards, _, _, infos = vec.recv()
            seen += infos["env_id"].tolist()
            for env, o, r in zip(infos["env_id"], obs, rewards, strict=True):
                if env in (2, 3):
                    assert (o[0], r) == (1, 1.0)
                else:
                    assert (o[0], r) == (2, 0.0)
        assert sorted(seen) == [0, 1, 2, 3]
        with pytest.raises(RuntimeError, match="no action in flight"):
            vec.recv()


@pytest.mark.parametrize(
    "backend, backend_kwargs",
    [
        ("sync", {}),
        ("subproc", {}),
        ("shmem", {}),
        ("subproc", {"num_workers": 2, "inline": True}),
        ("shmem", {"num_workers": 2, "inline": True}),
    ],
)
def test_batches_serve_every_env_in_turn(backend, backend_kwargs):
    # The documented async loop: send to exactly the envs recv() returned. No env may starve.
    served = np.zeros(8, dtype=np.int64)
    with torchwm.make_vec(
        "CartPole-v1", 8, backend=backend, seed=0, backend_kwargs={**backend_kwargs, "batch_size": 2}
    ) as envs:
        envs.reset()
        envs.send(np.zeros(8, dtype=np.int64))
        for _ in range(400):
            *_, infos = envs.recv()
            ids = infos["env_id"]
            served[ids] += 1
            envs.send(np.zeros(len(ids), dtype=np.int64), ids)
        envs.recv()
    assert served.min() > 0, served
    assert served.min() >= served.mean() / 4, f"unbalanced: {served}"
