"""The transports: how a `torchwm.vector.pool.WorkerPool` reaches one worker.

- `contract`: the backend contract, `WorkerGroup` (one per pool) and `WorkerHandle` (the parent's end
  of one worker), and what comes with it (`Batch`, `WorkerPayload`, `Deadline`, `PoolSettings`; the
  transports' exceptions `WorkerGone` and `StepLost` are in `torchwm.errors`); every transport imports
  it, none imports the pool.
- `local`: a worker the parent steps itself (the ``inline`` option).
- `processes`: what both process transports share in the parent (the parent's end of a worker process
  and of its pipe); `worker_process`: what runs inside the worker (its entry point, its end of the
  pipe, the handshake); `start_methods`: how the process starts (the start methods, what the
  forkserver imports once, `forkserver_preload` among it).
- `pipe`: steps and rows over a pipe (the ``subproc`` backend).
- `shared_memory`: steps and rows in a shared block (the ``shmem`` backend; the block itself is
  `shared_block`), with `futex` (the
  sleep both sides wake each other from) and `handoff` (what a hand-off between processes costs,
  and how long each side polls before it sleeps).
- `worker_count`: how many workers ``shmem`` starts when the user does not say.
"""
