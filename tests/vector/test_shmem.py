"""The ``shmem`` backend (`torchwm.vector.shmem`): views or copies of the shared block, spaces it cannot
hold, and a close (or garbage collection) that ends every worker and frees the block."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from support.processes import leaked_segments, mapped_segments, process_running

import torchwm
from torchwm.errors import UnsupportedStackError


def test_shmem_copy_false_gives_views_and_copy_true_copies():
    with torchwm.make_vec(
        "CartPole-v1",
        2,
        backend="shmem",
        seed=0,
        backend_kwargs={"num_workers": 1, "copy": False, "context": "fork"},
    ) as vec:
        first, _ = vec.reset()
        kept = first.copy()
        second = vec.step(np.array([1, 1]))[0]
        assert second is first or np.shares_memory(second, first)
        assert not np.array_equal(first, kept), "a view shows the next step's observations"
    with torchwm.make_vec(
        "CartPole-v1", 2, backend="shmem", seed=0, backend_kwargs={"num_workers": 1, "context": "fork"}
    ) as vec:
        first, _ = vec.reset()
        kept = first.copy()
        vec.step(np.array([1, 1]))
        assert np.array_equal(first, kept)


def test_shmem_refuses_spaces_without_a_fixed_shape():
    class TextEnv(gym.Env):
        observation_space = spaces.Text(5)
        action_space = spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            return "a", {}

    with pytest.raises(UnsupportedStackError, match="subproc"):
        torchwm.TorchVectorizedEnv(TextEnv, num_workers=1, backend="shmem", context="fork")


def test_close_is_idempotent_and_leaves_nothing_behind():
    vec = torchwm.make_vec(
        "CartPole-v1", 4, backend="shmem", backend_kwargs={"num_workers": 2, "context": "fork"}
    )
    pids = vec.worker_pids
    # The block has no name in /dev/shm even while in use; the parent and each worker map it.
    assert leaked_segments() == []
    name = vec._stepper._batch.layout.name
    assert name in mapped_segments() and all(name in mapped_segments(pid) for pid in pids)
    vec.close()
    vec.close()
    assert name not in mapped_segments()
    assert all(not process_running(pid) for pid in pids)
    with pytest.raises(torchwm.ClosedEnvironmentError):
        vec.reset()


def test_garbage_collection_closes_workers_and_segments():
    import gc

    vec = torchwm.make_vec(
        "CartPole-v1", 2, backend="shmem", backend_kwargs={"num_workers": 2, "context": "fork"}
    )
    pids = vec.worker_pids
    del vec
    gc.collect()
    assert leaked_segments() == []
    assert all(not process_running(pid) for pid in pids)
