"""The Ray instance the ``ray`` backend connects to, started and stopped once per process.

A process connects to one Ray at a time. Which one, for the ``address`` option:

- ``None``: the Ray this process is already connected to; else ``RAY_ADDRESS`` when it is set
  (the cluster's address, as every Ray tool reads it); else a private local Ray, as ``"local"``.
- ``"local"``: a new local Ray of this process only. ``ray.init()`` without an address would
  instead join any cluster that another program started on this machine with ``ray start``
  (through Ray's session file in its temp dir), so torchwm never calls it that way.
- ``"auto"``, ``"host:port"``: a running cluster (``"auto"``: the one ``RAY_ADDRESS`` or the
  session file names); ``"ray://host:port"``: a remote cluster through Ray Client.

`LocalRay` counts the ray vector envs using the Ray that torchwm started or joined, so that it
stops (or leaves) it with the last of them (``stop_ray_on_close``) or at exit, and never stops a
Ray that someone else started or connected to. An env asking for another address than the
one this process is connected to is refused (`check_address`) before anything starts.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Any

import ray

logger = logging.getLogger(__name__)
ENV_VAR = "RAY_ADDRESS"
STARTUP_TIMED_OUT = "timed out during startup"  # Ray's words when a local node's raylet did not register
CLIENT_PREFIX = "ray://"


def target_address(address: str | None) -> str:
    """The address ``address`` asks for when this process is not connected yet: ``None`` is
    ``RAY_ADDRESS`` when set, else ``"local"``."""
    if address is None:
        return os.environ.get(ENV_VAR) or "local"
    return address


def client_connected() -> bool:
    """Whether this process is connected to Ray through Ray Client (``ray://``)."""
    from ray.util.client import ray as client

    return bool(client.is_connected())


def connected_address() -> str:
    """The address of the Ray this process is connected to, for messages and comparisons:
    ``"ray://host:port"`` through Ray Client, else the cluster's GCS address (``host:port``)."""
    if LocalRay.address is not None and LocalRay.started:
        return LocalRay.address
    if client_connected():
        from ray.util.client import ray as client

        return CLIENT_PREFIX + str(getattr(client.get_context().client_worker, "_conn_str", "?"))
    return str(ray.get_runtime_context().gcs_address)


def _canonical(address: str) -> str | None:
    """``host:port`` with ``localhost`` resolved as Ray resolves it (None: Ray cannot resolve it)."""
    from ray._private import services

    try:
        return services.canonicalize_bootstrap_address(address)
    except Exception:
        return None


def check_address(address: str | None) -> None:
    """Refuse (ValueError) an ``address`` other than the Ray this process is connected to, if it is connected.

    ``None`` takes whatever this process is connected to. ``"local"`` is met by a local Ray this process
    started (torchwm or the user's own ``ray.init()``).
    """
    if address is None or not ray.is_initialized():
        return
    current = connected_address()
    if address == "local":
        started_here = (LocalRay.started and LocalRay.address == "local") or (
            not client_connected() and getattr(ray._private.worker._global_node, "head", False)
        )
        if started_here:
            return
    elif address.startswith(CLIENT_PREFIX) or current.startswith(CLIENT_PREFIX):
        if address.rstrip("/") == current.rstrip("/"):
            return
    elif address == current or _canonical(address) in (current, _canonical(current)):
        return
    raise ValueError(
        f"ray: address={address!r} asks for another Ray than the one this process is connected to "
        f"({current}); a process connects to one Ray at a time. Close every ray vector env (and call "
        f"ray.shutdown() if you connected yourself) before using another address, or pass address=None "
        f"to use the current one."
    )


def default_num_cpus() -> int:
    """The CPUs a private local Ray gets: those this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class LocalRay:
    """The Ray connection torchwm made, shared by the ray envs of this process.

    It ends (`ray.shutdown`: a local Ray stops, a cluster is left) when the last env using it closes
    (``stop_ray_on_close=True``) or when the process exits. A connection someone else made is never ended.
    """

    lock = threading.Lock()
    users = 0
    started = False
    address: str | None = None  # what torchwm connected to: "local", "host:port", "ray://host:port", "auto"
    runtime_env: Any = None  # the runtime_env torchwm connected with

    @classmethod
    def connect(cls, address: str | None, init_kwargs: dict[str, Any]) -> None:
        """Connect to the Ray ``address`` asks for (module docstring), unless this process is connected."""
        with cls.lock:
            if ray.is_initialized():
                return
            target = target_address(address)
            kwargs: dict[str, Any] = {"address": target}
            # Ray Client would pass these on to the server's ray.init
            if not target.startswith(CLIENT_PREFIX):
                kwargs.update(include_dashboard=False, log_to_driver=False, configure_logging=False)
            if target == "local":
                # Only a Ray this process starts may be given resources: passing them to an existing
                # cluster is an error in ray.init.
                kwargs["num_cpus"] = default_num_cpus()
            kwargs.update(init_kwargs)
            for attempt in (1, 2):
                try:
                    ray.init(**kwargs)
                    break
                except BaseException as exc:
                    # A Ray Client connection that failed leaves this process in client mode, where every
                    # later ray.init fails with a bare AssertionError: undo it, so that the user can retry.
                    ray.shutdown()
                    # Ray gives a local node's raylet a fixed 30 s to register, which a machine busy with
                    # other work can miss: a new local Ray gets a second start.
                    if attempt == 2 or target != "local" or STARTUP_TIMED_OUT not in str(exc):
                        raise
                    logger.warning("ray: the local Ray did not start in time (%s); starting it again", exc)
            cls.started, cls.address, cls.runtime_env = True, target, kwargs.get("runtime_env")
            atexit.unregister(cls.stop)  # once, however often torchwm connects
            atexit.register(cls.stop)

    @classmethod
    def acquire(cls, address: str | None, init_kwargs: dict[str, Any]) -> bool:
        """Connect (`connect`); True if torchwm made the connection, and this env now counts as one of its
        users."""
        cls.connect(address, init_kwargs)
        with cls.lock:
            if not cls.started:
                return False
            cls.users += 1
            return True

    @classmethod
    def release(cls, stop: bool) -> None:
        with cls.lock:
            cls.users = max(cls.users - 1, 0)
            if stop and cls.users == 0 and cls.started:
                ray.shutdown()
                cls.started, cls.address = False, None

    @classmethod
    def release_unused(cls) -> None:
        """End the connection torchwm made if no env uses it (an env that failed while starting)."""
        cls.users += 1
        cls.release(stop=True)

    @classmethod
    def stop(cls) -> None:
        with cls.lock:
            if cls.started and ray.is_initialized():
                ray.shutdown()
            cls.started, cls.address = False, None


def with_runtime_env(init_kwargs: dict[str, Any], runtime_env: Any) -> dict[str, Any]:
    """``init_kwargs`` with the ``runtime_env`` option, checked (TypeError, ValueError).

    Ray ships local code (``py_modules``, ``working_dir``: paths or module objects) only in the job's runtime
    environment, given to `ray.init`; so it applies when torchwm connects, and an env asking for another one
    once this process is connected is refused.
    """
    if runtime_env is None:
        return init_kwargs
    if not isinstance(runtime_env, dict):
        raise TypeError(
            f"runtime_env must be a dict such as {{'py_modules': [...]}}, got {runtime_env!r:.200}"
        )
    if "runtime_env" in init_kwargs:
        raise ValueError("give runtime_env once: as the runtime_env option or in init_kwargs, not both")
    if ray.is_initialized() and not (LocalRay.started and LocalRay.runtime_env == runtime_env):
        raise ValueError(
            f"ray: runtime_env={runtime_env!r:.200} applies when torchwm connects to Ray (it is the job's "
            f"runtime environment, given to ray.init), but this process is already connected with another "
            f"one; pass it to your own ray.init(runtime_env=...), or close every ray vector env and "
            f"ray.shutdown() first"
        )
    return {**init_kwargs, "runtime_env": runtime_env}


def cluster_cpus() -> int:
    """The CPUs of the cluster this process is connected to (at least 1)."""
    return max(int(ray.cluster_resources().get("CPU", 1)), 1)


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (a traceback's: the exception)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else text


def exit_with_raylet(period: float = 1.0) -> None:
    """End this actor's process when the raylet that started it is gone (its parent changes).

    Ray's worker notices a dead raylet when it next talks to it, but an actor in a compiled graph's
    loop only reads its channels: after its raylet was killed (a node lost while the machine runs on)
    it would spin on, a busy core that nothing can reach any more, since Ray counts it dead.
    """
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(1)

    threading.Thread(target=watch, name="torchwm-raylet-watch", daemon=True).start()


def one_node_ray() -> bool:
    """Whether every actor Ray places runs on this process's machine: Ray has one alive node, this driver's
    (not through Ray Client, whose driver runs on no node), and Linux gives a pidfd to watch it by."""
    if not hasattr(os, "pidfd_open") or client_connected():
        return False
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    return nodes == [ray.get_runtime_context().get_node_id()]
