"""The ``shmem`` backend: a worker pool over shared memory (`torchwm.vector.transports.shared_memory`).

Actions, observations, rewards and flags live in one shared-memory block: a
step costs no pipe message and no pickling, and both sides sleep on a futex
rather than hold a core while they wait. Everything else (options, split,
``batch_size``, faults, ``inline``) is the pool's (`torchwm.vector.pool`).
"""

from __future__ import annotations

from typing import cast

from torchwm.hookspecs import hookimpl
from torchwm.vector.pool import POOL_OPTIONS, WorkerPool
from torchwm.vector.transports.handoff import WaitPlan
from torchwm.vector.transports.shared_memory import SharedMemoryGroup


class ShmemVectorEnv(WorkerPool):
    """Envs in worker processes, batch in shared memory. Options: see `torchwm.vector.pool.WorkerPool`,
    ``context``: the start method, ``"forkserver"`` (default), ``"fork"`` or ``"spawn"``, and
    ``spin_seconds``: how long both sides poll before they sleep (default None: measured on the first
    steps, see ``wait_plan``). With the split left unset (no ``num_workers``, ``envs_per_worker`` or
    ``inline``) and envs built from a name, the count of workers is chosen from a measured env step and
    hand-off (`torchwm.vector.transports.worker_count`; ``worker_choice`` says what it measured).

    Observations are copies by default; ``copy=False`` returns views of the shared block that the next
    `step` overwrites. With ``send(env_ids=...)`` on envs of a worker that is still stepping, `send`
    first waits for that worker (a worker runs one step at a time).

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="shmem", seed=0,
        ...                         backend_kwargs={"num_workers": 2})
        >>> obs, infos = envs.reset()
        >>> obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        >>> rewards
        array([1., 1., 1., 1.])
        >>> envs.close()
    """

    backend_name = "shmem"
    worker_group = SharedMemoryGroup

    @property
    def wait_plan(self) -> WaitPlan | None:
        """How the parent and the workers wait for each other (`torchwm.vector.transports.handoff`): measured
        on each worker's first steps unless ``spin_seconds`` fixed it; None once closed."""
        tuner = None if self.closed else cast(SharedMemoryGroup, self._stepper.group).tuner
        return None if tuner is None else tuner.plan


@hookimpl
def register_backends(register):
    register(
        "shmem",
        ShmemVectorEnv,
        description="worker processes, several envs each; batch in shared memory, no pipe per step",
        options={**POOL_OPTIONS, **SharedMemoryGroup.OPTIONS},
    )
