"""The checks of the envs and seeds a vector env's call names: ``env_ids``, ``options['reset_mask']``
and ``seed``, with Gymnasium's exception types and words where Gymnasium checks the same argument.

`torchwm.vector.base.VectorEnv` checks every argument here before anything reaches a backend, so that a
refused call changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchwm.spec import check_seed


def env_ids(value: Any, num_envs: int) -> np.ndarray:
    """``env_ids`` (an index or a list of distinct ones in ``[0, num_envs)``) as an int64 array."""
    ids = np.asarray([value] if np.isscalar(value) else value)
    if ids.ndim != 1 or ids.size == 0 or ids.dtype.kind not in "iu":
        raise ValueError(f"env_ids must be a non-empty list of env indices, got {value!r}")
    if ids.min() < 0 or ids.max() >= num_envs:
        raise ValueError(f"env_ids must be in [0, {num_envs - 1}], got {ids.tolist()}")
    if np.unique(ids).size != ids.size:
        raise ValueError(f"env_ids has repeated indices: {ids.tolist()}")
    return ids.astype(np.int64)


def reset_mask_ids(mask: Any, num_envs: int) -> np.ndarray:
    """The envs ``options['reset_mask']`` names."""
    # Gymnasium's Sync/AsyncVectorEnv's exception type and words for each mistake.
    n = num_envs
    expected = f"expected a NumPy bool array with one entry per env, shape ({n},)"
    if not isinstance(mask, np.ndarray):
        raise TypeError(
            f"`options['reset_mask']` must be a numpy array, got {type(mask)}: {expected}, got {mask!r:.200}"
        )
    if mask.shape != (n,):
        raise ValueError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}: {expected}")
    if mask.dtype != np.bool_:
        raise TypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}: {expected}")
    if not mask.any():
        raise ValueError(
            f"`options['reset_mask']` must contain a boolean array with at least one True value, "
            f"got reset_mask={mask}"
        )
    return np.flatnonzero(mask)


def reset_request(
    seed: Any, options: Any, ids_given: Any, num_envs: int, default_seed: Any = None
) -> tuple[np.ndarray, list[int | None], dict | None]:
    """The envs a reset resets (``env_ids``, or ``options['reset_mask']``, or all), their seeds and the
    options the envs get (without ``reset_mask``). ``default_seed``: the seed when ``seed`` is None
    (``make_vec(seed=...)``'s, for a vector env's first reset)."""
    if seed is None:
        seed = default_seed
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict or None, got {options!r:.200} ({type(options).__name__})")
    options = dict(options) if options else None
    mask = options.pop("reset_mask", None) if options else None
    if mask is not None:
        if ids_given is not None:
            raise ValueError("give env_ids or options['reset_mask'], not both")
        ids = reset_mask_ids(mask, num_envs)
    elif ids_given is None:
        ids = np.arange(num_envs, dtype=np.int64)
    else:
        ids = env_ids(ids_given, num_envs)
    return ids, seeds(seed, ids, num_envs, full_list=mask is not None), options


def seeds(seed: Any, ids: np.ndarray, num_envs: int, full_list: bool) -> list[int | None]:
    """One seed per env of ``ids`` (Python ints, as Gymnasium's seeding wants), every one checked: ``seed``
    is None, an int (env ``i`` gets ``seed + i``), or a list with one per env reset (``full_list``: one per
    env of the vector env, as with ``reset_mask``)."""
    if seed is None:
        return [None] * ids.size
    if isinstance(seed, np.ndarray) and seed.ndim == 1:
        seed = seed.tolist()
    if isinstance(seed, (list, tuple)):
        expected = num_envs if full_list else ids.size
        if len(seed) != expected:
            raise ValueError(f"expected {expected} seeds, one per env reset, got {len(seed)}: {seed!r:.200}")
        chosen = [seed[int(i)] for i in ids] if full_list else list(seed)
        return [None if s is None else check_seed(s, "each seed of a list") for s in chosen]
    if isinstance(seed, (bool, str, bytes)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int >= 0, a list of them (one per env) or None, got {seed!r:.200}")
    first = check_seed(seed)
    return [first + int(i) for i in ids]
