"""The ``ray`` backend on a one-node Ray: its actors step through a shared block, as ``shmem``'s workers.

The pool's contract on this path (errors, hangs, Ctrl-C, restarts) is tests/conformance's and
the tests of tests/vector/faults/, which run Ray's default configuration, and test_ray_backend.py runs Pong
on it against ``sync``; here is what is particular to actors that Ray starts and torchwm steps: how a
dead actor, an actor Ray cannot place and ``close()`` end.
"""

import glob
import os
import tempfile
import time

import numpy as np
import pytest
import ray
from support.processes import process_running, wait_until_ended

import torchwm
import torchwm.testing
from torchwm.errors import WorkerError

SHARED_MEMORY = "steps='shared memory (every actor on this node)'"


def test_restart_on_crash_starts_a_new_actor_until_max_restarts_is_used_up(local_ray):
    kwargs = {"num_actors": 2, "restart_on_crash": True, "max_restarts": 1}
    with torchwm.make_vec(
        torchwm.testing.COUNTDOWN_ID, 4, backend="ray", seed=0, backend_kwargs=kwargs
    ) as envs:
        envs.reset()
        envs.step(np.ones(4, dtype=np.int64))
        first = envs.worker_pids[1]
        ray.kill(envs.actors[1], no_restart=True)
        wait_until_ended([first], 30)
        _, rewards, terminations, truncations, infos = envs.step(np.ones(4, dtype=np.int64))
        assert infos["worker_restarted"].tolist() == [False, False, True, True]
        assert truncations.tolist() == [False, False, True, True] and rewards[2:].tolist() == [0.0, 0.0]
        second = envs.worker_pids[1]
        assert second != first and process_running(second)
        envs.step(np.ones(4, dtype=np.int64))  # the new actor steps
        ray.kill(envs.actors[1], no_restart=True)
        wait_until_ended([second], 30)
        with pytest.raises(
            WorkerError, match=r"after 1 restarts \(max_restarts=1\).*Ray actor 1 \(envs \[2, 3\]\)"
        ):
            envs.step(np.ones(4, dtype=np.int64))


def test_close_ends_every_actor_process_and_no_socket_directory_outlives_the_start(local_ray):
    # The driver's directories for the actors' sockets, named after this process.
    directories = f"{tempfile.gettempdir()}/torchwm-actor-{os.getpid()}-*"
    envs = torchwm.make_vec("CartPole-v1", 4, backend="ray", seed=0, backend_kwargs={"num_actors": 2})
    assert glob.glob(directories) == []  # removed once the actors connected
    envs.reset()
    envs.step(np.zeros(4, dtype=np.int64))
    pids = envs.worker_pids
    assert SHARED_MEMORY in repr(envs) and all(process_running(pid) for pid in pids)
    envs.close()
    for pid in pids:
        wait_until_ended([pid], 30)
    assert glob.glob(directories) == []


def test_an_actor_ray_cannot_place_fails_at_once_naming_what_it_asked_for(local_ray):
    kwargs = {"num_actors": 1, "actor_options": {"resources": {"no_such_thing": 1}}, "timeout": 60}
    began = time.monotonic()
    with pytest.raises(WorkerError, match=r"asks for \{'CPU': 1, 'no_such_thing': 1\}"):
        torchwm.make_vec("CartPole-v1", 2, backend="ray", backend_kwargs=kwargs)
    assert time.monotonic() - began < 30
