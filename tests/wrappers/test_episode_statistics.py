"""`episode_statistics`: Gymnasium's RecordEpisodeStatistics numbers, on every backend and autoreset mode,
recorded on the env the source makes (whole Atari games, raw rewards), also by the fused Atari env.

The reference is Gymnasium's own chain with `RecordEpisodeStatistics` at the bottom, in Gymnasium's
`SyncVectorEnv`: the same seeds and actions must give the same returns, lengths and masks.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import AtariPreprocessing, ClipReward, FrameStackObservation, RecordEpisodeStatistics

import torchwm
from torchwm.errors import UnsupportedStackError
from torchwm.factory import resolve_spec
from torchwm.spec import AUTORESET_MODES
from torchwm.wrappers.atari_fused import FusedAtariEnv
from torchwm.wrappers.episodic_life import EpisodicLifeEnv

MODES = ["next_step", "same_step", "disabled"]


def episodes(envs, actions, mode="next_step"):
    """(step, env, r, l) of every episode the infos report, and the per-key masks, over ``actions``."""
    found, masks = [], []
    envs.reset(seed=7)
    for t, action in enumerate(actions):
        _, _, terminated, truncated, infos = envs.step(action)
        where = "final_info" if "final_info" in infos else None
        source = infos[where] if where else infos
        if "episode" in source:
            mask = source["_episode"]
            masks.append((t, mask.tolist()))
            for i in np.flatnonzero(mask):
                found.append((t, int(i), float(source["episode"]["r"][i]), int(source["episode"]["l"][i])))
                assert source["episode"]["t"][i] >= 0
        if mode == "disabled":
            ended = terminated | truncated
            if ended.any():
                envs.reset(options={"reset_mask": ended})
    return found, masks


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_cartpole_equals_gymnasiums_chain(backend, mode):
    n, rng = 3, np.random.default_rng(0)
    actions = [rng.integers(0, 2, size=n) for _ in range(120)]
    reference = gym.vector.SyncVectorEnv(
        [lambda: RecordEpisodeStatistics(gym.make("CartPole-v1"))] * n, autoreset_mode=AUTORESET_MODES[mode]
    )
    expected = episodes(reference, actions, mode)
    with torchwm.make_vec(
        "CartPole-v1", n, backend=backend, wrappers=["episode_statistics"], autoreset_mode=mode
    ) as envs:
        got = episodes(envs, actions, mode)
    assert expected[0], "no episode ended: the comparison would prove nothing"
    assert got == expected


def gymnasium_atari_chain():
    """CleanRL's construction order: RecordEpisodeStatistics right on gym.make, then the DeepMind stack."""
    env = RecordEpisodeStatistics(gym.make("ALE/Breakout-v5", frameskip=1))
    env = AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    env = EpisodicLifeEnv(env)
    env = ClipReward(env, -1.0, 1.0)
    return FrameStackObservation(env, 4, padding_type="zero")


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "chain"])
def test_atari_records_whole_games_on_raw_rewards(fused):
    n, rng = 2, np.random.default_rng(3)
    actions = [rng.integers(0, 4, size=n) for _ in range(700)]
    reference = gym.vector.SyncVectorEnv([gymnasium_atari_chain] * n)
    expected = episodes(reference, actions)
    # Written last, as a user might: it still records on the AtariEnv.
    stack = ["atari_preprocessing", "episodic_life", "clip_reward", "frame_stack", "episode_statistics"]
    with torchwm.make_vec("ALE/Breakout-v5", n, backend="sync", wrappers=stack, fused=fused) as envs:
        assert isinstance(envs.envs[0], FusedAtariEnv) is fused
        got = episodes(envs, actions)
    games = expected[0]
    assert games, "no game ended: the comparison would prove nothing"
    assert got == expected
    # Whole games: five lives of Breakout take far more frames than one life's episode.
    assert all(length > 400 for (_, _, _, length) in games), games


def test_it_is_placed_on_the_env_itself_and_only_once():
    spec = resolve_spec("ALE/Pong-v5", wrappers=["atari_preprocessing", "frame_stack", "episode_statistics"])
    assert [w.name for w in spec.wrappers] == ["episode_statistics", "atari_preprocessing", "frame_stack"]
    assert spec.fused
    with pytest.raises(ValueError, match="episode_statistics appears 2 times"):
        resolve_spec("CartPole-v1", wrappers=["episode_statistics", "episode_statistics"])


def test_ale_native_refuses_it_with_the_reason():
    with pytest.raises(UnsupportedStackError, match="episode_statistics: ALE's vector env reports neither"):
        torchwm.make_vec(
            "ALE/Pong-v5",
            2,
            backend="ale-native",
            wrappers=["episode_statistics", "atari_preprocessing", "frame_stack"],
        )


def test_episode_statistics_takes_gymnasiums_buffer_length():
    env = torchwm.make_env("CartPole-v1", wrappers=[{"name": "episode_statistics", "buffer_length": 3}])
    reference = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"), buffer_length=3)
    for e in (env, reference):
        e.reset(seed=0)
        e.action_space.seed(0)
        for _ in range(200):
            if any(e.step(e.action_space.sample())[2:4]):
                e.reset()
    for name in ("return_queue", "length_queue"):
        assert env.get_wrapper_attr(name) == reference.get_wrapper_attr(name)
        assert env.get_wrapper_attr(name).maxlen == 3 and len(env.get_wrapper_attr(name)) == 3
    assert env.get_wrapper_attr("episode_count") == reference.episode_count > 3
