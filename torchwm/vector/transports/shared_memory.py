"""The shared-memory transport (the ``shmem`` backend): a whole batch in one shared block, steps signalled
through it.

Both ends of the wire are here. Actions, observations, rewards and flags live
in one shared-memory block (`SharedBatch`); a step costs no pipe message and
no pickling: the parent writes the actions and the step's number into the
block and rings the worker, the worker steps its `EnvGroup` in place and
sets ``done_seq``. How one step travels, file by file: docs/concepts.md,
"One shmem step".

Actions of another dtype than the action space's travel through the pipe
instead (as a `Step` message, flagged in ``action_via_pipe``), so that every
env gets the actions exactly as given, as on every other backend. While
waiting, both sides poll their counter with ``os.sched_yield()`` for a while,
then sleep on a futex (a word of the block) until the other side rings, so
that no waiting process holds a core a worker needs (`futex_wait`). How long
each side polls is measured on the first steps (`torchwm.vector.transports.handoff`):
the workers write when they began and ended each step in the block. Step
infos travel in the block too: plain numbers with the same keys for every
env (Atari's lives and frame counters) as columns of numbers, one row per env,
their keys only when they change; other infos pickled. The
pipe carries control commands, errors and large infos (the worker process and
its pipe are `torchwm.vector.transports.processes`).

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

import enum
import mmap
import os
import pickle
import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.reduction import recv_handle, send_handle
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.errors import DynamicShapeError, UnsupportedStackError
from torchwm.spec import VecSpec
from torchwm.vector.batching import (
    ARRAY_SPACES,
    InfoSchema,
    info_rows,
    put_rows,
    slice_rows,
    take_rows,
    uniform_columns,
)
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.messages import ErrorReply, Step, error_reply
from torchwm.vector.transports.contract import (
    CLOSE_GRACE_SECONDS,
    Batch,
    Deadline,
    PoolSettings,
    Transport,
    WorkerChoice,
    WorkerPayload,
    default_num_workers,
    gym_specs_of,
)
from torchwm.vector.transports.futex import futex_wait, futex_wake
from torchwm.vector.transports.handoff import MAX_SPIN_SECONDS, WaitTuner
from torchwm.vector.transports.processes import (
    ProcessSettings,
    ProcessWorker,
    Readable,
    Setup,
    answer_control,
    send_reply,
    worker_main,
)
from torchwm.vector.transports.worker_count import env_key, measured_worker_choice

LIVENESS_SECONDS = 0.005  # longest sleep of the parent between checks that the busy workers are alive
# longest sleep of a worker: bounds a missed ring and the check that the parent lives
IDLE_WAIT_SECONDS = 0.005


class StepStatus(enum.IntEnum):
    """What a worker wrote in ``status[w]`` with ``done_seq[w]``."""

    OK = 0
    INFOS_IN_PIPE = 1  # non-empty infos wait in the pipe
    ERROR = 2  # an `ErrorReply` waits in the pipe
    INFOS_IN_BLOCK = 3  # non-empty infos, pickled in info_bytes[w][:info_length[w]]
    # Plain numbers, in the rows of info_columns of the envs stepped (in step order, from the worker's first
    # row); their keys and types are the schema last written in info_schema[w] (info_schema_seq[w] counts).
    INFOS_IN_COLUMNS = 4


# -- the block ------------------------------------------------------------------------------------

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
    `SharedBatch.attach` in the worker. A `torchwm.vector.transports.contract.Batch` whose arrays are views of
    the block.
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
        self.worker_sleeping = fields["worker_sleeping"][()]
        self.parent_sleeping = fields["parent_sleeping"][()]
        self.ring_threshold = fields["ring_threshold"][()]
        self.worker_spin = fields["worker_spin"][()]
        self.step_times = fields["step_times"][()]
        self.tuner: WaitTuner | None = None  # the parent's, set by the first worker attached
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
            futex_wake(self.doorbell_address(worker))

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
            futex_wake(self.parent_bell_address)

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
    names = {
        line.split("/memfd:", 1)[1].split(" ")[0] for line in lines if f"/memfd:{SEGMENT_PREFIX}" in line
    }
    return sorted(names)


# -- the worker's end ------------------------------------------------------------------------------


def serve(conn: Any, envs: list, payload: WorkerPayload, seq: int, setup: Setup) -> None:
    """The worker loop: steps signalled through the block, control commands over the pipe, until `Close`."""
    first = envs[0]
    worker_index = payload.index
    # The block comes as a file descriptor over the pipe: it has no name anyone could leak.
    shared = SharedBatch.attach(setup.layout, recv_handle(conn), first.observation_space, first.action_space)
    count = len(envs)
    rows = slice(payload.first_env, payload.first_env + count)
    group = EnvGroup(
        envs, payload.autoreset_mode, *shared.rows(rows.start, rows.stop), first_env=payload.first_env
    )
    try:
        send_reply(conn, seq, None)  # the answer to Setup
        _serve_steps(group, conn, shared, worker_index, rows, payload.first_env)
    finally:
        try:
            group.close()
        except Exception:
            pass
        del group  # its rows are views of the block
        shared.release()


def serve_shared_memory(conn: Any, payload_bytes: bytes) -> None:
    """The whole worker's end of a `SharedMemoryWorker` in a process its parent did not start (a Ray actor
    on the parent's node): build the envs of the cloudpickled `WorkerPayload`, then serve until `Close`.

    ``conn`` is a `multiprocessing.connection.Connection` over a Unix socket to the parent, which sends the
    block's descriptor over it as over a worker's pipe.
    """
    worker_main(conn, None, payload_bytes, serve)


def _serve_steps(
    group: EnvGroup, conn: Any, shared: SharedBatch, worker_index: int, rows: slice, first_env: int
) -> None:
    all_local = list(range(len(group.envs)))
    action_space = group.action_space
    actions_view = slice_rows(action_space, shared.actions, rows.start, rows.stop)
    mask_view = shared.step_mask[rows]
    command_seq = shared.command_seq
    done_seq = shared.done_seq
    status = shared.status
    action_via_pipe = shared.action_via_pipe
    info_bytes, info_length = shared.info_bytes[worker_index], shared.info_length
    info_capacity = info_bytes.size
    write_columns = _column_writer(shared, worker_index, rows)
    doorbell = shared.doorbell
    sleeping = shared.worker_sleeping
    doorbell_address = shared.doorbell_address(worker_index)
    step_times, worker_spin = shared.step_times[worker_index], shared.worker_spin
    last_seq = int(command_seq[worker_index])
    piped_step: tuple[int, Step] | None = None  # (number, message) of a step whose actions came over the pipe
    parent = os.getppid()
    readable = Readable(conn)
    idle_since = time.perf_counter()
    while True:
        bell = int(doorbell[worker_index])  # read before the checks: a ring after them ends the sleep
        seq = int(command_seq[worker_index])
        if seq != last_seq:
            last_seq = seq
            step_times[0] = time.perf_counter()
            message: Any = None
            try:
                if action_via_pipe[worker_index]:
                    # Sent before the step's number was set, so it is in the pipe already.
                    while piped_step is None or piped_step[0] != seq:
                        piped_step = conn.recv()
                    local_ids = all_local if piped_step[1].local_ids is None else piped_step[1].local_ids
                    actions = piped_step[1].actions
                    piped_step = None
                elif mask_view.all():
                    local_ids, actions = all_local, actions_view
                else:
                    local_ids = np.flatnonzero(mask_view).tolist()
                    actions = take_rows(action_space, actions_view, np.asarray(local_ids))
                infos = group.step(local_ids, actions)
                status[worker_index] = StepStatus.OK
                if any(infos):
                    if write_columns(infos):
                        status[worker_index] = StepStatus.INFOS_IN_COLUMNS
                    else:
                        pickled = pickle.dumps(infos, protocol=pickle.HIGHEST_PROTOCOL)
                        if len(pickled) <= info_capacity:
                            info_bytes[: len(pickled)] = np.frombuffer(pickled, dtype=np.uint8)
                            info_length[worker_index] = len(pickled)
                            status[worker_index] = StepStatus.INFOS_IN_BLOCK
                        else:
                            message = infos
                            status[worker_index] = StepStatus.INFOS_IN_PIPE
            except Exception as exc:
                # Whatever the env raised, its own BrokenPipeError or EOFError too: a failure of the pipe
                # to the parent is `torchwm.vector.transports.processes.ParentGone`, not caught here.
                message = error_reply(exc)
                status[worker_index] = StepStatus.ERROR
            step_times[1] = time.perf_counter()
            # done_seq after the rows and status (the parent reads them once it sees it), and
            # before a pipe message: a message larger than the pipe buffer would otherwise block
            # this worker until the parent reads it, while the parent waits for done_seq.
            done_seq[worker_index] = seq
            shared.ring_parent()
            if message is not None:
                send_reply(conn, seq, message)
            idle_since = time.perf_counter()
            continue
        if readable():
            answered, command = conn.recv()
            if isinstance(command, Step):
                # A step's actions, read before its number was seen; the step comes next.
                piped_step = (answered, command)
                continue
            if not answer_control(conn, answered, command, group, first_env):
                return
            idle_since = time.perf_counter()
            continue
        if time.perf_counter() - idle_since < worker_spin[0]:
            os.sched_yield()
        else:
            if os.getppid() != parent:
                return  # orphaned: the parent died without closing the pipe
            sleeping[worker_index] = 1
            # Checked again after saying so: a command sent before the flag was seen is not slept over.
            if int(command_seq[worker_index]) == last_seq and not readable():
                futex_wait(doorbell_address, bell, IDLE_WAIT_SECONDS)
            sleeping[worker_index] = 0


def _column_writer(shared: SharedBatch, worker_index: int, rows: slice) -> Callable[[list[dict]], bool]:
    """A function that writes a step's infos into the worker's rows of ``info_columns`` (and their schema
    into ``info_schema`` when it changed) and says whether it could: plain numbers of one key set only."""
    as_ints = shared.info_columns[rows]
    as_floats = as_ints.view(np.float64)
    schema_bytes, schema_length, schema_seq = (
        shared.info_schema[worker_index],
        shared.info_schema_length,
        shared.info_schema_seq,
    )
    last_schema: InfoSchema | None = None

    def write(infos: list[dict]) -> bool:
        nonlocal last_schema
        columns = uniform_columns(infos)
        if columns is None or len(columns) > MAX_INFO_COLUMNS:
            return False
        count = len(infos)
        try:
            for column, (_, kind, values) in enumerate(columns):
                (as_floats if kind is float else as_ints)[:count, column] = values
        except OverflowError:  # an int beyond int64: pickled, so that the parent fails as Gymnasium does
            return False
        schema = tuple((key, kind) for key, kind, _ in columns)
        if schema != last_schema:
            pickled = pickle.dumps(schema, protocol=pickle.HIGHEST_PROTOCOL)
            if len(pickled) > schema_bytes.size:
                return False
            schema_bytes[: len(pickled)] = np.frombuffer(pickled, dtype=np.uint8)
            schema_length[worker_index] = len(pickled)
            # Counted on from the block's value, so that a restarted worker's first schema is read too.
            schema_seq[worker_index] += 1
            last_schema = schema
        return True

    return write


# -- the parent's end ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharedMemorySettings(ProcessSettings):
    """`ProcessSettings` and the ``spin_seconds`` option (None: measured,
    `torchwm.vector.transports.handoff`)."""

    spin_seconds: float | None = None

    def __repr__(self) -> str:
        return f"context={self.start_method!r}, spin_seconds={self.spin_seconds!r}"


class SharedMemoryWorker(ProcessWorker):
    """The parent's end of a ``shmem`` worker: steps through the shared block, control over the pipe."""

    OPTIONS: ClassVar[dict[str, Any]] = {**ProcessWorker.OPTIONS, "spin_seconds": None}
    serve = staticmethod(serve)
    settings: SharedMemorySettings

    @classmethod
    def configure(
        cls,
        backend: str,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        options: dict[str, Any],
        pool: PoolSettings,
    ) -> SharedMemorySettings:
        spin = options.get("spin_seconds")
        if spin is not None and (isinstance(spin, bool) or not isinstance(spin, (int, float))):
            raise TypeError(
                f"{backend}: spin_seconds must be a number of seconds or None (measure it), got {spin!r}"
            )
        if spin is not None and not 0 <= spin <= MAX_SPIN_SECONDS:
            raise ValueError(
                f"{backend}: spin_seconds must be between 0 and {MAX_SPIN_SECONDS} (seconds both sides "
                f"poll before they sleep), got {spin!r}"
            )
        settings = super().configure(backend, spec, env_fns, options, pool)
        return SharedMemorySettings(settings.context, settings.serve, None if spin is None else float(spin))

    @classmethod
    def choose_worker_count(
        cls,
        spec: VecSpec,
        env_fns: list[Callable[[], gym.Env]],
        settings: SharedMemorySettings,
        *,
        timeout: float | None = None,
    ) -> WorkerChoice | None:
        # the user's factories: building one more could have effects (a video file)
        if spec.env_fns is not None:
            return None
        return measured_worker_choice(
            spec.num_envs,
            default_num_workers(),
            env_key(spec),
            env_fns[0],
            settings.context,
            gym_specs=gym_specs_of(spec),
            timeout=timeout,
        )

    def __init__(self, index: int, envs: range, settings: Any) -> None:
        super().__init__(index, envs, settings)
        self._shared: SharedBatch | None = None
        self._actions: Any = None  # this worker's rows of the block's actions and step mask
        self._mask: Any = None
        self._step_seq = 0  # the number of the last step signalled
        self._step_count = 0  # how many envs it steps
        self._sent_at = 0.0  # when it was sent (time.perf_counter), for the pool's `WaitTuner`
        self._tuner = WaitTuner(1, 1)  # the pool's, once attached
        self._abandoned = False
        # The schema of this worker's info columns last read, and the info_schema_seq it was read at.
        self._schema: InfoSchema = ()
        self._schema_seq = -1
        self.column_steps = 0  # steps whose infos came as columns (tests check that the path is taken)

    @classmethod
    def create_batch(
        cls, observation_space: gym.Space, action_space: gym.Space, num_envs: int, num_workers: int
    ) -> Batch:
        return SharedBatch.create(observation_space, action_space, num_envs, num_workers)

    def attach(self, batch: Batch) -> None:
        assert isinstance(batch, SharedBatch)
        shared = self._shared = batch
        rows = self.envs
        self._action_space = batch.action_space
        # The dtype of a plain array action space: its actions are checked and written without a walk of the
        # space.
        self._action_dtype = (
            batch.action_space.dtype if isinstance(batch.action_space, ARRAY_SPACES) else None
        )
        self._actions = slice_rows(batch.action_space, shared.actions, rows.start, rows.stop)
        self._mask = shared.step_mask[rows.start : rows.stop]
        if shared.tuner is None:  # the first worker attached: one tuner for the pool
            shared.tuner = WaitTuner(
                shared.layout.num_workers, default_num_workers(), self.settings.spin_seconds
            )
            shared.worker_spin[0] = shared.tuner.worker_spin
        self._tuner = shared.tuner
        super().send(Setup(shared.layout))
        shared.send(self.conn, self.process.pid)

    def wake(self) -> None:
        if self._shared is not None:
            self._shared.ring_worker(self.index)

    def send_step(self, local_ids: list[int] | None, actions: Any) -> None:
        shared = self._shared
        assert shared is not None
        w = self.index
        dtype = self._action_dtype
        if (
            (getattr(actions, "dtype", None) == dtype)
            if dtype is not None
            else _dtypes_match(self._action_space, actions)
        ):
            if local_ids is None:
                if dtype is not None:
                    self._actions[:] = actions
                else:
                    put_rows(self._action_space, self._actions, slice(None), actions)
                self._mask[:] = True
            else:
                put_rows(self._action_space, self._actions, local_ids, actions)
                self._mask[:] = False
                self._mask[local_ids] = True
            self.seq += 1
            shared.action_via_pipe[w] = 0
        else:
            # Actions of another dtype than the space's cannot go through the typed shared arrays unchanged:
            # they go through the pipe, so that every env gets them exactly as given.
            super().send(Step(local_ids, actions))  # takes the step's number
            shared.action_via_pipe[w] = 1
        self._step_seq = self.seq
        self._step_count = len(self.envs) if local_ids is None else len(local_ids)
        self._abandoned = False
        # Written last: the worker starts once it sees the new value.
        self._sent_at = time.perf_counter()
        shared.command_seq[w] = self.seq
        shared.ring_worker(w)

    def poll(self) -> bool:
        return bool(self._shared.done_seq[self.index] == self._step_seq)  # type: ignore[union-attr]

    def finish_step(self, deadline: Deadline) -> list[dict] | ErrorReply:
        shared = self._shared
        assert shared is not None
        if self._abandoned:
            return []  # a message it left in the pipe is dropped by its number when the next reply is read
        tuner = self._tuner
        if tuner.measuring:
            began, ended = shared.step_times[self.index].tolist()
            tuner.record(self.index, self._sent_at, began, ended, time.perf_counter())
            shared.worker_spin[0] = tuner.worker_spin
        else:
            tuner.count_step()
        # An int first: numpy's comparison with an IntEnum member looks up a dozen array hooks on the enum.
        status = int(shared.status[self.index])
        if status == StepStatus.INFOS_IN_COLUMNS:
            return self._info_rows(shared)
        if status == StepStatus.INFOS_IN_BLOCK:
            return pickle.loads(shared.info_bytes[self.index, : shared.info_length[self.index]].data)
        if status == StepStatus.OK:
            return [{}] * self._step_count
        return self._receive(deadline, self._step_seq)  # the infos, or the ErrorReply

    def _info_rows(self, shared: SharedBatch) -> list[dict]:
        """The step's infos from the worker's rows of ``info_columns``: `InfoRow` objects over a copy (the
        next step overwrites the block while the pool may still hold these)."""
        w = self.index
        seq = int(shared.info_schema_seq[w])
        if seq != self._schema_seq:
            self._schema = pickle.loads(shared.info_schema[w, : shared.info_schema_length[w]].data)
            self._schema_seq = seq
        self.column_steps += 1
        start = self.envs.start
        block = shared.info_columns[start : start + self._step_count, : len(self._schema)].copy()
        # InfoRows are read-only mappings: the pool keeps them and `InfoBatcher` batches them.
        return cast(list[dict], info_rows(self._schema, block))

    def abandon_step(self) -> None:
        self._abandoned = True

    @classmethod
    def wait(cls, busy: list[Transport], timeout: float | None, need_all: bool) -> bool:
        workers: list[SharedMemoryWorker] = busy  # type: ignore[assignment]
        shared = workers[0]._shared
        assert shared is not None
        done_seq = shared.done_seq
        expected = [(worker.index, worker._step_seq) for worker in workers]
        started = time.perf_counter()
        spin = workers[0]._tuner.parent_spin
        spin = spin if timeout is None else min(spin, timeout)
        while time.perf_counter() - started < spin:
            if any(done_seq[w] == seq for w, seq in expected):
                return True
            os.sched_yield()
        bell = int(shared.parent_bell[0])  # read before the last check: a ring after it ends the sleep
        # Only the last worker to finish need wake a wait for all of them.
        shared.ring_threshold[0] = shared.layout.num_workers if need_all else 0
        shared.parent_sleeping[0] = 1
        if not any(done_seq[w] == seq for w, seq in expected):
            # Bounded so that a dead worker is noticed at once (it never rings) and a missed ring costs
            # little.
            futex_wait(
                shared.parent_bell_address,
                bell,
                LIVENESS_SECONDS if timeout is None else min(LIVENESS_SECONDS, timeout),
            )
        shared.parent_sleeping[0] = 0
        return False

    def close(self, deadline: Deadline) -> None:
        super().close(deadline)
        # Views of the block: dropped, so that the pool can unmap it.
        self._actions = self._mask = self._shared = None

    def restart(self, payload: WorkerPayload) -> None:
        super().close(Deadline.after(CLOSE_GRACE_SECONDS))
        self.start(payload)
        shared = self._shared
        assert shared is not None
        # The new worker starts from the current command_seq; nothing of the old one is pending.
        shared.done_seq[self.index] = shared.command_seq[self.index]
        self._step_seq = int(shared.command_seq[self.index])


def _dtypes_match(space: gym.Space, actions: Any) -> bool:
    """Whether every array of ``actions`` has its space's dtype (then the shared arrays hold them as
    given)."""
    if isinstance(space, spaces.Dict):
        return all(_dtypes_match(sub, actions[key]) for key, sub in space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return all(_dtypes_match(sub, a) for sub, a in zip(space.spaces, actions, strict=True))
    return getattr(actions, "dtype", None) == space.dtype
