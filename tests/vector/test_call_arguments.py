"""torchwm.vector.call_arguments: the checks of the envs and seeds a call names, with Gymnasium's
exception types and words where Gymnasium checks the same argument."""

from __future__ import annotations

import numpy as np
import pytest

from torchwm.vector import call_arguments


def test_env_ids_keep_the_callers_order_as_int64():
    ids = call_arguments.env_ids([3, 0, 2], 4)
    assert ids.dtype == np.int64
    assert ids.tolist() == [3, 0, 2]
    assert call_arguments.env_ids(np.int32(1), 4).tolist() == [1]


@pytest.mark.parametrize(
    ("value", "words"),
    [([], "non-empty"), ([0.5], "non-empty"), ([4], r"\[0, 3\]"), ([-1], r"\[0, 3\]"), ([1, 1], "repeated")],
)
def test_bad_env_ids_say_what_was_expected(value, words):
    with pytest.raises(ValueError, match=words):
        call_arguments.env_ids(value, 4)


def test_a_reset_mask_names_its_true_envs():
    assert call_arguments.reset_mask_ids(np.array([False, True, True]), 3).tolist() == [1, 2]


@pytest.mark.parametrize(
    ("mask", "error", "words"),
    [
        ([True, False], TypeError, "must be a numpy array"),
        (np.array([True]), ValueError, r"must have shape `\(2,\)`"),
        (np.array([1, 0]), TypeError, "dtype=np.bool_"),
        (np.array([False, False]), ValueError, "at least one True"),
    ],
)
def test_a_bad_reset_mask_gets_gymnasiums_type_and_words(mask, error, words):
    with pytest.raises(error, match=words):
        call_arguments.reset_mask_ids(mask, 2)


def test_an_int_seed_seeds_env_i_with_seed_plus_i():
    ids, seeds, options = call_arguments.reset_request(10, {"x": 1}, [2, 0], 3)
    assert ids.tolist() == [2, 0]
    assert seeds == [12, 10]
    assert options == {"x": 1}


def test_a_seed_list_with_a_reset_mask_has_one_seed_per_env_of_the_vector_env():
    mask = np.array([False, True, True])
    ids, seeds, options = call_arguments.reset_request([7, 8, 9], {"reset_mask": mask}, None, 3)
    assert ids.tolist() == [1, 2]
    assert seeds == [8, 9]
    assert "reset_mask" not in options  # torchwm's, not passed on to the envs


def test_a_reset_without_env_ids_resets_every_env_without_seeds():
    ids, seeds, _ = call_arguments.reset_request(None, None, None, 3)
    assert ids.tolist() == [0, 1, 2]
    assert seeds == [None, None, None]


def test_the_default_seed_stands_in_for_a_missing_seed_only():
    _, seeds, _ = call_arguments.reset_request(None, None, [1, 2], 3, default_seed=40)  # make_vec's seed
    assert seeds == [41, 42]
    _, seeds, _ = call_arguments.reset_request(7, None, [1], 3, default_seed=40)
    assert seeds == [8]


@pytest.mark.parametrize(
    ("seed", "options", "env_ids", "error", "words"),
    [
        (None, "x", None, TypeError, "options must be a dict"),
        (None, {"reset_mask": np.array([True, True])}, [0], ValueError, "not both"),
        ([1, 2, 3], None, [0, 1], ValueError, "expected 2 seeds"),
        ("1", None, None, TypeError, "seed must be an int"),
        (True, None, None, TypeError, "seed must be an int"),
        (-1, None, None, ValueError, ">= 0"),
    ],
)
def test_a_bad_reset_request_is_refused(seed, options, env_ids, error, words):
    with pytest.raises(error, match=words):
        call_arguments.reset_request(seed, options, env_ids, 2)
