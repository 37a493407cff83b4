"""The recipes of docs/training.md run, and log the episodes the reference construction logs.

Each recipe runs as written (its ``make_vec`` wrapped in a recorder of seeds and actions); then:

- CleanRL: the recorded actions, played through CleanRL's own construction of the same game
  (``gym.make``, ``RecordEpisodeStatistics``, SB3's Atari wrappers) with the same seeds, give the same
  whole-game returns the recipe logged from the fused env on ``shmem``;
- Stable-Baselines3: PPO with the recipe's settings logs the same returns on SB3's ``DummyVecEnv``;
- skrl: every episode skrl counted is 200 steps (Pendulum's time limit: ``same_step``), and its
  returns are those of Gymnasium's chain for the recorded actions.
"""

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import (
    FrameStackObservation,
    GrayscaleObservation,
    RecordEpisodeStatistics,
    ResizeObservation,
)

import torchwm

pytest.importorskip("stable_baselines3")  # an optional extra; the [test] extra installs it
skrl = pytest.importorskip("skrl")
# skrl's logger keeps the stream it first wrote to, which pytest's capture closes: its info lines off.
skrl.logger.setLevel("WARNING")


def recipes() -> dict[str, str]:
    """The first Python block of each section of docs/training.md, by the section heading's first word
    (``cleanrl``, ``stable-baselines3``, ``skrl``, ...); the other libraries' sections are tested in
    their own test modules."""
    text = (Path(__file__).parent.parent / "docs" / "training.md").read_text()
    found = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        block = re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
        if block:
            found[re.match(r"[\w-]+", section).group(0).lower()] = block.group(1)
    return found


RECIPES = recipes()


class Recorder(gym.vector.VectorWrapper):
    """The seeds of each reset and the actions of each step, as the learner gave them."""

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.seeds: list = []
        self.actions: list[np.ndarray] = []

    def reset(self, *, seed=None, options=None):
        assert not self.actions, "the replays below assume one reset, before the first step"
        self.seeds.append(seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, actions):
        self.actions.append(np.array(actions, copy=True))
        return self.env.step(actions)


def run(recipe: str, monkeypatch, tmp_path) -> tuple[dict, list[Recorder]]:
    recorders: list[Recorder] = []
    make_vec = torchwm.make_vec

    def recording_make_vec(*args, **kwargs):
        recorders.append(Recorder(make_vec(*args, **kwargs)))
        return recorders[-1]

    monkeypatch.setattr(torchwm, "make_vec", recording_make_vec)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(RECIPES[recipe], f"docs/training.md ({recipe})", "exec"), namespace)
    return namespace, recorders


def replay_returns(make_env, num_envs: int, seed, actions) -> list[tuple[int, float, int]]:
    """(step, return, length) of each episode ``RecordEpisodeStatistics`` reports, in a same_step
    SyncVectorEnv."""
    envs = gym.vector.SyncVectorEnv([make_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=seed)
    found = []
    for t, action in enumerate(actions):
        infos = envs.step(action)[4]
        final = infos.get("final_info", {})
        if "episode" in final:
            found += [
                (t, float(final["episode"]["r"][i]), int(final["episode"]["l"][i]))
                for i in np.flatnonzero(final["_episode"])
            ]
    envs.close()
    return found


def cleanrl_atari_env(env_id: str) -> gym.Env:
    """CleanRL's ppo_atari.py make_env (its gymnasium-1.x construction)."""
    from stable_baselines3.common.atari_wrappers import (
        ClipRewardEnv,
        EpisodicLifeEnv,
        FireResetEnv,
        MaxAndSkipEnv,
        NoopResetEnv,
    )

    env = RecordEpisodeStatistics(gym.make(env_id))
    env = NoopResetEnv(env, noop_max=30)
    env = MaxAndSkipEnv(env, skip=4)
    env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    env = ClipRewardEnv(env)
    env = ResizeObservation(env, (84, 84))
    env = GrayscaleObservation(env)
    return FrameStackObservation(env, 4)


def test_cleanrl_recipe_logs_the_whole_games_cleanrls_construction_logs(monkeypatch, tmp_path):
    namespace, (recorder,) = run("cleanrl", monkeypatch, tmp_path)
    assert recorder.env.spec.fused and recorder.env.spec.backend == "shmem"
    expected = replay_returns(
        lambda: cleanrl_atari_env(namespace["ENV_ID"]),
        namespace["NUM_ENVS"],
        recorder.seeds[0],
        recorder.actions,
    )
    assert expected, "no game ended: the comparison would prove nothing"
    assert namespace["game_returns"] == [r for (_, r, _) in expected]


def test_sb3_recipe_logs_what_dummy_vec_env_logs(monkeypatch, tmp_path):
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    namespace, _ = run("stable-baselines3", monkeypatch, tmp_path)
    model = namespace["model"]
    reference = PPO(
        "MlpPolicy",
        DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"))] * 4),
        n_steps=model.n_steps,
        batch_size=model.batch_size,
        n_epochs=model.n_epochs,
        seed=model.seed,
        device="cpu",
    )
    reference.learn(total_timesteps=namespace["model"].num_timesteps)
    got = [episode["r"] for episode in model.ep_info_buffer]
    assert len(got) > 10
    assert got == [episode["r"] for episode in reference.ep_info_buffer]


def test_skrl_recipe_counts_200_step_episodes_with_the_chains_returns(monkeypatch, tmp_path):
    from skrl.agents.torch.base import Agent

    counted: list[tuple[float, int]] = []
    write = Agent.write_tracking_data

    def keep_tracked(self, **kwargs):
        # skrl keeps each as a one-element list (a row of its (num_envs, 1) tensors).
        counted.extend(
            (float(np.ravel(r)[0]), int(np.ravel(n)[0]))
            for r, n in zip(self._track_rewards, self._track_timesteps, strict=True)
        )
        write(self, **kwargs)

    monkeypatch.setattr(Agent, "write_tracking_data", keep_tracked)
    _, (recorder,) = run("skrl", monkeypatch, tmp_path)
    expected = replay_returns(
        lambda: RecordEpisodeStatistics(gym.make("Pendulum-v1")),
        recorder.num_envs,
        recorder.seeds[0],
        recorder.actions,
    )
    assert counted and len(counted) <= len(expected)
    assert {length for (_, length) in counted} == {200}
    # skrl sums rewards in float32; the chain in float64.
    np.testing.assert_allclose(
        [r for (r, _) in counted], [r for (_, r, _) in expected[: len(counted)]], rtol=1e-4
    )
