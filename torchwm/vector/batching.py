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

Infos are batched as Gymnasium batches them (`InfoBatcher`). Plain numbers
that a ``shmem`` worker wrote as columns of the shared block come as `InfoRow`
objects (a row of a copied block of columns, read as a mapping), batched a
column at a time without one dict per env.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.errors import NotABatchError
from torchwm.spaces import ARRAY_SPACES as ARRAY_SPACES  # backends import it with the helpers below
from torchwm.vector.episode_seeds import EPISODE_SEED

# The plain scalar types an info batched column by column may hold (Gymnasium gives each its own dtype).
INFO_KINDS = (int, float, bool)
# (key, type) of each info column, in the order of the first env's keys.
InfoSchema = tuple[tuple[Any, type], ...]


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
    """One env's value from a batch (an action row, for example), or from an info that holds one value of
    ``space`` per env (``infos["final_obs"]``, which Gymnasium batches as an object array of whole values
    whatever the space)."""
    if isinstance(batch, np.ndarray) and batch.dtype == object:
        return batch[index]  # never a Dict or Tuple space's batch: those are a dict and a tuple
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


def check_actions(
    space: gym.Space,
    actions: Any,
    count: int,
    *,
    check_range: bool = True,
    env_ids: Sequence[int] | np.ndarray | None = None,
) -> Any:
    """Actions for ``count`` envs of single action space ``space``, as a batch; ValueError if they do not fit.

    Checked: the leading dimension, the shape of a row and the dtype kind (a scalar where a batch is
    expected raises `NotABatchError`, also a ``TypeError`` as in Gymnasium). With ``check_range``, the
    values of a discrete space too: the vector envs leave them to the env, as Gymnasium does (it checks
    no action values, and an env may take values outside its space), while ``ale-native`` checks them
    because an out-of-range action stops ALE's C++ worker. Box bounds are never checked. Float actions
    for a `Discrete` or `MultiDiscrete` space are cast to its integers when they are whole numbers.
    ``env_ids``: the env of each row, for messages.
    """
    # The spaces of one array first: Dict and Tuple are typing ABCs, whose isinstance checks cost more than
    # the rest of a small batch's check (ale-native checks every step).
    if not isinstance(space, ARRAY_SPACES):
        return _check_composite_actions(space, actions, count, check_range, env_ids)
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
    if array.dtype.kind == "f" and not isinstance(space, spaces.MultiBinary):
        array = _whole_numbers(space, array, env_ids)
    elif array.dtype.kind not in kinds:
        raise ValueError(
            f"expected integer actions for {space} (an int dtype such as int64), got dtype {array.dtype}"
        )
    if not check_range:
        return array
    low: Any
    high: Any
    if isinstance(space, spaces.Discrete):
        # Scalar bounds. A batch of a few envs is checked as Python ints: numpy's min and max cost about 2 µs
        # each on any array, the list a fraction of that (ale-native checks every step).
        low, high = int(space.start), int(space.start + space.n - 1)
        if array.size <= 256:
            values = array.tolist()
            out_of_range = bool(values) and (min(values) < low or max(values) > high)
        else:
            out_of_range = bool(array.min() < low or array.max() > high)
    else:
        if isinstance(space, spaces.MultiDiscrete):
            low, high = space.start, space.start + space.nvec - 1
        else:
            low, high = 0, 1
        out_of_range = bool(array.size and (np.any(array < low) or np.any(array > high)))
    if out_of_range:
        raise ValueError(
            f"actions out of range for {space}: expected values in [{np.min(low)}, {np.max(high)}], "
            f"got {array!r:.200}"
        )
    return array


def _check_composite_actions(
    space: gym.Space, actions: Any, count: int, check_range: bool, env_ids: Sequence[int] | np.ndarray | None
) -> Any:
    """`check_actions` for a space that is not one array: a Dict or Tuple of spaces (each checked), or any
    other space (a sequence of ``count`` actions)."""
    if isinstance(space, spaces.Dict):
        if not isinstance(actions, dict) or set(actions) != set(space.spaces):
            raise ValueError(
                f"expected a dict of batched actions with keys {sorted(space.spaces)}, got {actions!r:.200}"
            )
        return {
            key: check_actions(sub, actions[key], count, check_range=check_range, env_ids=env_ids)
            for key, sub in space.spaces.items()
        }
    if isinstance(space, spaces.Tuple):
        if not isinstance(actions, (tuple, list)) or len(actions) != len(space.spaces):
            raise ValueError(f"expected a tuple of {len(space.spaces)} batched actions, got {actions!r:.200}")
        return tuple(
            check_actions(sub, a, count, check_range=check_range, env_ids=env_ids)
            for sub, a in zip(space.spaces, actions, strict=True)
        )
    if not hasattr(actions, "__len__"):
        raise NotABatchError(
            f"expected a sequence of {count} actions of {space}, one per env, got {actions!r:.200}"
        )
    if len(actions) != count:
        raise ValueError(f"expected {count} actions, one per env, got {len(actions)}")
    return actions


def _whole_numbers(
    space: spaces.Discrete | spaces.MultiDiscrete,
    array: np.ndarray,
    env_ids: Sequence[int] | np.ndarray | None,
) -> np.ndarray:
    """Float actions for a discrete space (what Tianshou's and many policies' float outputs give) as the
    space's integers, cast exactly; a value that is not a whole number is a ValueError naming its row,
    never rounded."""
    # The bounds of the space's integers, both exact as floats (powers of two): 1e20 or 2.0**63 would cast
    # to -9223372036854775808 with only numpy's RuntimeWarning.
    limits = np.iinfo(space.dtype)
    whole = (np.floor(array) == array) & (array >= float(limits.min)) & (array < float(limits.max) + 1.0)
    if not whole.all():
        row = int(np.argwhere(~whole)[0][0])
        env = f"row {row}" if env_ids is None else f"env {int(env_ids[row])}"
        raise ValueError(
            f"expected integer actions for {space}: float actions must be whole numbers that {space.dtype} "
            f"holds (they are cast to it exactly), got {array[row]!r} for {env} (dtype {array.dtype})"
        )
    return array.astype(space.dtype)


def uniform_columns(infos: Sequence[Mapping[Any, Any]]) -> list[tuple[Any, type, list[Any]]] | None:
    """(key, type, values) of each key when every info has the same keys and each key holds plain ``int``,
    ``float`` or ``bool`` values of one type (the infos that batch column by column); else None.

    Only string keys that no other key's ``_key`` mask collides with: for the others Gymnasium's
    `_add_info` gives results that depend on the order of keys and envs (a mask written over by a
    value, ``1`` and ``True`` one dict key but two masks, ``final_obs`` its own kind of array), which
    only its own loop reproduces.
    """
    if not infos or not infos[0]:
        return None
    keys = infos[0].keys()
    for key in keys:
        if type(key) is not str or key == "final_obs" or (key[:1] == "_" and key[1:] in keys):
            return None
    if any(info.keys() != keys for info in infos):
        return None
    columns = []
    for key in keys:
        values = [info[key] for info in infos]
        kind = type(values[0])
        if kind not in INFO_KINDS or any(type(value) is not kind for value in values):
            return None
        columns.append((key, kind, values))
    return columns


def infos_to_rows(infos: dict[Any, Any], num_rows: int) -> list[dict[Any, Any]]:
    """Gymnasium's batched infos (each key's values with a ``_key`` mask) as one dict per row, as SB3's
    and Tianshou's vector envs give infos.

    The inverse of Gymnasium's ``VectorEnv._add_info``: a row gets a key where the key's mask is True
    (nested dicts likewise, with their own masks), with the value at that row. Keys need not be
    strings: a key's mask is the string ``f"_{key}"``, so ``1``'s is ``"_1"``; a key that starts with
    ``_`` and masks no other key (an env's own ``"_private"``) is a value like any other.
    """
    masks = {f"_{key}" for key in infos}
    rows: list[dict[Any, Any]] = [{} for _ in range(num_rows)]
    for key, value in infos.items():
        if key in masks:
            continue
        mask = infos.get(f"_{key}")
        values = infos_to_rows(value, num_rows) if isinstance(value, dict) else value
        for i in range(num_rows):
            if mask is None or mask[i]:
                rows[i][key] = values[i]
    return rows


class InfoRow(Mapping[Any, Any]):
    """One env's infos, held as row ``index`` of ``block``: a 2-D int64 array with one column per key of
    ``schema`` (float values stored as the bits of a float64, bools as 0 or 1).

    Read as a mapping it gives the values as the env gave them (Python ``int``, ``float``, ``bool``);
    `InfoBatcher` batches a list of them without building one dict per env.
    """

    __slots__ = ("block", "index", "schema")

    def __init__(self, schema: InfoSchema, block: np.ndarray, index: int) -> None:
        self.schema = schema
        self.block = block
        self.index = index

    def _value(self, column: int, kind: type) -> Any:
        cell = self.block[self.index, column]
        return float(cell.view(np.float64)) if kind is float else kind(cell)

    def __getitem__(self, key: Any) -> Any:
        for column, (name, kind) in enumerate(self.schema):
            if name == key:
                return self._value(column, kind)
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return (name for name, _ in self.schema)

    def __len__(self) -> int:
        return len(self.schema)

    def as_dict(self) -> dict[Any, Any]:
        return {name: self._value(column, kind) for column, (name, kind) in enumerate(self.schema)}

    def __repr__(self) -> str:
        return f"InfoRow({self.as_dict()!r})"


def info_rows(schema: InfoSchema, block: np.ndarray) -> list[InfoRow]:
    """An `InfoRow` for each row of ``block`` (which the rows keep: pass a copy of shared memory)."""
    return [InfoRow(schema, block, index) for index in range(len(block))]


class InfoBatcher:
    """Gymnasium's own info batching (`VectorEnv._add_info`) for a batch of any length.

    Borrowed rather than rewritten so that infos have exactly Gymnasium's keys,
    ``_key`` masks and dtypes, also for partial batches (``env_ids``, ``batch_size``).
    One case is batched column by column instead, with the same result: every
    env has the same keys, each holding plain ``int``, ``float`` or ``bool`` values
    of one type (Atari's ``lives`` and frame counters, on every step), where
    Gymnasium's env-by-env loop is a large share of a cheap env's step; and
    a list of `InfoRow` of one schema, each key's array taken from the rows'
    blocks with one index. A list that mixes `InfoRow` with other infos is
    batched as dicts (`InfoRow.as_dict`).
    """

    _add_info = gym.vector.VectorEnv._add_info  # type: ignore[assignment]  # only reads self.num_envs

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs

    def batch(self, infos: Sequence[Mapping[Any, Any]]) -> dict[str, Any]:
        try:
            return self._batch(infos)
        except OverflowError:
            # An int beyond int64 is refused, as Gymnasium refuses it, unless it is an episode seed: seeds
            # are any ints >= 0, and one of 2**63 or more must reach the caller whole.
            if not any(EPISODE_SEED in info for info in infos):
                raise
            return self._batch_with_big_seeds(infos)

    def _batch_with_big_seeds(self, infos: Sequence[Mapping[Any, Any]]) -> dict[str, Any]:
        """`batch` for infos whose episode seeds do not fit Gymnasium's int64 column: the other keys as
        `batch` gives them, the seeds as uint64 where every one fits, else as an object array of ints (the
        rows without a seed 0 or None, as Gymnasium fills them), with their mask."""
        rest = [{key: value for key, value in info.items() if key != EPISODE_SEED} for info in infos]
        batched = self._batch(rest)
        rows = [row for row, info in enumerate(infos) if EPISODE_SEED in info]
        seeds = [int(infos[row][EPISODE_SEED]) for row in rows]
        largest = max(seeds)
        column: np.ndarray
        if largest < 2**63:  # the overflow was another key's
            column = np.zeros(self.num_envs, np.int64)
        elif largest < 2**64:
            column = np.zeros(self.num_envs, np.uint64)
        else:
            column = np.full(self.num_envs, None, dtype=object)
        mask = np.zeros(self.num_envs, dtype=np.bool_)
        for row, seed in zip(rows, seeds, strict=True):
            column[row] = seed
            mask[row] = True
        batched[EPISODE_SEED], batched[f"_{EPISODE_SEED}"] = column, mask
        return batched

    def _batch(self, infos: Sequence[Mapping[Any, Any]]) -> dict[str, Any]:
        if infos and type(infos[0]) is InfoRow:
            columns = self._batch_rows(infos)
            if columns is not None:
                return columns
        if any(type(info) is InfoRow for info in infos):
            infos = [info.as_dict() if isinstance(info, InfoRow) else info for info in infos]
        uniform = self._batch_uniform(infos)
        if uniform is not None:
            return uniform
        batched: dict[str, Any] = {}
        for position, info in enumerate(infos):
            if info:
                batched = self._add_info(batched, info, position)  # type: ignore[misc, arg-type]
        return batched

    def _batch_uniform(self, infos: Sequence[Mapping[Any, Any]]) -> dict[str, Any] | None:
        """`_add_info`'s result for infos with one key set and one plain scalar type per key, else None."""
        if len(infos) != self.num_envs:
            return None
        columns = uniform_columns(infos)
        if columns is None:
            return None
        batched: dict[str, Any] = {}
        for key, kind, values in columns:
            # Gymnasium: np.zeros(num_envs, dtype=type(first value)), filled env by env, and a mask.
            batched[key] = np.array(values, dtype=kind)
            batched[f"_{key}"] = np.ones(self.num_envs, dtype=np.bool_)
        return batched

    def _batch_rows(self, infos: Sequence[Mapping[Any, Any]]) -> dict[str, Any] | None:
        """`_add_info`'s result for a list of `InfoRow` of one schema (rows of any blocks), else None."""
        if len(infos) != self.num_envs:
            return None
        schema = infos[0].schema  # type: ignore[attr-defined]  # an InfoRow: the caller checked
        starts: dict[int, int] = {}  # id of a block -> where its rows begin in the blocks put together
        blocks: list[np.ndarray] = []
        total = 0
        index = []
        for row in infos:
            if type(row) is not InfoRow or (row.schema is not schema and row.schema != schema):
                return None
            start = starts.get(id(row.block))
            if start is None:
                start = starts[id(row.block)] = total
                blocks.append(row.block)
                total += len(row.block)
            index.append(start + row.index)
        table = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        rows = np.asarray(index)
        batched: dict[str, Any] = {}
        for column, (key, kind) in enumerate(schema):
            values = table[rows, column]
            if kind is float:
                batched[key] = values.view(np.float64)
            else:
                batched[key] = values.astype(kind, copy=False)
            batched[f"_{key}"] = np.ones(self.num_envs, dtype=np.bool_)
        return batched
