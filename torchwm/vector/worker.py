"""The worker process: several envs stepped by one `EnvGroup`, driven by the parent.

`worker_main` is the target of every process that ``subproc`` and ``shmem``
start. It builds its envs from a cloudpickled factory (so lambdas, closures
and envs registered at run time work under fork, forkserver and spawn),
reports their spaces, then serves commands until ``close``.

Every pipe message is numbered. The parent sends ``(seq, command)``; the
worker answers ``(seq, reply, raw_follows)`` with the number of the command
it answers (0 for the messages it sends unasked at start: ``started``, then
``ready``). A reply the parent no longer waits for (its command timed out, or
Ctrl-C interrupted the wait) is recognised by its number and dropped, so a
late reply is never taken for the answer to a later command. A reply that
cannot be pickled (an env attribute holding a lock, an emulator handle)
becomes an error reply for that command only (`send_reply`).

- ``subproc``: every command comes over the pipe and every result goes back
  over it (`serve_pipe`). After a command the worker polls the pipe with
  ``os.sched_yield()`` for a millisecond before it blocks in ``recv``, for the
  reason below.
- ``shmem``: steps are signalled through shared memory (`serve_shared`): the
  parent writes actions and a step mask, then sets ``command_seq[w]`` to the
  step's number (actions whose dtype is not the action space's come over the
  pipe instead, flagged in ``action_via_pipe[w]``, so that every env gets the
  actions exactly as given, as on every other backend); the
  worker steps, writes its rows in place and its non-empty infos, pickled, in
  its share of ``info_bytes`` (the pipe only when they do not fit), then sets
  ``done_seq[w]``. While idle it polls the counter with
  ``os.sched_yield()`` for a millisecond, then sleeps on its doorbell (a
  futex, see `torchwm.vector.futex`), so that it never holds a core another
  process needs. Control commands (reset, call, close) come over the pipe.

Workers ignore SIGINT: Ctrl-C reaches the parent alone, which closes them.
An exception in an env is sent back with the env's index and traceback.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.reduction import ForkingPickler, recv_handle
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from torchwm.vector import futex
from torchwm.vector.batching import ARRAY_SPACES, create_batch, slice_rows, take_rows
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.shared_batch import SharedBatch

# status[w] values written by a shmem worker with done_seq
STATUS_OK = 0
STATUS_INFOS = 1  # non-empty infos wait in the pipe
STATUS_ERROR = 2  # an error message waits in the pipe
STATUS_SHARED_INFOS = 3  # non-empty infos, pickled in info_bytes[w][:info_length[w]]

# Idle time polled with sched_yield before sleeping on the doorbell: longer than the parent's own
# work between two steps, since waking a sleeping process costs tens of microseconds.
SPIN_SECONDS = 0.001
IDLE_WAIT_SECONDS = 0.005  # longest sleep: bounds a missed ring and the check that the parent lives


@dataclass
class WorkerPayload:
    """What a worker needs to build its envs; sent cloudpickled."""

    env_fns: list[Any]  # one factory per env of this worker
    first_env: int  # global index of the worker's first env
    autoreset_mode: Any
    gym_specs: list[gym.envs.registration.EnvSpec] = field(default_factory=list)


def gym_specs_to_send(env_id: str | None) -> list[gym.envs.registration.EnvSpec]:
    """The Gymnasium spec of ``env_id``, for workers whose interpreter never saw its registration."""
    if env_id and env_id in gym.registry:
        return [gym.registry[env_id]]
    return []


def _register_missing(specs: list[gym.envs.registration.EnvSpec]) -> None:
    for spec in specs:
        if spec.id not in gym.registry and isinstance(spec.entry_point, str):
            # The package that registers the id (ale_py registers every ALE id on import) goes first,
            # so that its own registration does not find ours and warn about an override.
            try:
                importlib.import_module(spec.entry_point.split(":")[0])
            except ImportError:
                pass
        if spec.id not in gym.registry:
            gym.registry[spec.id] = spec


def describe_share(envs: list[gym.Env]) -> dict[str, Any]:
    """What the parent needs to know of one share of envs: its first env's metadata and render mode, and
    every env's observation and action space, so that every env of every share is checked
    (`torchwm.vector.base.resolve_spaces`). Built in each worker and by the parent for the envs it steps
    itself (``inline``). A space equal to the first env's is that same object, which pickle sends once."""
    first = envs[0]

    def spaces_of(kind: str) -> list[gym.Space]:
        reference = getattr(first, kind)
        return [reference if space == reference else space for space in (getattr(env, kind) for env in envs)]

    return {"observation_spaces": spaces_of("observation_space"), "action_spaces": spaces_of("action_space"),
            "metadata": dict(first.metadata), "render_mode": first.render_mode}


def send_reply(conn: Any, seq: int, reply: Any, raw: Any = None, first_env: int = 0) -> None:
    """Send ``reply`` as the answer to command ``seq``, then ``raw`` bytes if given.

    Pickled here, before anything is written: a reply that cannot be pickled (``get_attr`` of an
    attribute holding a lock or an emulator) is answered with an error for this command instead, and
    the pipe stays in step.
    """
    try:
        data = ForkingPickler.dumps((seq, reply, raw is not None))
    except Exception as exc:
        data = ForkingPickler.dumps((seq, error_reply(_unpicklable(reply, exc, first_env)), False))
        raw = None
    conn.send_bytes(data)
    if raw is not None:
        conn.send_bytes(raw)


def _unpicklable(reply: Any, exc: Exception, first_env: int) -> TypeError:
    whose = ""
    if isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[1], list):  # one value per env
        for i, value in enumerate(reply[1]):
            try:
                ForkingPickler.dumps(value)
            except Exception:
                whose = f" (the value of env {first_env + i}, a {type(value).__name__})"
                break
    error = TypeError(
        f"the result cannot be pickled to send it to the parent process{whose}: {type(exc).__name__}: {exc}. "
        f"Call a method that returns plain data (numbers, arrays, strings), or use backend='sync' to "
        f"reach the env object itself"
    )
    error.__cause__ = exc
    return error


def failing_env(exc: BaseException) -> int | None:
    """The local index of the env that raised, read from the `EnvGroup` frame of the traceback.

    `EnvGroup` loops over its envs with the index in ``i``; reading it back here
    costs nothing on the hot path, unlike wrapping every env call in a try.
    """
    tb = exc.__traceback__
    index = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename == EnvGroup.step.__code__.co_filename and "i" in frame.f_locals:
            index = frame.f_locals["i"]
        tb = tb.tb_next
    return index if isinstance(index, int) else None


def error_reply(exc: BaseException) -> tuple:
    """The message a worker sends for ``exc`` (also built by the parent for the envs it steps itself).

    ``("error", local env index or None, traceback text, repr, exception type cloudpickled or None)``:
    the type lets the parent raise a `WorkerError` that is also an instance of it.
    """
    try:
        pickled_type = cloudpickle.dumps(type(exc))
    except Exception:
        pickled_type = None
    return ("error", failing_env(exc), "".join(traceback.format_exception(exc)), repr(exc), pickled_type)


def worker_main(worker_index: int, conn: Any, parent_conn: Any, payload_bytes: bytes) -> None:
    """Entry point of a worker process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent_conn is not None:
        parent_conn.close()  # else the pipe never reports the parent's death (fork keeps both ends)
    group: EnvGroup | None = None
    shared = None
    first_env = 0
    try:
        # Says that the process got as far as torchwm's code (a death before it is a start-up failure).
        send_reply(conn, 0, ("started", os.getpid()))
        answering = 0
        try:
            payload: WorkerPayload = cloudpickle.loads(payload_bytes)
            first_env = payload.first_env
            _register_missing(payload.gym_specs)
            envs = [fn() for fn in payload.env_fns]
            send_reply(conn, 0, ("ready", describe_share(envs)))
            answering, command = conn.recv()
            assert command[0] == "setup", command
            layout = command[1]
            first = envs[0]
            if layout is None:
                arrays = (create_batch(first.observation_space, len(envs)),
                          np.zeros(len(envs)), np.zeros(len(envs), bool), np.zeros(len(envs), bool))
            else:
                # The block comes as a file descriptor over the pipe: it has no name anyone could leak.
                shared = SharedBatch.attach(layout, recv_handle(conn), first.observation_space, first.action_space)
                rows = slice(payload.first_env, payload.first_env + len(envs))
                arrays = (slice_rows(first.observation_space, shared.observations, rows.start, rows.stop),
                          shared.rewards[rows], shared.terminations[rows], shared.truncations[rows])
            group = EnvGroup(envs, payload.autoreset_mode, *arrays)
            send_reply(conn, answering, ("ok", None))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            send_reply(conn, answering, error_reply(exc))
            return
        if shared is None:
            serve_pipe(group, conn, first_env)
        else:
            serve_shared(group, conn, shared, worker_index, first_env)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the parent is gone: nobody to answer
    finally:
        if group is not None:
            try:
                group.close()
            except Exception:
                pass
        if shared is not None:
            shared.release()


def control_reply(group: EnvGroup, command: tuple) -> tuple:
    """A command other than step; returns the reply (the parent runs it too on the envs it steps itself)."""
    kind = command[0]
    if kind == "reset":
        _, local_ids, seeds, options = command
        infos = group.reset(local_ids, seeds, options)
        return ("ok", infos)
    if kind == "call":
        _, name, args, kwargs = command
        return ("ok", group.call(range(len(group.envs)), name, args, kwargs))
    if kind == "set_attr":
        _, name, values = command
        group.set_attr(range(len(group.envs)), name, values)
        return ("ok", None)
    if kind == "needs_reset":
        # A restarted worker: its envs' interrupted episodes were reported truncated, so under
        # next_step autoreset their next step starts a new episode, as after any truncation.
        group.needs_reset = [True] * len(group.envs)
        return ("ok", None)
    if kind == "ping":
        return ("ok", os.getpid())
    raise ValueError(f"unknown worker command {kind!r}")


def _rows_of(group: EnvGroup, local_ids: list[int]) -> tuple:
    if len(local_ids) == len(group.envs):
        ids = None
    else:
        ids = np.asarray(local_ids)
    obs = take_rows(group.observation_space, group.observations, ids)
    pick = slice(None) if ids is None else ids
    return obs, group.rewards[pick].copy(), group.terminations[pick].copy(), group.truncations[pick].copy()


def wait_for_message(conn: Any, idle_since: float) -> None:
    """Return once ``conn`` has a message: poll with sched_yield until ``SPIN_SECONDS`` after ``idle_since``,
    then block. The next step usually comes within that time, and a process that blocks must be woken."""
    while time.perf_counter() - idle_since < SPIN_SECONDS:
        if conn.poll():
            return
        os.sched_yield()
    conn.poll(None)


def serve_pipe(group: EnvGroup, conn: Any, first_env: int) -> None:
    """The ``subproc`` loop: commands and results over the pipe."""
    while True:
        wait_for_message(conn, time.perf_counter())
        seq, command = conn.recv()
        kind = command[0]
        if kind == "close":
            send_reply(conn, seq, ("ok", None))
            return
        try:
            if kind == "step":
                _, local_ids, actions = command
                infos = group.step(local_ids, actions)
                if len(local_ids) == len(group.envs) and isinstance(group.observation_space, ARRAY_SPACES):
                    # All rows of an array batch: the observations follow as raw bytes, which the
                    # parent reads straight into its batch (no pickling, no copy on either side).
                    send_reply(conn, seq, ("ok", (None, group.rewards, group.terminations, group.truncations, infos)),
                               raw=group.observations.data.cast("B"))
                else:
                    send_reply(conn, seq, ("ok", (*_rows_of(group, local_ids), infos)))
            elif kind == "reset":
                _, local_ids, seeds, options = command
                infos = group.reset(local_ids, seeds, options)
                send_reply(conn, seq, ("ok", (*_rows_of(group, local_ids), infos)))
            else:
                send_reply(conn, seq, control_reply(group, command), first_env=first_env)
        except (EOFError, BrokenPipeError):
            raise
        except Exception as exc:
            send_reply(conn, seq, error_reply(exc))


def serve_shared(group: EnvGroup, conn: Any, shared: Any, worker_index: int, first_env: int) -> None:
    """The ``shmem`` loop: steps signalled through shared memory, control over the pipe."""
    count = len(group.envs)
    rows = slice(first_env, first_env + count)
    all_local = list(range(count))
    action_space = group.action_space
    actions_view = slice_rows(action_space, shared.actions, rows.start, rows.stop)
    mask_view = shared.step_mask[rows]
    command_seq = shared.command_seq
    done_seq = shared.done_seq
    status = shared.status
    action_via_pipe = shared.action_via_pipe
    info_bytes, info_length = shared.info_bytes[worker_index], shared.info_length
    info_capacity = info_bytes.size
    doorbell = shared.doorbell
    sleeping = shared.worker_sleeping
    doorbell_address = shared.doorbell_address(worker_index)
    last_seq = int(command_seq[worker_index])
    piped_actions: tuple | None = None  # (seq, local_ids, actions) of a step whose actions came over the pipe
    parent = os.getppid()
    idle_since = time.perf_counter()
    while True:
        bell = int(doorbell[worker_index])  # read before the checks: a ring after them ends the sleep
        seq = int(command_seq[worker_index])
        if seq != last_seq:
            last_seq = seq
            message: Any = None
            try:
                if action_via_pipe[worker_index]:
                    # Sent before the step's number was set, so it is in the pipe already.
                    while piped_actions is None or piped_actions[0] != seq:
                        answered, command = conn.recv()
                        piped_actions = (answered, *command[1:])
                    _, local_ids, actions = piped_actions
                    piped_actions = None
                elif mask_view.all():
                    local_ids, actions = all_local, actions_view
                else:
                    local_ids = np.flatnonzero(mask_view).tolist()
                    actions = take_rows(action_space, actions_view, np.asarray(local_ids))
                infos = group.step(local_ids, actions)
                status[worker_index] = STATUS_OK
                if any(infos):
                    pickled = pickle.dumps(infos, protocol=pickle.HIGHEST_PROTOCOL)
                    if len(pickled) <= info_capacity:
                        info_bytes[: len(pickled)] = np.frombuffer(pickled, dtype=np.uint8)
                        info_length[worker_index] = len(pickled)
                        status[worker_index] = STATUS_SHARED_INFOS
                    else:
                        message = infos
                        status[worker_index] = STATUS_INFOS
            except (EOFError, BrokenPipeError):
                raise
            except Exception as exc:
                message = error_reply(exc)
                status[worker_index] = STATUS_ERROR
            # done_seq after the rows and status (the parent reads them once it sees it), and
            # before a pipe message: a message larger than the pipe buffer would otherwise block
            # this worker until the parent reads it, while the parent waits for done_seq.
            done_seq[worker_index] = seq
            shared.ring_parent()
            if message is not None:
                send_reply(conn, seq, message)
            idle_since = time.perf_counter()
            continue
        if conn.poll():
            answered, command = conn.recv()
            if command[0] == "actions":
                # A step's actions, read before its number was seen; the step comes next.
                piped_actions = (answered, *command[1:])
                continue
            if command[0] == "close":
                send_reply(conn, answered, ("ok", None))
                return
            try:
                send_reply(conn, answered, control_reply(group, command), first_env=first_env)
            except (EOFError, BrokenPipeError):
                raise
            except Exception as exc:
                send_reply(conn, answered, error_reply(exc))
            idle_since = time.perf_counter()
            continue
        if time.perf_counter() - idle_since < SPIN_SECONDS:
            os.sched_yield()
        else:
            if os.getppid() != parent:
                return  # orphaned: the parent died without closing the pipe
            sleeping[worker_index] = 1
            # Checked again after saying so: a command sent before the flag was seen is not slept over.
            if int(command_seq[worker_index]) == last_seq and not conn.poll():
                futex.wait(doorbell_address, bell, IDLE_WAIT_SECONDS)
            sleeping[worker_index] = 0
