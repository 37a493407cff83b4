"""The shared block of ``shmem`` (`torchwm.vector.transports.shared_block`): its layout of a space's arrays
and the signals, each on its own cache lines and none overlapping, numpy views shaped as Gymnasium batches
the space, a second mapping of the same block seeing the first's writes, and a release that unmaps it."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector.utils import batch_space
from support.processes import leaked_segments, mapped_segments

from torchwm.errors import DynamicShapeError, UnsupportedStackError
from torchwm.vector.transports.shared_block import SEGMENT_PREFIX, SharedBatch, plan_layout

DICT_SPACE = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (3, 5), np.uint8),
        "state": spaces.Tuple((spaces.Box(-1, 1, (2,), np.float64), spaces.Discrete(4))),
    }
)
ACTION_SPACE = spaces.Box(-1, 1, (2,), np.float32)


def test_every_array_has_its_own_cache_lines_and_none_overlaps():
    layout = plan_layout(DICT_SPACE, ACTION_SPACE, num_envs=3, num_workers=2)
    spans = []
    for field, path, dtype, shape, offset in layout.entries:
        assert offset % 64 == 0, (field, path)
        spans.append((offset, offset + int(np.prod(shape)) * np.dtype(dtype).itemsize))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))
    assert layout.size >= spans[-1][1] and (layout.num_envs, layout.num_workers) == (3, 2)
    assert layout.name.startswith(f"{SEGMENT_PREFIX}{os.getpid()}_")


def test_a_dict_space_is_laid_out_leaf_by_leaf_with_a_row_per_env():
    layout = plan_layout(DICT_SPACE, ACTION_SPACE, num_envs=3, num_workers=2)
    leaves = {(field, path): (dtype, shape) for field, path, dtype, shape, _ in layout.entries}
    assert leaves[("observations", ("image",))] == (np.dtype(np.uint8).str, (3, 3, 5))
    assert leaves[("observations", ("state", 0))] == (np.dtype(np.float64).str, (3, 2))
    assert leaves[("observations", ("state", 1))] == (np.dtype(np.int64).str, (3,))
    assert leaves[("actions", ())] == (np.dtype(np.float32).str, (3, 2))
    # One signal of each kind per worker, one flag per env.
    assert leaves[("doorbell", ())][1] == (2,) and leaves[("step_mask", ())][1] == (3,)


def test_the_views_are_batches_of_the_spaces_as_gymnasium_makes_them():
    batch = SharedBatch.create(DICT_SPACE, ACTION_SPACE, 3, 2)
    try:
        expected = batch_space(DICT_SPACE, 3)
        assert batch.observations["image"].shape == expected["image"].shape == (3, 3, 5)
        assert batch.observations["image"].dtype == np.uint8
        assert isinstance(batch.observations["state"], tuple)
        assert batch.observations["state"][0].shape == (3, 2) and batch.observations["state"][1].shape == (3,)
        assert batch.actions.shape == (3, 2) and batch.actions.dtype == np.float32
        assert batch.rewards.shape == (3,) and batch.terminations.dtype == np.bool_
        assert not batch.observations["image"].any()  # a new block is zeroed
    finally:
        batch.release()


def test_a_second_mapping_of_the_block_sees_the_writes_of_the_first():
    parent = SharedBatch.create(DICT_SPACE, ACTION_SPACE, 3, 2)
    # As a worker maps it: the descriptor it was sent (here a duplicate of the parent's), then attach.
    worker = SharedBatch.attach(parent.layout, os.dup(parent._fd), DICT_SPACE, ACTION_SPACE)
    try:
        parent.actions[1] = [0.5, -0.25]
        worker.observations["image"][2] = 7
        worker.rewards[0] = 1.5
        np.testing.assert_array_equal(worker.actions[1], [0.5, -0.25])
        assert (parent.observations["image"][2] == 7).all() and not parent.observations["image"][:2].any()
        assert parent.rewards.tolist() == [1.5, 0.0, 0.0]
    finally:
        worker.release()
        parent.release()


def test_a_released_block_is_unmapped_and_a_second_release_is_harmless():
    batch = SharedBatch.create(spaces.Box(0, 1, (4,), np.float32), spaces.Discrete(2), 2, 1)
    name = batch.layout.name
    assert name in mapped_segments() and leaked_segments() == []  # mapped, but no name in /dev/shm
    batch.release()
    batch.release()
    gc.collect()
    assert name not in mapped_segments()


@pytest.mark.parametrize(
    "space, error",
    [
        (spaces.Text(5), UnsupportedStackError),
        (spaces.Sequence(spaces.Discrete(2)), DynamicShapeError),
        (
            spaces.Dict({"ok": spaces.Discrete(2), "g": spaces.Graph(spaces.Discrete(2), None)}),
            DynamicShapeError,
        ),
    ],
)
def test_a_space_without_a_fixed_shape_is_refused_and_subproc_named(space, error):
    with pytest.raises(error, match="subproc"):
        plan_layout(space, spaces.Discrete(2), 2, 1)
