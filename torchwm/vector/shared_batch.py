"""One shared-memory block holding a whole batch: actions, observations, rewards, flags, signals.

The ``shmem`` backend lays every array that crosses between the parent and its
workers into a single POSIX shared-memory segment, so a step moves no bytes
through a pipe: the parent writes actions in place, each worker writes its
observation rows in place, and two counters per worker (``command_seq``,
``done_seq``) say when there is work and when it is done. `SharedBatch.layout`
describes the block as plain data, so a worker (started by fork, forkserver or
spawn) attaches by name and gets the same numpy views.

The block has no name in ``/dev/shm``: the parent makes it with
``memfd_create`` (elsewhere: a file it unlinks at once) and hands each worker
its file descriptor over the worker's pipe (`send_handle`), also a worker
restarted later. So nothing is left behind whatever is killed (the parent,
the workers, the whole process group, and with them multiprocessing's
resource tracker): the memory goes with the last process that maps it. The
name ``torchwm_<pid>_<random>`` still labels the mapping (``/memfd:torchwm_...``
in ``/proc/<pid>/maps``), so that it is easy to find.
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
from torchwm.vector import futex
from torchwm.vector.batching import ARRAY_SPACES

SEGMENT_PREFIX = "torchwm_"
_ALIGN = 64  # a cache line: workers write neighbouring arrays without false sharing of the flags
# Bytes each worker has for its step's pickled infos (Atari's lives and frame counters take ~150 a
# env); larger infos go through the pipe instead.
INFO_BYTES_PER_WORKER = 32768


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
        # 1: this worker's step actions come over its pipe (their dtype is not the action space's).
        ("action_via_pipe", (), np.dtype(np.int32), (w,)),
        ("step_mask", (), np.dtype(np.bool_), (n,)),
        # A worker's step infos, pickled, when they fit: no pipe message, no wake-up on either side.
        ("info_length", (), np.dtype(np.int64), (w,)),
        ("info_bytes", (), np.dtype(np.uint8), (w, INFO_BYTES_PER_WORKER)),
        ("rewards", (), np.dtype(np.float64), (n,)),
        ("terminations", (), np.dtype(np.bool_), (n,)),
        ("truncations", (), np.dtype(np.bool_), (n,)),
    ]
    arrays += [("observations", path, dtype, (n, *shape)) for path, dtype, shape in _leaves(observation_space)]
    arrays += [("actions", path, dtype, (n, *shape)) for path, dtype, shape in _leaves(action_space)]
    entries = []
    offset = 0
    for field, path, dtype, shape in arrays:
        offset = -(-offset // _ALIGN) * _ALIGN
        entries.append((field, path, dtype.str, shape, offset))
        offset += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    name = f"{SEGMENT_PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
    return Layout(name=name, size=max(offset, 1), num_envs=n, num_workers=w, entries=tuple(entries))


class SharedBatch:
    """Numpy views of a shared block: ``observations``, ``actions`` (batches of their spaces), ``rewards``,
    ``terminations``, ``truncations``, ``step_mask`` (one row per env), ``command_seq``, ``done_seq``,
    ``status``, ``doorbell``, ``info_length``, ``info_bytes`` (one per worker) and ``parent_bell``.

    Use `SharedBatch.create` in the parent, `SharedBatch.send` to hand it to a worker, and
    `SharedBatch.attach` in the worker.
    """

    def __init__(self, layout: Layout, mapping: mmap.mmap, observation_space: gym.Space,
                 action_space: gym.Space, fd: int | None) -> None:
        self.layout = layout
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
        self.worker_sleeping = fields["worker_sleeping"][()]
        self.parent_sleeping = fields["parent_sleeping"][()]
        self.ring_threshold = fields["ring_threshold"][()]
        self.action_via_pipe = fields["action_via_pipe"][()]
        self.step_mask = fields["step_mask"][()]
        self.info_length = fields["info_length"][()]
        self.info_bytes = fields["info_bytes"][()]
        self.rewards = fields["rewards"][()]
        self.terminations = fields["terminations"][()]
        self.truncations = fields["truncations"][()]
        self.observations = _nest(observation_space, fields["observations"])
        self.actions = _nest(action_space, fields["actions"])

    def doorbell_address(self, worker: int) -> int:
        return self.doorbell.ctypes.data + worker * self.doorbell.itemsize

    @property
    def parent_bell_address(self) -> int:
        return self.parent_bell.ctypes.data

    def ring_worker(self, worker: int) -> None:
        """Wake worker ``worker`` if it sleeps (after a step signal or a pipe command).

        The bell always changes, so a worker about to sleep on its old value returns at once; the wake
        syscall is made only for a worker that said it sleeps.
        """
        self.doorbell[worker] += 1
        if self.worker_sleeping[worker]:
            futex.wake(self.doorbell_address(worker))

    def ring_parent(self) -> None:
        """Wake the parent if it sleeps (a worker finished). Workers may race on the increment:
        a lost increment still changes the value, which is all a sleeper checks."""
        self.parent_bell[0] += 1
        if self.parent_sleeping[0] and (
            # Waiting for every worker: only the last one to finish wakes the parent. Two finishing at
            # once could each miss the other; the parent's sleep is bounded, so that costs at most that.
            not self.ring_threshold[0]
            or np.count_nonzero(self.done_seq == self.command_seq) >= self.ring_threshold[0]
        ):
            futex.wake(self.parent_bell_address)

    @classmethod
    def create(cls, observation_space: gym.Space, action_space: gym.Space, num_envs: int,
               num_workers: int) -> SharedBatch:
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
    def attach(cls, layout: Layout, fd: int, observation_space: gym.Space, action_space: gym.Space) -> SharedBatch:
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


def leaked_segments() -> list[str]:
    """Names of torchwm segments in ``/dev/shm`` created by this process (tests use it; torchwm itself
    leaves none there, even while running)."""
    prefix = f"{SEGMENT_PREFIX}{os.getpid()}_"
    try:
        return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))
    except FileNotFoundError:
        return []


def mapped_segments(pid: int | str = "self") -> list[str]:
    """Names of the torchwm blocks that process ``pid`` maps (Linux; tests use it to see memory freed)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            lines = maps.read().splitlines()
    except FileNotFoundError:
        return []
    names = {line.split("/memfd:", 1)[1].split(" ")[0] for line in lines if f"/memfd:{SEGMENT_PREFIX}" in line}
    return sorted(names)
