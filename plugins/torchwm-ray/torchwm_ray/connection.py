"""The Ray instance the ``ray`` backend connects to, started and stopped once per process.

A process connects to one Ray at a time. `LocalRay` counts the ray vector envs using the
Ray that torchwm started, so that it stops with the last of them (``stop_ray_on_close``) or
at exit, and never stops a Ray that someone else started or connected to.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any

import ray


class LocalRay:
    """The local Ray instance torchwm started, shared by the ray envs of this process.

    It stops when the last env using it closes (``stop_ray_on_close=True``) or when the
    process exits. A Ray that someone else started or connected to is never stopped.
    """

    lock = threading.Lock()
    users = 0
    started = False

    @classmethod
    def acquire(cls, address: str | None, init_kwargs: dict[str, Any]) -> bool:
        """Connect to Ray (start it locally if ``address`` is None); True if torchwm owns it."""
        with cls.lock:
            if ray.is_initialized():
                if not cls.started:
                    return False
            else:
                kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                          "configure_logging": False}
                if address is None:
                    kwargs["num_cpus"] = os.cpu_count() or 1
                else:
                    kwargs["address"] = address
                kwargs.update(init_kwargs)
                ray.init(**kwargs)
                cls.started = True
                atexit.register(cls.stop)
            cls.users += 1
            return True

    @classmethod
    def release(cls, stop: bool) -> None:
        with cls.lock:
            cls.users = max(cls.users - 1, 0)
            if stop and cls.users == 0 and cls.started:
                ray.shutdown()
                cls.started = False

    @classmethod
    def stop(cls) -> None:
        with cls.lock:
            if cls.started and ray.is_initialized():
                ray.shutdown()
            cls.started = False

