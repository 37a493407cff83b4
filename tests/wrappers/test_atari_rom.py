"""`RomOnceAtariEnv`: an AtariEnv whose ROM is loaded once, at its first reset, and whose emulator is the
one ALE's own `AtariEnv` gives for the same seed and actions."""

from __future__ import annotations

import numpy as np
import pytest
from ale_py.env import AtariEnv

import torchwm
from torchwm.env_state import clone_env_state
from torchwm.wrappers.atari_rom import make_atari_env

KWARGS = {"game": "breakout", "frameskip": 1, "repeat_action_probability": 0.25}


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The game of each ROM load, in order."""
    seen: list[str] = []
    load_game = AtariEnv.load_game

    def counted(env: AtariEnv) -> None:
        seen.append(env._game)
        load_game(env)

    monkeypatch.setattr(AtariEnv, "load_game", counted)
    return seen


def _rollout(env: AtariEnv, seed: int | None) -> list[np.ndarray]:
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    actions = np.random.default_rng(0).integers(0, env.action_space.n, size=60)
    for action in actions:  # sticky actions (0.25) draw from the emulator's generator each frame
        obs, *_ = env.step(int(action))
        frames.append(obs)
    return frames


def test_a_later_env_of_a_game_loads_its_rom_once_at_a_seeded_reset(loads: list[str]) -> None:
    make_atari_env(**KWARGS).close()  # this process has built the game
    loads.clear()
    envs = [make_atari_env(**KWARGS) for _ in range(3)]
    assert loads == [] and all(env.rom_pending for env in envs)
    for seed, env in enumerate(envs):
        env.reset(seed=seed)
    assert loads == ["breakout"] * 3
    assert not any(env.rom_pending for env in envs)


def test_a_seeded_reset_gives_ales_own_envs_frames_and_infos() -> None:
    make_atari_env(**KWARGS).close()
    once, plain = make_atari_env(**KWARGS), AtariEnv(**KWARGS)
    assert once.rom_pending and once.action_space == plain.action_space
    assert once.observation_space == plain.observation_space
    assert once.reset(seed=5)[1] == plain.reset(seed=5)[1]
    for ours, theirs in zip(_rollout(once, 5), _rollout(plain, 5), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_an_unseeded_reset_loads_with_the_seed_the_constructor_drew(loads: list[str]) -> None:
    make_atari_env(**KWARGS).close()
    loads.clear()
    env = make_atari_env(**KWARGS)
    drawn = env.ale.getInt("random_seed")
    env.reset()
    assert loads == ["breakout"] and env.ale.getInt("random_seed") == drawn
    assert env.ale.lives() == 5  # a loaded Breakout


def test_a_call_that_needs_the_emulator_before_the_first_reset_loads_the_rom_first(
    loads: list[str],
) -> None:
    make_atari_env(**KWARGS).close()
    loads.clear()
    env = make_atari_env(**KWARGS, render_mode="rgb_array")
    assert env.render().shape == (210, 160, 3)  # an unloaded ALE would end the process here
    env.restore_state(env.clone_state())
    env.step(0)
    assert loads == ["breakout"]


def test_the_fused_env_reads_of_the_emulator_before_its_first_reset_load_the_rom() -> None:
    torchwm.make_env("ALE/Breakout-v5").close()
    fused = torchwm.make_env("ALE/Breakout-v5")
    assert type(fused).__name__ == "FusedAtariEnv" and fused._core.atari_env.rom_pending
    assert fused.ale.lives() == 5
    other = torchwm.make_env("ALE/Breakout-v5")
    state = clone_env_state(other)
    assert not other._core.atari_env.rom_pending and state is not None
