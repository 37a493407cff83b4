"""What a backend or transport plugin builds on: torchwm's declared plugin API.

A plugin imports torchwm through this module, through ``torchwm`` itself (`torchwm.make_vec`,
`torchwm.VecSpec`, the error classes) and through `torchwm.errors`, which is public: every
exception torchwm raises, each also an instance of the Gymnasium or built-in type raised for the
same mistake. Every other module of torchwm is internal and may move; the names below stay.
tests/test_plugin_api.py fails when a plugin under plugins/ imports anything else of torchwm.

What is here, by job:

- Registering: `hookimpl`, the marker of a plugin's hook implementations (``register_backends``).
- A backend: `VectorEnv`, the base class of every vector env, over the backend's `Stepper` (how its
  envs are reset, stepped, called and closed) and its `StepState`; `VecSpec`, what to build
  (`resolve_spec`: the spec `torchwm.make_vec` would build from the same arguments), and `build_env` /
  `spec_env_fns`, one env of a spec.
- The checks every entry point shares, so that a plugin refuses bad input alike: `check_count`,
  `check_seed`, `check_timeout`, `check_batch_size`, `check_observation_mode`, `resolve_spaces`,
  `check_actions`, `check_pool_options`; `parse_for`, the Atari stack a backend can run natively.
- A pool backend: `WorkerPool` over the backend contract (in ``torchwm.vector.transports.contract``):
  a `WorkerGroup` per vector env and a `WorkerHandle` per worker; `POOL_OPTIONS`, `PoolSettings`,
  `split_envs`, `default_num_workers`, `WorkerPayload`, `WorkerChoice`, `Batch`, `Deadline`,
  `WorkerGone`, `StepLost`, `gym_specs_of` / `register_gym_specs` (an env id registered at run time,
  in a worker).
- A worker process the plugin starts itself (a Ray actor on the parent's node): `SharedBlockGroup`
  (the shared block, its tuner and its wait) and `SharedMemoryHandle`, the parent's end of the ``shmem``
  transport, and `serve_shared_memory(conn, payload_bytes)`, its worker's end over a connection to the
  parent.
- A worker: `EnvGroup`, the envs one worker steps, and the typed messages between the pool and a
  worker (`Step`, `Reset`, `Call`, `SetAttr`, `NeedsReset`, `Close`, `ControlCommand`,
  `ErrorReply`, `error_reply`, `ShareDescription`, `describe_share`).
- Batches: `ARRAY_SPACES`, `create_batch`, `put_rows`, `take_rows`, `slice_rows`, `get_row`.
- A wrapper or env whose state ``envs.clone_state`` cannot save on its own: `StatefulLayer`, the two
  methods it defines (``get_torchwm_state``/``set_torchwm_state``), and `EnvState`, what a clone returns.
"""

from __future__ import annotations

from torchwm.env_state import EnvState, StatefulLayer
from torchwm.factory import build_env, resolve_spec, spec_env_fns
from torchwm.hookspecs import hookimpl
from torchwm.spec import VecSpec, check_count, check_seed, check_timeout
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import (
    ARRAY_SPACES,
    check_actions,
    create_batch,
    get_row,
    put_rows,
    slice_rows,
    take_rows,
)
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.messages import (
    Call,
    Close,
    ControlCommand,
    ErrorReply,
    NeedsReset,
    Reset,
    SetAttr,
    ShareDescription,
    Step,
    describe_share,
    error_reply,
)
from torchwm.vector.pool import POOL_OPTIONS, WorkerPool, check_pool_options
from torchwm.vector.step_state import StepState
from torchwm.vector.stepper import Stepper, check_batch_size, check_observation_mode, resolve_spaces
from torchwm.vector.transports.contract import (
    Batch,
    Deadline,
    PoolSettings,
    StepLost,
    WorkerChoice,
    WorkerGone,
    WorkerGroup,
    WorkerHandle,
    WorkerPayload,
    default_num_workers,
    gym_specs_of,
    register_gym_specs,
    split_envs,
)
from torchwm.vector.transports.shared_memory import SharedBlockGroup, SharedMemoryHandle, serve_shared_memory
from torchwm.wrappers.atari_stack import parse_for

__all__ = [
    "ARRAY_SPACES",
    "POOL_OPTIONS",
    "Batch",
    "Call",
    "Close",
    "ControlCommand",
    "Deadline",
    "EnvGroup",
    "EnvState",
    "ErrorReply",
    "NeedsReset",
    "PoolSettings",
    "Reset",
    "SetAttr",
    "SharedBlockGroup",
    "SharedMemoryHandle",
    "ShareDescription",
    "Step",
    "StepLost",
    "StatefulLayer",
    "StepState",
    "Stepper",
    "VecSpec",
    "VectorEnv",
    "WorkerChoice",
    "WorkerGone",
    "WorkerGroup",
    "WorkerHandle",
    "WorkerPayload",
    "WorkerPool",
    "build_env",
    "check_actions",
    "check_batch_size",
    "check_count",
    "check_observation_mode",
    "check_pool_options",
    "check_seed",
    "check_timeout",
    "create_batch",
    "default_num_workers",
    "describe_share",
    "error_reply",
    "get_row",
    "gym_specs_of",
    "hookimpl",
    "parse_for",
    "put_rows",
    "register_gym_specs",
    "resolve_spaces",
    "resolve_spec",
    "serve_shared_memory",
    "slice_rows",
    "spec_env_fns",
    "split_envs",
    "take_rows",
]
