"""torchwm's vector envs: the backends, and the worker pool under the multi-worker ones.

Layers, each module one job::

    spec (torchwm.spec.VecSpec)          what to build
      -> backend (base.VectorEnv)        the public Gymnasium contract: checks, seeds, env_ids, infos
        -> pool (pool.WorkerPool)        envs split over workers: routing, batches, deadlines, faults
          -> transport (pool.Transport)  how one worker is reached; each module holds both ends

The modules:

- `base`: `VectorEnv`, the contract every backend keeps (also `check_batch_size`,
  `resolve_spaces`); a backend implements five primitives.
- `sync`: the ``sync`` backend, every env in this process (no pool).
- `env_group`: `EnvGroup`, the envs one worker steps (autoreset, seeding), and the typed
  commands every worker answers (`Step`, `Reset`, `Call`, `SetAttr`, `NeedsReset`, `Close`,
  `ErrorReply`). Every backend steps its envs with it.
- `batching`: rows of batched spaces (make, write, take, check actions) and Gymnasium's info batching.
- `pool`: `WorkerPool`, everything a multi-worker backend needs, written once, and the `Transport`
  interface it drives (its docstring lists the methods).
- `local`: the local transport, a worker the parent steps itself (the ``inline`` option).
- `processes`: what both process transports share: the worker process, its start (forkserver
  without re-running ``__main__``), numbered pipe messages, `worker_main`.
- `pipe`: the pipe transport (parent end and worker loop): steps and rows over the pipe.
- `shared_memory`: the shared-memory transport (parent end and worker loop), the shared block
  (`SharedBatch`) and the futex both sides sleep on.
- `subproc`, `shmem`: the two process backends, each a `WorkerPool` with its transport.
- `ale_native`: the ``ale-native`` backend, ALE's own C++ vector env.

How a ``shmem`` step flows (three files): `pool` (``WorkerPool._send_step`` gives each worker
its actions) -> `shared_memory` (``SharedMemoryWorker.send_step`` writes them into the block and
rings the worker; in the worker, ``serve`` steps its group) -> `env_group` (``EnvGroup.step``
writes the rows in place) -> `shared_memory` (the worker sets ``done_seq``; ``poll`` and
``finish_step`` in the parent read the infos) -> `pool` (``_wait_ready`` returns the envs ready).
"""
