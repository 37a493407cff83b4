"""How many worker processes ``shmem`` starts when the user does not say: chosen from what it measures at
start.

More workers step more envs at once, but a step then waits for the slowest of more hand-offs between
processes, and when the workers take every core the parent has none to poll on: it sleeps, and the last
worker to finish must wake it. Which is faster depends on the env (a cheap step gains little from another
worker, a dear one much) and on the machine (how long waking a sleeping process takes varies widely
between machines, VMs most). So when ``num_workers``, ``envs_per_worker`` and ``inline`` are all left
unset and torchwm builds the envs itself (from a name, not from the user's factories), ``shmem`` measures
both before it starts a worker, in a helper process (`measure`; forked from this one where that is safe,
`helper_context`, so that it runs while the forkserver still imports what the workers need):

- the env's step, once per env and wrapper stack (`env_key`): the helper builds one more env, resets it
  and steps it with random actions for `PROBE_SECONDS` (`measure_env_step`). In a process of
  its own, like the workers, since an env that crashes, hangs or exits on some action must not take the
  user's process down; if it does, nothing is measured and the default stands, said in a warning and in
  ``worker_choice``. The helper gets the same Gymnasium registration as the workers (an id registered at
  run time), and waits for the env's build at most the pool's ``timeout``: an env that is not built by
  then raises `EnvTimeoutError` at once, since the workers would not build theirs either.
- then the machine's hand-off, once per process and start method: the helper answers pings through a
  word of shared memory, first while both sides poll, then while both sleep on a futex between pings,
  each pinned to a core of its own.

`choose_worker_count` (`torchwm.vector.transports.worker_choice`) then predicts a step's time for each
count of workers and takes the fastest, unless one per core (the default) is predicted nearly as fast.
The choice is logged on the ``torchwm`` logger at INFO and kept as the vector env's ``worker_choice``;
``num_workers`` or ``envs_per_worker`` fixes the split instead, and nothing is measured then.

Both measurements are kept on disk too (`kept_path`: ``$TORCHWM_CACHE_DIR/worker_count.json``, by
default under ``~/.cache/torchwm``; ``TORCHWM_CACHE_DIR=""`` keeps nothing), for this machine (its CPU,
the cores this process may use, the kernel, the versions of Python, torchwm and Gymnasium): a later
program on the same machine starts its workers at once, with the choice measured before, instead of
building one env more first. A file written for another machine, or one that cannot be read, is
ignored and measured again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import multiprocessing
import os
import platform
import signal
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from multiprocessing.reduction import recv_handle
from typing import Any

import cloudpickle
import numpy as np

from torchwm.errors import EnvTimeoutError
from torchwm.vector.transports import handoff_ping
from torchwm.vector.transports.contract import WorkerChoice, default_num_workers, register_gym_specs
from torchwm.vector.transports.futex import FUTEX_AVAILABLE
from torchwm.vector.transports.handoff import Handoff, as_microseconds
from torchwm.vector.transports.start_methods import ForkServerWorkerProcess
from torchwm.vector.transports.worker_choice import (  # noqa: F401 - also this module's API
    KEEP_DEFAULT_WITHIN,
    PARENT_SECONDS_PER_WORKER,
    choose_worker_count,
    predicted_step_seconds,
)

logger = logging.getLogger("torchwm")

PROBE_SECONDS = 0.02  # how long the env is stepped for its measurement (at least PROBE_MIN_STEPS steps)
PROBE_MIN_STEPS = 8
PROBE_MAX_STEPS = 200
BUILD_DEADLINE_SECONDS = 60.0  # past that, the env is not measured (its workers will build it anyway)
STEP_DEADLINE_SECONDS = 1.0  # an env whose 9 steps take longer is dear enough for a worker per core
# The dearest hand-off assumed when deciding whether to measure it (`measured_worker_choice`): a wake-up
# of a scheduler's time slice, ten times the slow VM's of the tests. An env step so dear that one worker
# per core stays fastest even then needs no hand-off measured.
HANDOFF_BOUND = Handoff(poll=0.0, wake=0.002)


# -- the measurements, in a helper process ----------------------------------------------------------
# The env is stepped in a process of its own, as a worker would step it: an env that crashes, hangs or
# exits on some action must not take the user's process down while it is measured.

# start method -> measured (None: could not be): a machine's property
_handoffs: dict[str, Handoff | None] = {}
_env_steps: dict[str, float | None] = {}  # what the envs are (`env_key`) -> one env's step measured
_failures: dict[str, str] = {}  # start method or `env_key` -> why it could not be measured
CACHE_VARIABLE = "TORCHWM_CACHE_DIR"
KEPT_ENV_STEPS = 256  # the file keeps the last envs measured, no more
_kept: dict[str, Any] | None = None  # the file's measurements for this machine, read once per process
_recalled: set[str] = set()  # start methods and env keys whose figures came from the file


def kept_path() -> str | None:
    """Where the measurements are kept across programs (None: nowhere, ``TORCHWM_CACHE_DIR=""``)."""
    folder = os.environ.get(CACHE_VARIABLE)
    if folder is None:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(home, "torchwm")
    return os.path.join(folder, "worker_count.json") if folder else None


def machine_key() -> str:
    """What the measurements depend on besides the env: the CPU, the cores this process may use, the
    kernel and the versions of Python, torchwm and Gymnasium (and ALE's, once imported)."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(
                (line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model
            )
    except OSError:
        pass
    versions = [
        getattr(sys.modules.get(name), "__version__", "") for name in ("torchwm", "gymnasium", "ale_py")
    ]
    return " | ".join(
        [
            platform.node(),
            model,
            f"{default_num_workers()} cores",
            platform.release(),
            platform.python_version(),
            *versions,
        ]
    )


def _read_kept() -> dict[str, Any]:
    """The file's measurements for this machine ({"handoffs": ..., "env_steps": ...}), read once (there is
    a file: `kept_path`)."""
    global _kept
    if _kept is None:
        _kept = {"machine": machine_key(), "handoffs": {}, "env_steps": {}}
        try:
            with open(str(kept_path())) as file:
                stored = json.load(file)
        except (OSError, ValueError):
            stored = {}
        if isinstance(stored, dict) and stored.get("machine") == _kept["machine"]:
            handoffs, steps = stored.get("handoffs"), stored.get("env_steps")
            if isinstance(handoffs, dict) and isinstance(steps, dict):
                _kept["handoffs"].update(
                    {
                        m: h
                        for m, h in handoffs.items()
                        if isinstance(h, list) and len(h) == 2 and all(isinstance(t, float) for t in h)
                    }
                )
                _kept["env_steps"].update({k: t for k, t in steps.items() if isinstance(t, float)})
    return _kept


def _recall(method: str, key: str) -> None:
    """Take the hand-off of ``method`` and the step of env ``key`` from the file, where this process has not
    measured them."""
    if kept_path() is None:
        return
    kept = _read_kept()
    if method not in _handoffs and method in kept["handoffs"]:
        _handoffs[method] = Handoff(*kept["handoffs"][method])
        _recalled.add(method)
    if key not in _env_steps and key in kept["env_steps"]:
        _env_steps[key] = kept["env_steps"][key]
        _recalled.add(key)


def _keep(method: str, key: str) -> None:
    """Write what this process measured of ``method`` and ``key`` to the file (quietly not, if it cannot)."""
    path = kept_path()
    if path is None:
        return
    kept = _read_kept()
    handoff, step = _handoffs.get(method), _env_steps.get(key)
    if handoff is not None:
        kept["handoffs"][method] = [handoff.poll, handoff.wake]
    if step is not None:
        kept["env_steps"].pop(key, None)  # to the end: the most recent is kept longest
        kept["env_steps"][key] = step
        for old in list(kept["env_steps"])[:-KEPT_ENV_STEPS]:
            del kept["env_steps"][old]
    temporary = f"{path}.{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "w") as file:
            json.dump(kept, file)
        os.replace(temporary, path)  # whole or not at all, whatever another program writes at once
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)


def recalled(method: str, key: str) -> bool:
    """Whether both figures of ``method`` and ``key`` came from the file of an earlier program."""
    return method in _recalled and key in _recalled


def env_key(spec: Any) -> str:
    """What decides an env's step cost in a spec: everything but the count, seed and backend."""
    return repr(spec.replace(num_envs=1, seed=None, backend="", backend_kwargs={}))


def measure_env_step(env: Any) -> float:
    """The median time of a step of ``env``, reset with no seed and stepped with random actions (seeded 0)
    for `PROBE_SECONDS` (at least `PROBE_MIN_STEPS` steps; the first one is not counted).

    Unseeded, since a step's time does not depend on the episode, and a seeded reset can cost more than the
    steps measured: an ALE env loads its ROM again (about 0.1 s of the start, before any worker starts)."""
    env.reset()
    env.action_space.seed(0)
    times: list[float] = []
    stop = time.perf_counter() + PROBE_SECONDS
    while len(times) < PROBE_MAX_STEPS and (time.perf_counter() < stop or len(times) <= PROBE_MIN_STEPS):
        action = env.action_space.sample()
        began = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(action)
        times.append(time.perf_counter() - began)
        if terminated or truncated:
            env.reset()
    return statistics.median(times[1:])


def _helper(conn: Any, ping: bool, env_fn: bytes | None, gym_specs: bytes | None = None) -> None:
    """The helper process: registers ``gym_specs`` (the ids the workers get registered too), builds one env
    from ``env_fn`` (both cloudpickled) and sends ``("built", None)`` and ``("step", seconds)``, or
    ``("error", text)``; then answers pings through a shared word (if ``ping``). The env comes first: while
    a forkserver imports its preload it takes a core, and pings that must share a core with it wait for
    the scheduler, not for the machine's hand-off."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's, as for workers
    if env_fn is not None:
        _step_env(conn, env_fn, gym_specs)
    if ping:
        try:
            fd = recv_handle(conn)
        except (EOFError, OSError, RuntimeError):  # the parent needs no hand-off (`handoff_matters`)
            return
        block = mmap.mmap(fd, 64)
        os.close(fd)
        handoff_ping.answer_pings(np.frombuffer(block, np.int32))


def _step_env(conn: Any, env_fn: bytes, gym_specs: bytes | None) -> None:
    result: tuple[str, Any]
    try:
        if gym_specs is not None:
            register_gym_specs(cloudpickle.loads(gym_specs))
        env = cloudpickle.loads(env_fn)()
        conn.send(("built", None))
        try:
            result = ("step", measure_env_step(env))
        finally:
            env.close()
    except Exception as exc:
        result = ("error", f"{type(exc).__name__}: {exc}")
    try:
        conn.send(result)
    except OSError:  # the parent stopped waiting (its deadline, Ctrl-C): nobody to tell
        pass


def _receive(conn: Any, expected: str, timeout: float) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError(f"no {expected!r} from the helper within {timeout:g} s")
    what, value = conn.recv()  # EOFError if the helper died
    if what != expected:
        raise RuntimeError(value)
    return value


def measure(
    context: Any,
    key: str,
    env_fn: Callable[[], Any],
    gym_specs: Sequence[Any] = (),
    timeout: float | None = None,
    handoff_matters: Callable[[float], bool] = lambda step: True,
) -> tuple[Handoff | None, float | None]:
    """The step of an env from ``env_fn`` (once per ``key``) and the machine's hand-off (once per process
    and start method, unless ``handoff_matters`` says it cannot change the choice for that step), measured
    in helper processes (`helper_context`) that register ``gym_specs`` first, as the workers do; None for
    what could not be measured (the helper raised, died, or took longer than `BUILD_DEADLINE_SECONDS` to
    build the env or `STEP_DEADLINE_SECONDS` to step it; why in `measure_failure`) or was not needed.

    Raises:
        EnvTimeoutError: the env was not built within ``timeout`` (the pool's, when it is the shorter): the
            workers, which build the same env under the same timeout, would not build theirs either.
    """
    method = context.get_start_method()
    _recall(method, key)
    measured = False
    if key not in _env_steps:
        # A forked helper measures the env only: its pings would share a core with a forkserver's imports.
        helper_ctx = helper_context(context)
        ping = helper_ctx is context and method not in _handoffs
        _run_helper(helper_ctx, method, key, ping, env_fn, gym_specs, timeout, handoff_matters)
        measured = True
    step = _env_steps[key]
    # A helper whose env failed may be gone or stuck in a step: the hand-off waits for the next env.
    if method not in _handoffs and step is not None and handoff_matters(step):
        _run_helper(context, method, key, True, None, (), timeout, handoff_matters)
        measured = True
    if measured:
        _keep(method, key)
    return _handoffs.get(method), step


def _run_helper(
    context: Any,
    method: str,
    key: str,
    ping: bool,
    env_fn: Callable[[], Any] | None,
    gym_specs: Sequence[Any],
    timeout: float | None,
    handoff_matters: Callable[[float], bool],
) -> None:
    """One helper process of ``context``: the step of the env from ``env_fn`` (unless None), then the
    hand-off (if ``ping`` and the env's step was measured and `handoff_matters` for it)."""
    parent_conn, child_conn = context.Pipe()
    process_class = ForkServerWorkerProcess if context.get_start_method() == "forkserver" else context.Process
    probe = env_fn is not None
    helper = process_class(
        target=_helper,
        name="torchwm-measure",
        daemon=True,
        args=(
            child_conn,
            ping,
            cloudpickle.dumps(env_fn) if probe else None,
            cloudpickle.dumps(list(gym_specs)) if probe else None,
        ),
    )
    helper.start()
    child_conn.close()
    try:
        if probe:
            _env_steps[key] = _settle(lambda: _probe(parent_conn, timeout), "an env's step", key)
        step = _env_steps.get(key)
        if ping and (not probe or (step is not None and handoff_matters(step))):
            _handoffs[method] = _settle(
                lambda: handoff_ping.ping(helper, parent_conn), "the hand-off", method
            )
    finally:
        parent_conn.close()
        helper.join(1.0)
        if helper.exitcode is None:
            helper.kill()
            helper.join(1.0)


def helper_context(context: Any) -> Any:
    """How the helper starts: forked from this process when it runs no other thread and has not imported
    torch (whose thread pools a forked child may find locked), else as the workers start (``context``).

    A forked helper starts at once with what this process imported, while a forkserver's first worker
    waits for the server to import its preload (about half a second): measured in a fork, the helper's
    work overlaps that wait instead of adding to it. The hand-off it measures is the machine's (two
    processes pinned to two cores), however the helper started."""
    safe = threading.active_count() == 1 and "torch" not in sys.modules
    if (
        context.get_start_method() == "fork"
        or not safe
        or "fork" not in multiprocessing.get_all_start_methods()
    ):
        return context
    return multiprocessing.get_context("fork")


def _probe(conn: Any, timeout: float | None) -> float:
    """The helper's measured step; waits for its build at most ``timeout`` (the pool's) or
    `BUILD_DEADLINE_SECONDS`, whichever is shorter."""
    build_wait = BUILD_DEADLINE_SECONDS if timeout is None else min(timeout, BUILD_DEADLINE_SECONDS)
    try:
        _receive(conn, "built", build_wait)
    except TimeoutError:
        if build_wait < BUILD_DEADLINE_SECONDS:
            raise EnvTimeoutError(
                f"shmem: an env was not built within {build_wait:g} s (timeout=) in the helper process that "
                f"measures its step before the workers start; the workers would not build theirs in time "
                f"either. Pass a larger timeout=, or look for an env whose constructor hangs"
            ) from None
        raise
    try:
        return _receive(conn, "step", STEP_DEADLINE_SECONDS)
    except TimeoutError:
        raise _DearEnv(f"its reset and steps took over {STEP_DEADLINE_SECONDS:g} s (a dear env)") from None


class _DearEnv(Exception):
    """The env's step was too slow to measure in time: one worker per core is its answer, not a failure."""


def _settle(measurement: Callable[[], Any], what: str, key: str) -> Any:
    """What ``measurement`` returns, or None when it failed: then the reason is kept (`measure_failure`)
    and said once, as a warning, since the split falls back to one worker per core."""
    try:
        return measurement()
    except EnvTimeoutError:
        raise
    except _DearEnv as exc:  # one worker per core, as measured; said in ``worker_choice``, not a warning
        _failures[key] = f"{what} could not be measured: {exc}"
        return None
    except (OSError, EOFError, TimeoutError, RuntimeError) as exc:
        # The helper's own error comes as its text ("RuntimeError: ..."); a helper that died, as EOFError.
        detail = (
            "the helper process ended (the env crashed or exited)"
            if isinstance(exc, EOFError)
            else str(exc) or type(exc).__name__
        )
        reason = f"{what} could not be measured: {detail}"
        _failures[key] = reason
        warnings.warn(
            f"shmem: {reason}; starting one worker per core (pass backend_kwargs={{'num_workers': "
            f"...}} to choose)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def measure_failure(method: str, key: str) -> str:
    """Why the hand-off (start method ``method``) or the env step (``key``) could not be measured ("": it
    was)."""
    return "; ".join(
        reason
        for reason in (
            _failures.get(method, "") if _handoffs.get(method) is None else "",
            _failures.get(key, "") if _env_steps.get(key) is None else "",
        )
        if reason
    )


def measured_worker_choice(
    num_envs: int,
    cores: int,
    key: str,
    env_fn: Callable[[], Any],
    context: Any,
    gym_specs: Sequence[Any] = (),
    timeout: float | None = None,
) -> WorkerChoice | None:
    """`choose_worker_count` from the measured hand-off and env step (`measure`), logged; None when there is
    nothing to choose (one core, one env, no futexes); one worker per core, with the reason in
    ``WorkerChoice.fallback``, when either could not be measured."""
    if cores < 2 or num_envs < 2 or not FUTEX_AVAILABLE or not hasattr(os, "memfd_create"):
        return None
    default = min(cores, num_envs)

    def handoff_matters(step: float) -> bool:
        return choose_worker_count(num_envs, cores, step, HANDOFF_BOUND).workers != default

    handoff, env_step = measure(context, key, env_fn, gym_specs, timeout, handoff_matters)
    if handoff is None and env_step is not None and not handoff_matters(env_step):
        choice = WorkerChoice(
            default,
            f"an env step {as_microseconds(env_step)}: one worker per core is predicted fastest whatever the "
            f"hand-off (up to {as_microseconds(HANDOFF_BOUND.wake)} asleep), so it was not measured",
        )
        logger.info("shmem: %d envs on %s", num_envs, choice)
        return choice
    if handoff is None or env_step is None:
        choice = WorkerChoice(
            min(cores, num_envs),
            "",
            measure_failure(context.get_start_method(), key) or "the measurement failed",
        )
        logger.info("shmem: %d envs on %s", num_envs, choice)
        return choice
    choice = choose_worker_count(num_envs, cores, env_step, handoff)
    if recalled(context.get_start_method(), key):
        choice = WorkerChoice(choice.workers, f"{choice.measured}; kept from an earlier run in {kept_path()}")
    logger.info("shmem: %d envs on %s", num_envs, choice)
    return choice
