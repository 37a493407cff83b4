"""What a backend or transport plugin builds on: torchwm's declared plugin API.

A plugin imports torchwm through this module and through `torchwm.errors`, which is public: every
exception torchwm raises, each also an instance of the Gymnasium or built-in type raised for the same
mistake, and the two a worker handle raises to the pool (``WorkerGone``, a worker that cannot answer any
more; ``StepLost``, a step that cannot be waited for again). Every other module of torchwm is internal
and may move; the names below stay. tests/test_plugin_api.py fails when a plugin under plugins/ imports
anything else of torchwm, or reads a private attribute of a torchwm object.

The names, by job:

- The plugin itself: `hookimpl`, the marker of its hook functions (``torchwm_backends`` and the others
  of `torchwm.hookspecs`); `VecSpec`, the spec of a vector env a backend factory is called with.
- A backend: `VectorEnv`, the base class of every vector env, over the backend's `Stepper` (how its
  envs are reset, stepped, called and closed; its ``state`` tells which envs are in flight);
  `resolve_spec`, the `torchwm.VecSpec` `torchwm.make_vec` would build from the same arguments;
  `build_env`, one env of a spec; `parse_for`, the Atari stack of a spec a backend runs natively;
  `EpisodeSeedBook`, the book of each env's seed stream that a stepper whose envs an `EnvGroup` resets
  keeps as its ``episode_seeds`` (the vector env then passes `Stepper.reset_envs` the ``streams`` to give
  the groups' ``reset``; without one, seeded autoresets are refused).
- `checks`, the input checks every entry point shares, so that a plugin refuses bad input alike:
  ``checks.check_count``, ``checks.check_timeout``, ``checks.check_batch_size``.
- A pool backend: `WorkerPool` over a `WorkerGroup` per vector env and a `WorkerHandle` per worker (six
  abstract methods); the types their methods take are reached through them too:
  ``WorkerGroup.Settings``, the pool's options checked, and ``WorkerGroup.split_evenly``, the split of
  envs over a count of workers the group chose; `WorkerPayload` (``WorkerHandle.Payload``), what a worker
  builds its envs from; `Batch` (``WorkerHandle.Batch``), the rows the workers write; `Deadline`, the
  time a wait may take (a handle's errors, ``WorkerGone`` and ``StepLost``, are in `torchwm.errors`).
- A worker: `EnvGroup`, the envs one worker steps, and `messages`, the module of the typed messages
  between the pool and a worker: the control commands (``messages.ControlCommand``: ``Reset``,
  ``Call``, ``SetAttr``, ``NeedsReset``, ``CloneStates``, ``RestoreStates``, whose answer carries the
  envs' rows as a reset's does; ``Close``; ``Step``, a step's actions sent as a message) and the
  answers (``ShareDescription``, made by ``describe_share``, a worker's answer to ``started``;
  ``ErrorReply``, made by ``error_reply``, an env's error). Its other names are internal.
- `rows`, the rows of a batch: ``rows.create_batch``, ``rows.take_rows``, ``rows.slice_rows``,
  ``rows.ARRAY_SPACES`` (the spaces batched as one array).
- Workers the plugin starts itself that step through shared memory (Ray actors on the parent's node):
  `SharedBlock`, the block, its wait, the parent's end of a worker (``SharedBlock.Handle``) and the
  worker's end (``SharedBlock.serve``).
"""

from __future__ import annotations

import types
from typing import Any

from torchwm.factory import build_env, resolve_spec
from torchwm.hookspecs import hookimpl
from torchwm.spec import VecSpec, check_count, check_timeout
from torchwm.vector import messages
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import ARRAY_SPACES, create_batch, info_rows, slice_rows, take_rows
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.episode_seeds import EpisodeSeedBook
from torchwm.vector.pool import WorkerPool
from torchwm.vector.stepper import Stepper, check_batch_size
from torchwm.vector.transports.contract import Batch, Deadline, WorkerGroup, WorkerHandle, WorkerPayload
from torchwm.vector.transports.shared_memory import SharedBlock
from torchwm.wrappers.atari_stack import parse_for


def _namespace(name: str, doc: str, **members: Any) -> types.ModuleType:
    """A namespace of related names, reached as ``torchwm.plugin_api.<name>.<member>``."""
    namespace = types.ModuleType(f"{__name__}.{name}", doc)
    namespace.__dict__.update(members)
    namespace.__all__ = sorted(members)  # type: ignore[attr-defined]
    return namespace


checks = _namespace(
    "checks",
    """The input checks every entry point shares, so that a plugin refuses bad input with the same error
    and message as torchwm's own backends: `check_count` (a count of envs, workers, ...),
    `check_timeout` (seconds or None), `check_batch_size` (``batch_size`` against ``num_envs``).
    """,
    check_batch_size=check_batch_size,
    check_count=check_count,
    check_timeout=check_timeout,
)

rows = _namespace(
    "rows",
    """The rows of a batch of any space, as Gymnasium batches it: `create_batch` (a zeroed batch of n rows),
    `take_rows` (a copy of some rows), `slice_rows` (a view of a range of rows, one worker's),
    `info_rows` (the infos of many envs as rows of one block of columns, which a vector env batches a
    column at a time), and `ARRAY_SPACES`, the tuple of space classes batched as one numpy array (any
    other space is a dict, tuple or object array of them).
    """,
    ARRAY_SPACES=ARRAY_SPACES,
    create_batch=create_batch,
    info_rows=info_rows,
    slice_rows=slice_rows,
    take_rows=take_rows,
)

__all__ = [
    "Batch",
    "Deadline",
    "EnvGroup",
    "EpisodeSeedBook",
    "SharedBlock",
    "Stepper",
    "VecSpec",
    "VectorEnv",
    "WorkerGroup",
    "WorkerHandle",
    "WorkerPayload",
    "WorkerPool",
    "build_env",
    "checks",
    "hookimpl",
    "messages",
    "parse_for",
    "resolve_spec",
    "rows",
]
