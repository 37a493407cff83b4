"""`InfoBatcher`: infos batched exactly as Gymnasium's `VectorEnv._add_info` batches them, fast path
included."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torchwm
from torchwm.vector.batching import InfoBatcher, get_row

VALUES = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False),
    st.booleans(),
    st.integers(0, 100).map(np.int32),
    st.text(max_size=3),
    st.none(),
)


def gymnasium_batch(infos):
    """The reference: Gymnasium's own loop, env by env."""
    batcher = InfoBatcher(len(infos))
    batched = {}
    for position, info in enumerate(infos):
        if info:
            batched = gym.vector.VectorEnv._add_info(batcher, batched, info, position)
    return batched


def assert_same(ours, reference):
    assert list(ours) == list(reference)  # the same keys, masks included, in the same order
    for key, value in reference.items():
        assert ours[key].dtype == value.dtype, key
        np.testing.assert_array_equal(ours[key], value, err_msg=key)  # NaN where Gymnasium has NaN


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda n: st.lists(
            st.dictionaries(st.sampled_from(["lives", "frame", "score", "flag"]), VALUES, max_size=3),
            min_size=n,
            max_size=n,
        )
    )
)
def test_any_infos_batch_like_gymnasium(infos):
    try:
        reference = gymnasium_batch(infos)
    except (
        ValueError,
        TypeError,
        OverflowError,
    ) as error:  # Gymnasium refuses some mixes ({"x": 0}, {"x": ""})
        with pytest.raises(type(error)):
            InfoBatcher(len(infos)).batch(infos)
        return
    assert_same(InfoBatcher(len(infos)).batch(infos), reference)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.lists(
            st.fixed_dictionaries(
                {
                    "lives": st.integers(0, 5),
                    "episode_frame_number": st.integers(0, 10**6),
                    "ratio": st.floats(allow_nan=False),
                    "done": st.booleans(),
                }
            ),
            min_size=n,
            max_size=n,
        )
    )
)
def test_uniform_infos_take_the_column_path_and_match_gymnasium(infos):
    batcher = InfoBatcher(len(infos))
    assert batcher._batch_uniform(infos) is not None
    assert_same(batcher.batch(infos), gymnasium_batch(infos))


def test_mixed_types_of_one_key_take_gymnasiums_path():
    infos = [{"x": 1}, {"x": 2.5}]  # Gymnasium: an int array, 2.5 cast to 2
    assert InfoBatcher(2)._batch_uniform(infos) is None
    assert InfoBatcher(2).batch(infos)["x"].tolist() == [1, 2]


@pytest.mark.parametrize(
    "infos",
    [
        [{"x": 1, "_x": 5}, {"x": 2, "_x": 6}],
        [{"_x": 5, "x": 1}, {"_x": 6, "x": 2}],
        [{"final_obs": 1}, {"final_obs": 2}],
        [{1: 5}, {True: 6}],  # one dict key for Gymnasium, but two masks: "_1" and "_True"
        [{1.0: 5}, {1.0: 6}],
        [{1: 5, "1": 6}, {1: 7, "1": 8}],  # two keys, one mask name
    ],
    ids=["x-then-_x", "_x-then-x", "final_obs", "1-then-True", "float-key", "1-and-'1'"],
)
def test_keys_that_collide_with_the_batchs_names_batch_like_gymnasium(infos):
    # Every env has the same keys of one plain type: the column path's case, but for names that Gymnasium's
    # loop treats in its own way.
    assert_same(InfoBatcher(len(infos)).batch(infos), gymnasium_batch(infos))


class NestedEnv(gym.Env):
    """Dict, Tuple and Text parts in one observation (as Minari's dummy envs); ends after 2 steps."""

    def __init__(self):
        # The env's own spaces: its observations are samples of its observation space, seeded by reset.
        self.observation_space = gym.spaces.Dict(
            {
                "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                "parts": gym.spaces.Tuple((gym.spaces.Discrete(5), gym.spaces.Text(8))),
            }
        )
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Text(4)))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), 1.0, self.t >= 2, False, {}


def test_get_row_reads_final_obs_of_nested_spaces_as_gymnasium_batches_them():
    space = NestedEnv().observation_space
    finals = {}
    for name, envs in (
        ("torchwm", torchwm.make_vec_from_fns([NestedEnv] * 2, autoreset_mode="same_step")),
        (
            "gymnasium",
            gym.vector.SyncVectorEnv([NestedEnv] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP),
        ),
    ):
        envs.reset(seed=4)
        actions = ((0, 1), ("ab", "c"))
        envs.step(actions)
        _, _, terminations, _, infos = envs.step(actions)
        assert terminations.all()
        finals[name] = [get_row(space, infos["final_obs"], i) for i in range(2)]
        assert all(space.contains(final) for final in finals[name])
        envs.close()
    # One whole observation per env, the same on both.
    for ours, theirs in zip(finals["torchwm"], finals["gymnasium"], strict=True):
        assert np.array_equal(ours["position"], theirs["position"]) and ours["parts"] == theirs["parts"]


@pytest.mark.parametrize(
    ("seeds", "dtype"),
    [
        ([2**63, None, 5], np.uint64),  # every seed fits uint64
        ([2**64 - 1, 2**64, None], object),  # one does not: an object array of ints
    ],
    ids=["uint64", "object"],
)
def test_episode_seeds_beyond_int64_come_back_whole(seeds, dtype):
    infos = [{"lives": 3} if seed is None else {"lives": 3, "episode_seed": seed} for seed in seeds]
    batched = InfoBatcher(len(infos)).batch(infos)
    assert batched["episode_seed"].dtype == dtype
    assert batched["_episode_seed"].tolist() == [seed is not None for seed in seeds]
    given = [row for row, seed in enumerate(seeds) if seed is not None]
    assert [int(batched["episode_seed"][row]) for row in given] == [seeds[row] for row in given]
    # The other keys as Gymnasium batches them.
    assert_same({k: batched[k] for k in ("lives", "_lives")}, gymnasium_batch([{"lives": 3}] * len(seeds)))


def test_an_envs_own_int_beyond_int64_is_refused_as_gymnasium_refuses_it():
    infos = [{"episode_seed": 2**63, "count": 2**63}, {"episode_seed": 1, "count": 1}]
    with pytest.raises(OverflowError):
        gymnasium_batch([{"count": 2**63}, {"count": 1}])
    with pytest.raises(OverflowError):
        InfoBatcher(2).batch(infos)


@pytest.mark.parametrize("seed", [2**63 - 1, 2**64 - 1])
def test_a_seeded_reset_beyond_int64_reports_every_seed(seed):
    # Env 1's seed is seed + 1, past int64 (or uint64); each replays its episode in gym.make.
    with torchwm.make_vec("CartPole-v1", 2, autoreset_seeds=True) as envs:
        obs, infos = envs.reset(seed=seed)
    assert [int(value) for value in infos["episode_seed"]] == [seed, seed + 1]
    for i in range(2):
        first, _ = gym.make("CartPole-v1").reset(seed=int(infos["episode_seed"][i]))
        np.testing.assert_array_equal(first, obs[i])
