"""The worker pool: what every backend that spreads its envs over workers needs, written once.

A `WorkerPool` is a `torchwm.vector.base.VectorEnv` over a `PoolStepper`,
whose envs are split over workers (`split_envs`, visible as
``vec.worker_slices``). The stepper reaches each worker through a
*transport*: the backend's `WorkerGroup` and a `WorkerHandle` per worker (the
contract is `torchwm.vector.transports.contract`). It owns everything
that does not depend on how the bytes travel: the options every pool backend
shares (`check_pool_options`), routing actions and ``env_ids`` to workers
(global env ids to each worker's local ones), readiness and fair
``batch_size`` batches (the envs sent longest ago first, none starved), one
`Deadline` per wait and the `EnvTimeoutError` that names the real timeout,
restarts (``restart_on_crash``), turning a worker's `ErrorReply` into a
`WorkerError` that names the env and the worker, and closing within a
deadline (also at garbage collection, `weakref.finalize`). A backend is a
transport choice plus its options: ``subproc`` is ``WorkerPool`` over
`torchwm.vector.transports.pipe`, ``shmem`` over
`torchwm.vector.transports.shared_memory`. With ``inline=True`` worker 0 is a
`torchwm.vector.transports.local.LocalWorker`, the same interface run in this
process, so nothing here depends on where a worker runs.

The stepper is `torchwm.vector.pool_stepper`, its faults `torchwm.vector.pool_faults`, its control
commands `torchwm.vector.pool_commands` and its options `torchwm.vector.pool_options`. How a step travels
through the pool and a transport: docs/concepts.md, "One shmem step".
"""

from __future__ import annotations

from typing import Any, NoReturn

from torchwm.spec import VecSpec
from torchwm.vector.base import VectorEnv
from torchwm.vector.pool_options import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from torchwm.vector.pool_options import POOL_OPTIONS as POOL_OPTIONS
from torchwm.vector.pool_options import check_pool_options as check_pool_options
from torchwm.vector.pool_stepper import PoolStepper as PoolStepper
from torchwm.vector.transports.contract import (
    WorkerChoice,
    WorkerGroup,
    WorkerHandle,
)
from torchwm.vector.transports.contract import default_num_workers as default_num_workers


class WorkerPool(VectorEnv):
    """Envs split over workers, each reached through a transport. Subclassed by ``subproc`` and ``shmem``.

    Args:
        spec: what to build (each worker builds its envs with `torchwm.factory.build_env`, or with
            ``spec.env_fns``).
        num_workers: workers (default: the cores this process may use, at most num_envs; fewer when the
            transport measures that fewer are faster: `torchwm.vector.transports.worker_count`,
            ``worker_choice``).
        envs_per_worker: envs each worker steps (the last worker takes the rest); give this or num_workers.
        batch_size: `recv` returns ``batch_size`` envs among those ready, the ones ready first (default:
            all in flight).
        timeout: seconds a wait on workers may take before `EnvTimeoutError` (default 300; None or
            ``math.inf``: no limit). A dead worker is detected within a second whatever the timeout.
        copy: return copies of the observation batch (default) or a view the next call overwrites.
        restart_on_crash: restart a worker that died, with its envs; their episodes in flight end
            truncated with ``infos["worker_restarted"]``.
        env_fn: a no-argument callable that returns one env, or a list of one such callable per env; as
            the other options, it lands in the spec: ``vec.spec.env_fns``, where
            `torchwm.make_vec_from_fns` puts the factories.
        inline: the parent steps worker 0's envs itself (``worker_slices[0]``, ``worker_pids[0]`` is
            None; `torchwm.vector.transports.local.LocalWorker`) and starts ``num_workers - 1`` workers
            (default False). Those envs then have none of a worker's protections: no timeout, and a crash or
            ``os._exit`` in them ends the program. Their step runs in `recv`, while the other workers
            step theirs; ``restart_on_crash`` concerns the other workers only.
        observation_mode: Gymnasium's option (see `torchwm.vector.stepper.resolve_spaces`).
        **transport options: see the transport (``context`` for the process transports).
    """

    backend_name = "pool"
    worker_group: type[WorkerGroup]  # the backend's (`torchwm.vector.transports.contract`)
    unit = "worker"  # what the backend calls a worker in its option names (num_workers, envs_per_worker)

    _stepper: PoolStepper

    def __init__(self, spec: VecSpec, **options: Any) -> None:
        stepper = PoolStepper(spec, type(self), options)
        super().__init__(stepper, copy=stepper.settings.copy)

    @property
    def worker_slices(self) -> list[range]:
        """The envs of each worker."""
        return self._stepper.worker_slices

    @property
    def num_workers(self) -> int:
        return self._stepper.num_workers

    @property
    def worker_choice(self) -> WorkerChoice | None:
        """How many workers the backend chose from measurements, and why (None: the user's split, or one
        worker per core)."""
        return self._stepper.worker_choice

    @property
    def restart_on_crash(self) -> bool:
        return self._stepper.restart_on_crash

    @property
    def worker_pids(self) -> list[int | None]:
        """The process id of each worker, in `worker_slices`' order (for a process monitor, CPU pinning or
        ``os.kill`` in a fault drill); None where no process of its own steps them (the parent's share with
        ``inline``, a worker that is no process on this machine)."""
        return [handle.pid for handle in self._stepper._handles]

    @property
    def workers(self) -> list[WorkerHandle]:
        """The parent's end of each worker (the group's `WorkerHandle`s), in worker order: what a backend's
        own properties read (its actors, their nodes). A new list; the handles are the pool's."""
        return list(self._stepper._handles)

    def __repr__(self) -> str:
        settings = f", {self._stepper.group!r}" if repr(self._stepper.group) else ""
        return (
            f"{type(self).__name__}({self.spec.id}, num_envs={self.num_envs}, "
            f"num_workers={self.num_workers}{settings})"
        )

    def __copy__(self) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be copied: it owns worker processes, which a copy would share "
            f"(closing or dropping either would stop the other's workers). Pass the vector env itself, or "
            f"make a second one with torchwm.make_vec"
        )

    def __deepcopy__(self, memo: dict) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} cannot be deep-copied: its envs live in worker processes. Make a second "
            f"vector env with torchwm.make_vec (the same spec, vec.spec, builds the same envs)"
        )
