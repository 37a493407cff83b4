"""The options every worker-pool backend takes, checked and defaulted before anything starts.

``subproc``, ``shmem`` and plugins built on `torchwm.vector.pool.WorkerPool` share these; a backend's
`WorkerGroup` adds its own (``context``, ...), which `check_pool_options` passes on unchecked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchwm.spec import check_count, check_timeout
from torchwm.vector.stepper import check_observation_mode, checked_batch_size
from torchwm.vector.transports.contract import (
    PoolSettings,
    split_envs,
)

DEFAULT_TIMEOUT = 300.0
# Every option a pool backend takes and its default (None: decided from the machine or the spec). A
# backend's group adds its own (`WorkerGroup.OPTIONS`).
POOL_OPTIONS: dict[str, Any] = {
    "num_workers": None,
    "envs_per_worker": None,
    "batch_size": None,
    "timeout": DEFAULT_TIMEOUT,
    "copy": True,
    "restart_on_crash": False,
    "env_fn": None,
    "inline": False,
    "observation_mode": "same",
}


def check_pool_options(
    backend: str,
    num_envs: int,
    options: dict[str, Any],
    transport_options: Sequence[str] = (),
    unit: str = "worker",
) -> PoolSettings:
    """Every pool option checked and defaulted, before anything starts; the options named in
    ``transport_options`` are passed on unchecked (the backend's `WorkerGroup` checks them).

    ``unit`` is what the backend calls a worker in its option names (``"actor"``: ``num_actors``,
    ``envs_per_actor``)."""
    split_names = {"num_workers": f"num_{unit}s", "envs_per_worker": f"envs_per_{unit}"}
    known = [split_names.get(name, name) for name in POOL_OPTIONS] + list(transport_options)
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise TypeError(f"{backend}: unknown backend option(s) {unknown}; expected some of {sorted(known)}")
    num_workers, envs_per_worker = (options.get(name) for name in split_names.values())
    if num_workers is not None:
        num_workers = check_count(f"{backend}: {split_names['num_workers']}", num_workers)
    if envs_per_worker is not None:
        envs_per_worker = check_count(f"{backend}: {split_names['envs_per_worker']}", envs_per_worker)
    flags = {flag: options.get(flag, POOL_OPTIONS[flag]) for flag in ("copy", "restart_on_crash", "inline")}
    if flags["inline"] is None:  # None means the default, as it does for the options that default to None
        flags["inline"] = False
    for flag in flags:
        if not isinstance(flags[flag], bool):
            raise TypeError(
                f"{backend}: {flag} must be True or False (default {POOL_OPTIONS[flag]}), got {flags[flag]!r}"
            )
    return PoolSettings(
        worker_slices=split_envs(num_envs, num_workers, envs_per_worker, backend, unit),
        split_given=num_workers is not None or envs_per_worker is not None,
        batch_size=checked_batch_size(options.get("batch_size"), num_envs, f"{backend}: "),
        timeout=check_timeout(options.get("timeout", DEFAULT_TIMEOUT), f"{backend}: timeout"),
        env_fn=options.get("env_fn"),
        observation_mode=check_observation_mode(options.get("observation_mode", "same")),
        transport_options={key: options[key] for key in transport_options if key in options},
        **flags,
    )
