"""torchwm's vector envs: the backends, and the worker pool under the multi-worker ones.

Layers, each module one job::

    spec (torchwm.spec.VecSpec)          what to build
      -> backend (base.VectorEnv)        the public Gymnasium contract: checks, seeds, env_ids, infos
        -> stepper (stepper.Stepper)     the backend's part; for a pool (pool_stepper.PoolStepper): envs split
                                         over workers, routing, batches, deadlines, faults
          -> transport (transports/)     how one worker is reached; each module holds both ends

The backends, one module each (the name is the backend's):

- `sync`: every env in this process (no pool).
- `subproc`, `shmem`: a `WorkerPool` over the pipe and the shared-memory transport.
- `ale_native`: the ``ale-native`` backend, ALE's own C++ vector env.

What they are built from:

- `base`: `VectorEnv`, the contract every backend keeps, over the backend's stepper. Its parts are objects
  it holds: the one-thread hold and close from any thread (`thread_hold.ThreadHold`), the states of
  `clone_state`/`restore_state` (`saved_states.SavedStates`) and the call pending in Gymnasium's terms
  (`gymnasium_async.PendingCalls`).
- `stepper`: `Stepper`, what a backend implements (reset, step, wait, call, set_attr, the states'
  clone and restore, close), and the option checks every stepper shares (`checked_batch_size`,
  `resolve_spaces`).
- `step_state`: `StepState`, where each env is in its step cycle (in flight, ready, must reset)
  and each worker in its step, with the transitions between them.
- `pool`: `WorkerPool`, the vector env of every multi-worker backend, over `pool_stepper.PoolStepper`
  (the stepping loop), `pool_faults` (each worker's answer turned into the vector env's, and
  restarts), `pool_commands` (reset, call, set_attr, clone and restore states) and `pool_options` (the
  options, checked).
- `ale_native_spec`: what of a spec ALE's vector env can run, and its arguments.
- `env_group`: `EnvGroup`, the envs one worker steps (autoreset, seeding); every backend steps
  its envs with it.
- `messages`: the typed messages between a pool and its workers (`Step`, `Reset`, `Call`,
  `SetAttr`, `NeedsReset`, `CloneStates`, `RestoreStates`, `Close`, `ErrorReply`).
- `batching`: rows of batched spaces (make, write, take, check actions) and Gymnasium's info batching.
- `transports`: the backend contract (`transports.contract`: a `WorkerGroup` per pool, a
  `WorkerHandle` per worker) and the transports: `local`
  (the ``inline`` option), `pipe`, `shared_memory` (its block in `shared_block`), with what they
  share (`processes`, `worker_process`, `start_methods`, `futex`, `handoff`, `worker_count`).

How one ``shmem`` step travels, file by file: docs/concepts.md, "One shmem step".
"""
