"""The ``subproc`` backend: a worker pool over pipes (`torchwm.vector.transports.pipe`).

Each worker process runs an `EnvGroup` (the same loop as ``sync``) over its
envs and answers a step with its rows and infos through its pipe. It works
for any space, including ones that do not fit in fixed-size shared memory;
for array observations ``shmem`` is faster. Everything else (options, split,
``batch_size``, faults, ``inline``) is the pool's (`torchwm.vector.pool`).
"""

from __future__ import annotations

from torchwm.hookspecs import hookimpl
from torchwm.vector.pool import POOL_OPTIONS, WorkerPool
from torchwm.vector.transports.pipe import PipeGroup


class SubprocVectorEnv(WorkerPool):
    """Envs in worker processes, results over pipes. Options: see `torchwm.vector.pool.WorkerPool`, and
    ``context``: the start method, ``"forkserver"`` (default), ``"fork"`` or ``"spawn"``.

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="subproc", seed=0,
        ...                         backend_kwargs={"num_workers": 2})
        >>> obs, infos = envs.reset()
        >>> obs.shape, envs.worker_slices
        ((4, 4), [range(0, 2), range(2, 4)])
        >>> envs.close()
    """

    backend_name = "subproc"
    worker_group = PipeGroup


@hookimpl
def register_backends(register):
    register(
        "subproc",
        SubprocVectorEnv,
        description="worker processes, several envs each; results over pipes (any space)",
        options={**POOL_OPTIONS, **PipeGroup.OPTIONS},
    )
