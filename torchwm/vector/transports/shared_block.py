"""The shared block of the ``shmem`` transport: `SharedBatch`, its layout, and how it is made, handed to a
worker and freed.

One block holds a whole batch (actions, observations, rewards, flags, a step mask), the signals both ends
of `torchwm.vector.transports.shared_memory` step through (step numbers, statuses, futex words), and room
for each worker's step infos. `plan_layout` places every array on its own cache lines; `SharedBatch` is
numpy views of them. Nothing here runs during a step: the transport reads and writes the views.

The block has no name in ``/dev/shm``: the parent makes it with
``memfd_create`` (elsewhere: a file it unlinks at once) and hands each worker
its file descriptor over the worker's pipe (`SharedBatch.send`), also a worker
restarted later. So nothing is left behind whatever is killed (the parent,
the workers, the whole process group, and with them multiprocessing's
resource tracker): the memory goes with the last process that maps it. The
name ``torchwm_<pid>_<random>`` still labels the mapping (``/memfd:torchwm_...``
in ``/proc/<pid>/maps``), so that it is easy to find (the tests' ``leaked_segments`` and
``mapped_segments``, tests/support/processes.py).
"""

from __future__ import annotations

import mmap
import os
import secrets
import tempfile
from dataclasses import dataclass
from multiprocessing.reduction import send_handle
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.errors import DynamicShapeError, UnsupportedStackError
from torchwm.vector.batching import ARRAY_SPACES
from torchwm.vector.transports.contract import Batch

SEGMENT_PREFIX = "torchwm_"
_ALIGN = 64  # a cache line: workers write neighbouring arrays without false sharing of the flags
# Bytes each worker has for its step's pickled infos (Atari's lives and frame counters take ~150 a
# env); larger infos go through the pipe instead.
INFO_BYTES_PER_WORKER = 32768
# Columns of plain numbers each env has for its step's infos (8 bytes a cell), when every env the worker
# stepped gave the same keys with plain int, float or bool values (Atari's lives and frame counters).
MAX_INFO_COLUMNS = 8
# Bytes each worker has for the keys and types of its info columns, pickled (rewritten when they change).
INFO_SCHEMA_BYTES_PER_WORKER = 4096


def _leaves(space: gym.Space, path: tuple = ()) -> list[tuple[tuple, np.dtype, tuple[int, ...]]]:
    """(path, dtype, shape of one env's value) of every array a batch of ``space`` holds."""
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaves(sub, (*path, key))]
    if isinstance(space, spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces) for leaf in _leaves(sub, (*path, i))]
    if isinstance(space, ARRAY_SPACES):
        return [(path, np.dtype(space.dtype), tuple(space.shape or ()))]
    if isinstance(space, (spaces.Graph, spaces.Sequence)):
        # Gymnasium's shared memory refuses these two with a TypeError and this phrase, which code
        # written for AsyncVectorEnv (its own test suite, for one) catches.
        raise DynamicShapeError(
            f"As {space} has a dynamic shape so its not possible to make a static shared memory. The shmem "
            f"backend keeps batches in shared memory and needs fixed-shape spaces; use backend='subproc'."
        )
    raise UnsupportedStackError(
        f"the shmem backend keeps batches in shared memory and needs fixed-shape spaces (Box, Discrete, "
        f"MultiDiscrete, MultiBinary, Dict or Tuple of them); got {space}. Use backend='subproc'."
    )


def _nest(space: gym.Space, arrays: dict[tuple, np.ndarray], path: tuple = ()) -> Any:
    """The batch structure of ``space`` (dicts and tuples like Gymnasium's) around ``arrays``."""
    if isinstance(space, spaces.Dict):
        return {key: _nest(sub, arrays, (*path, key)) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_nest(sub, arrays, (*path, i)) for i, sub in enumerate(space.spaces))
    return arrays[path]


@dataclass(frozen=True)
class Layout:
    """Where each array lives in the block: plain data, sent to workers at start-up."""

    name: str
    size: int
    num_envs: int
    num_workers: int
    entries: tuple[tuple[str, tuple, str, tuple[int, ...], int], ...]  # (field, path, dtype, shape, offset)


def plan_layout(
    observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
) -> Layout:
    """Lay out the batch of ``num_envs`` envs and the signals of ``num_workers`` workers."""
    n, w = num_envs, num_workers
    arrays: list[tuple[str, tuple, np.dtype, tuple[int, ...]]] = [
        # Signals first, each on its own cache lines.
        ("command_seq", (), np.dtype(np.int64), (w,)),
        ("done_seq", (), np.dtype(np.int64), (w,)),
        ("status", (), np.dtype(np.int64), (w,)),
        # Futex words (int32): a worker sleeps on its doorbell, the parent on parent_bell.
        ("doorbell", (), np.dtype(np.int32), (w,)),
        ("parent_bell", (), np.dtype(np.int32), (1,)),
        # Set by a side just before it sleeps, so that the other rings (a syscall) only then.
        ("worker_sleeping", (), np.dtype(np.int32), (w,)),
        ("parent_sleeping", (), np.dtype(np.int32), (1,)),
        # How many workers must be done before waking the parent helps (0: any).
        ("ring_threshold", (), np.dtype(np.int32), (1,)),
        # How long an idle worker polls before it sleeps (the parent's `WaitTuner` sets it).
        ("worker_spin", (), np.dtype(np.float64), (1,)),
        # When each worker began and ended its last step (time.perf_counter), for the `WaitTuner`.
        ("step_times", (), np.dtype(np.float64), (w, 2)),
        # 1: this worker's step actions come over its pipe (their dtype is not the action space's).
        ("action_via_pipe", (), np.dtype(np.int32), (w,)),
        ("step_mask", (), np.dtype(np.bool_), (n,)),
        # A worker's step infos, pickled, when they fit: no pipe message, no wake-up on either side.
        ("info_length", (), np.dtype(np.int64), (w,)),
        ("info_bytes", (), np.dtype(np.uint8), (w, INFO_BYTES_PER_WORKER)),
        # Or, for plain numbers, a row of columns per env (int64, float64 as its bits, bool as 0 or 1) and
        # the columns' keys and types, pickled, with a count of each worker's changes of them.
        ("info_columns", (), np.dtype(np.int64), (n, MAX_INFO_COLUMNS)),
        ("info_schema_seq", (), np.dtype(np.int64), (w,)),
        ("info_schema_length", (), np.dtype(np.int64), (w,)),
        ("info_schema", (), np.dtype(np.uint8), (w, INFO_SCHEMA_BYTES_PER_WORKER)),
        ("rewards", (), np.dtype(np.float64), (n,)),
        ("terminations", (), np.dtype(np.bool_), (n,)),
        ("truncations", (), np.dtype(np.bool_), (n,)),
    ]
    arrays += [
        ("observations", path, dtype, (n, *shape)) for path, dtype, shape in _leaves(observation_space)
    ]
    arrays += [("actions", path, dtype, (n, *shape)) for path, dtype, shape in _leaves(action_space)]
    entries = []
    offset = 0
    for field, path, dtype, shape in arrays:
        offset = -(-offset // _ALIGN) * _ALIGN
        entries.append((field, path, dtype.str, shape, offset))
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    name = f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    return Layout(name=name, size=max(offset, 1), num_envs=n, num_workers=w, entries=tuple(entries))


class SharedBatch(Batch):
    """Numpy views of a shared block: ``observations``, ``actions`` (batches of their spaces), ``rewards``,
    ``terminations``, ``truncations``, ``step_mask`` (one row per env), ``command_seq``, ``done_seq``,
    ``status``, ``doorbell``, ``info_length``, ``info_bytes``, ``info_schema_seq``, ``info_schema_length``,
    ``info_schema`` (one per worker), ``info_columns`` (one row per env) and ``parent_bell``.

    Use `SharedBatch.create` in the parent, `SharedBatch.send` to hand it to a worker, and
    `SharedBatch.attach` in the worker; `SharedBatch.release` unmaps it. A
    `torchwm.vector.transports.contract.Batch` whose arrays are views of the block. How the two ends signal
    through it (the step numbers, statuses and rings) is `torchwm.vector.transports.shared_memory`'s.
    """

    action_space: gym.Space

    def __init__(
        self,
        layout: Layout,
        mapping: mmap.mmap,
        observation_space: gym.Space,
        action_space: gym.Space,
        fd: int | None,
    ) -> None:
        self.layout = layout
        self.observation_space = observation_space
        self.action_space = action_space
        self._fd = fd  # the parent's: kept open to hand the block to workers started later
        self._mapping: mmap.mmap | None = mapping
        fields: dict[str, dict[tuple, np.ndarray]] = {}
        for field, path, dtype, shape, offset in layout.entries:
            count = int(np.prod(shape, dtype=np.int64))
            view = np.frombuffer(mapping, dtype=np.dtype(dtype), count=count, offset=offset).reshape(shape)
            fields.setdefault(field, {})[path] = view
        self.command_seq = fields["command_seq"][()]
        self.done_seq = fields["done_seq"][()]
        self.status = fields["status"][()]
        self.doorbell = fields["doorbell"][()]
        self.parent_bell = fields["parent_bell"][()]
        # The futex words' addresses, for the rings (`torchwm.vector.transports.shared_memory`): plain ints,
        # so that a ring reads them without a call.
        self.doorbell_addresses = [
            self.doorbell.ctypes.data + w * self.doorbell.itemsize for w in range(layout.num_workers)
        ]
        self.parent_bell_address: int = self.parent_bell.ctypes.data
        self.worker_sleeping = fields["worker_sleeping"][()]
        self.parent_sleeping = fields["parent_sleeping"][()]
        self.ring_threshold = fields["ring_threshold"][()]
        self.worker_spin = fields["worker_spin"][()]
        self.step_times = fields["step_times"][()]
        self.action_via_pipe = fields["action_via_pipe"][()]
        self.step_mask = fields["step_mask"][()]
        self.info_length = fields["info_length"][()]
        self.info_bytes = fields["info_bytes"][()]
        self.info_columns = fields["info_columns"][()]
        self.info_schema_seq = fields["info_schema_seq"][()]
        self.info_schema_length = fields["info_schema_length"][()]
        self.info_schema = fields["info_schema"][()]
        self.rewards = fields["rewards"][()]
        self.terminations = fields["terminations"][()]
        self.truncations = fields["truncations"][()]
        self.observations = _nest(observation_space, fields["observations"])
        self.actions = _nest(action_space, fields["actions"])

    @classmethod
    def create(
        cls, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> SharedBatch:
        layout = plan_layout(observation_space, action_space, num_envs, num_workers)
        fd = _anonymous_file(layout.name)
        try:
            os.ftruncate(fd, layout.size)
            mapping = mmap.mmap(fd, layout.size)
        except BaseException:
            os.close(fd)
            raise
        return cls(layout, mapping, observation_space, action_space, fd)

    def send(self, conn: Any, pid: int) -> None:
        """Hand the block to the worker at the other end of ``conn`` (it calls `attach`)."""
        assert self._fd is not None, "only the process that created the block sends it"
        send_handle(conn, self._fd, pid)

    @classmethod
    def attach(
        cls, layout: Layout, fd: int, observation_space: gym.Space, action_space: gym.Space
    ) -> SharedBatch:
        """Map the block whose descriptor ``fd`` came from `send` (and close ``fd``)."""
        try:
            mapping = mmap.mmap(fd, layout.size)
        finally:
            os.close(fd)
        return cls(layout, mapping, observation_space, action_space, None)

    def release(self) -> None:
        """Drop the mapping (and the parent's descriptor). Safe to call twice."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
        mapping, self._mapping = self._mapping, None
        # This object's own views go first: a mapping with views cannot be closed.
        for name in [name for name in vars(self) if name not in ("layout", "_fd", "_mapping")]:
            setattr(self, name, None)
        if mapping is not None:
            try:
                mapping.close()
            except BufferError:
                # Views handed out with copy=False still use it; the memory goes with them.
                pass


def _anonymous_file(name: str) -> int:
    """A descriptor of a new, empty shared file that has no path (``name`` labels it where possible)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name, os.MFD_CLOEXEC)
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.unlink(path)  # at once: the descriptor keeps the file, and nothing can be left behind
    return fd
