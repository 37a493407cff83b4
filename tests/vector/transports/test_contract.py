"""The backend contract (`torchwm.vector.transports.contract`): how envs are split over workers, the default
number of workers, and the `Deadline` every wait of a pool is given."""

from __future__ import annotations

import torchwm
from torchwm.vector.transports.contract import split_envs


def test_worker_slices_uneven_and_envs_per_worker():
    assert split_envs(5, 2, None) == [range(0, 3), range(3, 5)]
    assert split_envs(5, None, 2) == [range(0, 2), range(2, 4), range(4, 5)]
    assert split_envs(3, 8, None) == [range(0, 1), range(1, 2), range(2, 3)]
    with torchwm.make_vec(
        "CartPole-v1", 5, backend="shmem", backend_kwargs={"envs_per_worker": 2, "context": "fork"}
    ) as vec:
        assert vec.worker_slices == [range(0, 2), range(2, 4), range(4, 5)]
        assert vec.num_workers == 3 and len(set(vec.worker_pids)) == 3


def test_default_num_workers_is_the_cpu_affinity():
    with torchwm.make_vec("CartPole-v1", 8, backend="subproc", backend_kwargs={"context": "fork"}) as vec:
        assert vec.num_workers == min(8, len(__import__("os").sched_getaffinity(0)))
