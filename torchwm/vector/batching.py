"""Rows of batched spaces: make a batch, write one env's value, take some envs' rows, check actions.

Gymnasium batches a space into arrays with a leading env dimension (a dict of
arrays for a Dict space, a tuple for a Tuple space), and the spaces that have
no fixed shape (Text, Graph, Sequence, OneOf, any other `gymnasium.Space`)
into a tuple of one value per env (`gymnasium.vector.utils.concatenate`).
Backends keep one such batch for all envs and fill it row by row, so these
helpers work on any space, with a fast path for the plain array spaces that
nearly every env uses. A batch of a space without fixed shape is held as a
NumPy object array (one slot per env, so that a worker's rows are a view of
it like any array's) and returned as Gymnasium's tuple.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.errors import NotABatchError

ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def create_batch(space: gym.Space, n: int) -> Any:
    """A zeroed batch of ``n`` rows of ``space``: Gymnasium's `create_empty_array`, with an object array
    (filled with None until written) where Gymnasium has a tuple of values."""
    if isinstance(space, spaces.Dict):
        return {key: create_batch(sub, n) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(create_batch(sub, n) for sub in space.spaces)
    if isinstance(space, ARRAY_SPACES):
        return np.zeros((n, *(space.shape or ())), dtype=space.dtype)
    return np.full(n, None, dtype=object)


def put_rows(space: gym.Space, batch: Any, index: Any, value: Any) -> None:
    """``batch[index] = value`` for a batch of ``space``; ``index`` is a row, a slice or an array of rows."""
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            put_rows(sub, batch[key], index, value[key])
    elif isinstance(space, spaces.Tuple):
        for sub, sub_batch, sub_value in zip(space.spaces, batch, value, strict=True):
            put_rows(sub, sub_batch, index, sub_value)
    elif isinstance(space, ARRAY_SPACES) or isinstance(index, (int, np.integer)):
        batch[index] = value  # one row of an object array takes the value as it is
    else:
        # Several rows of an object array: one value each (NumPy would read a tuple value as an array).
        for row, row_value in zip(np.arange(len(batch))[index], value, strict=True):
            batch[row] = row_value


def get_row(space: gym.Space, batch: Any, index: int) -> Any:
    """One env's value from a batch (an action row, for example)."""
    if isinstance(space, spaces.Dict):
        return {key: get_row(sub, batch[key], index) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(get_row(sub, b, index) for sub, b in zip(space.spaces, batch, strict=True))
    return batch[index]


def take_rows(space: gym.Space, batch: Any, ids: np.ndarray | None) -> Any:
    """A copy of the rows ``ids`` (all rows when ``ids`` is None); a tuple of values for a space
    without fixed shape, deep-copied as Gymnasium's ``copy=True`` does."""
    if isinstance(space, spaces.Dict):
        return {key: take_rows(sub, batch[key], ids) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(take_rows(sub, b, ids) for sub, b in zip(space.spaces, batch, strict=True))
    if not isinstance(space, ARRAY_SPACES):
        rows = batch if ids is None else [batch[i] for i in np.asarray(ids).tolist()]
        return copy.deepcopy(tuple(rows))
    if ids is None:
        return batch.copy()
    return batch[ids]


def view_rows(space: gym.Space, batch: Any, ids: np.ndarray | None) -> Any:
    """Like `take_rows` but without a copy where one can be avoided (all rows of an array batch)."""
    if ids is not None:
        return take_rows(space, batch, ids)
    if isinstance(space, spaces.Dict):
        return {key: view_rows(sub, batch[key], None) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(view_rows(sub, b, None) for sub, b in zip(space.spaces, batch, strict=True))
    return batch if isinstance(space, ARRAY_SPACES) else tuple(batch)


def slice_rows(space: gym.Space, batch: Any, start: int, stop: int) -> Any:
    """A view of rows ``start:stop`` (the rows one worker owns)."""
    if isinstance(space, spaces.Dict):
        return {key: slice_rows(sub, batch[key], start, stop) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(slice_rows(sub, b, start, stop) for sub, b in zip(space.spaces, batch, strict=True))
    return batch[start:stop]


def check_actions(space: gym.Space, actions: Any, count: int, *, check_range: bool = True) -> Any:
    """Actions for ``count`` envs of single action space ``space``, as a batch; ValueError if they do not fit.

    Checked: the leading dimension, the shape of a row and the dtype kind (a scalar where a batch is
    expected raises `NotABatchError`, also a ``TypeError`` as in Gymnasium). With ``check_range``, the
    values of a discrete space too: the vector envs leave them to the env, as Gymnasium does (it checks
    no action values, and an env may take values outside its space), while ``ale-native`` checks them
    because an out-of-range action stops ALE's C++ worker. Box bounds are never checked.
    """
    if isinstance(space, spaces.Dict):
        if not isinstance(actions, dict) or set(actions) != set(space.spaces):
            raise ValueError(
                f"expected a dict of batched actions with keys {sorted(space.spaces)}, got {actions!r:.200}"
            )
        return {
            key: check_actions(sub, actions[key], count, check_range=check_range)
            for key, sub in space.spaces.items()
        }
    if isinstance(space, spaces.Tuple):
        if not isinstance(actions, (tuple, list)) or len(actions) != len(space.spaces):
            raise ValueError(f"expected a tuple of {len(space.spaces)} batched actions, got {actions!r:.200}")
        return tuple(
            check_actions(sub, a, count, check_range=check_range)
            for sub, a in zip(space.spaces, actions, strict=True)
        )
    if not isinstance(space, ARRAY_SPACES):
        if not hasattr(actions, "__len__"):
            raise NotABatchError(
                f"expected a sequence of {count} actions of {space}, one per env, got {actions!r:.200}"
            )
        if len(actions) != count:
            raise ValueError(f"expected {count} actions, one per env, got {len(actions)}")
        return actions

    array = np.asarray(actions)
    expected = (count, *(space.shape or ()))
    if array.shape != expected:
        error = NotABatchError if array.ndim == 0 else ValueError
        raise error(f"expected actions of shape {expected} ({count} envs x {space}), got shape {array.shape}")
    if isinstance(space, spaces.Box):
        if array.dtype.kind not in "biuf":
            raise ValueError(f"expected numeric actions for {space}, got dtype {array.dtype}")
        return array
    # As Gymnasium's `contains`: a Discrete space holds integers only (NumPy bools are not; a bool
    # batch would reach each env as np.bool_), while MultiDiscrete and MultiBinary take bool arrays.
    kinds = "iu" if isinstance(space, spaces.Discrete) else "biu"
    if array.dtype.kind not in kinds:
        raise ValueError(
            f"expected integer actions for {space} (an int dtype such as int64), got dtype {array.dtype}"
        )
    if not check_range:
        return array
    if isinstance(space, spaces.Discrete):
        low, high = space.start, space.start + space.n - 1
    elif isinstance(space, spaces.MultiDiscrete):
        low, high = space.start, space.start + space.nvec - 1
    else:
        low, high = 0, 1
    if array.size and (np.any(array < low) or np.any(array > high)):
        raise ValueError(
            f"actions out of range for {space}: expected values in [{np.min(low)}, {np.max(high)}], "
            f"got {array!r:.200}"
        )
    return array


class InfoBatcher:
    """Gymnasium's own info batching (`VectorEnv._add_info`) for a batch of any length.

    Borrowed rather than rewritten so that infos have exactly Gymnasium's keys,
    ``_key`` masks and dtypes, also for partial batches (``env_ids``, ``batch_size``).
    One case is batched column by column instead, with the same result: every
    env has the same keys, each holding plain ``int``, ``float`` or ``bool`` values
    of one type (Atari's ``lives`` and frame counters, on every step), where
    Gymnasium's env-by-env loop is a large share of a cheap env's step.
    """

    _add_info = gym.vector.VectorEnv._add_info  # type: ignore[assignment]  # only reads self.num_envs

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def batch(self, infos: list[dict[str, Any]]) -> dict[str, Any]:
        uniform = self._batch_uniform(infos)
        if uniform is not None:
            return uniform
        batched: dict[str, Any] = {}
        for position, info in enumerate(infos):
            if info:
                batched = self._add_info(batched, info, position)  # type: ignore[misc]
        return batched

    def _batch_uniform(self, infos: list[dict[str, Any]]) -> dict[str, Any] | None:
        """`_add_info`'s result for infos with one key set and one plain scalar type per key, else None."""
        if len(infos) != self.num_envs or not infos[0]:
            return None
        keys = infos[0].keys()
        if any(info.keys() != keys for info in infos):
            return None
        batched: dict[str, Any] = {}
        for key in keys:
            values = [info[key] for info in infos]
            kind = type(values[0])
            if kind not in (int, float, bool) or any(type(value) is not kind for value in values):
                return None
            # Gymnasium: np.zeros(num_envs, dtype=type(first value)), filled env by env, and a mask.
            batched[key] = np.array(values, dtype=kind)
            batched[f"_{key}"] = np.ones(self.num_envs, dtype=np.bool_)
        return batched
