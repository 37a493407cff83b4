"""torchwm.vector.transports.shared_memory_worker: the worker's end of ``shmem``, here its writing of a
step's infos into the block's columns (read back by the parent as `torchwm.vector.batching.info_rows`)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np

from torchwm.vector.batching import info_rows
from torchwm.vector.transports.shared_memory_worker import StepStatus, _column_writer


def block(num_envs: int = 4, columns: int = 8, schema_bytes: int = 256) -> SimpleNamespace:
    """The parts of a `SharedBatch` the column writer uses, one worker."""
    return SimpleNamespace(
        info_columns=np.zeros((num_envs, columns), dtype=np.int64),
        info_schema=np.zeros((1, schema_bytes), dtype=np.uint8),
        info_schema_length=np.zeros(1, dtype=np.int64),
        info_schema_seq=np.zeros(1, dtype=np.int64),
    )


def read_back(shared: SimpleNamespace, count: int) -> list[dict]:
    schema = pickle.loads(shared.info_schema[0, : shared.info_schema_length[0]].tobytes())
    return [row.as_dict() for row in info_rows(schema, shared.info_columns[:count].copy())]


def test_plain_numbers_come_back_as_the_env_gave_them():
    shared = block()
    write = _column_writer(shared, 0, slice(0, 2))
    infos = [{"lives": 3, "ratio": 0.25, "done": False}, {"lives": 2, "ratio": -1.5, "done": True}]
    assert write(infos)
    assert read_back(shared, 2) == infos
    assert [type(v) for v in read_back(shared, 2)[0].values()] == [int, float, bool]


def test_the_keys_are_written_once_per_change():
    shared = block()
    write = _column_writer(shared, 0, slice(0, 1))
    for lives in range(3):
        assert write([{"lives": lives}])
    assert shared.info_schema_seq[0] == 1
    assert write([{"lives": 1, "frame": 7}])
    assert shared.info_schema_seq[0] == 2
    assert read_back(shared, 1) == [{"lives": 1, "frame": 7}]


def test_infos_that_are_not_plain_numbers_of_one_key_set_are_refused():
    shared = block()
    write = _column_writer(shared, 0, slice(0, 2))
    assert not write([{"a": 1}, {"b": 1}])  # two key sets
    assert not write([{"a": {"nested": 1}}, {"a": {"nested": 2}}])
    assert not write([{"a": 2**70}, {"a": 1}])  # beyond int64: pickled, so the parent fails as Gymnasium
    assert shared.info_schema_seq[0] == 0


def test_the_statuses_a_worker_writes_are_distinct():
    assert len({int(status) for status in StepStatus}) == len(StepStatus)
