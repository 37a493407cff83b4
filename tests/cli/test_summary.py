"""`torchwm.cli.summary`: what ``torchwm run`` prints when it ends: the learner's episodes of each env
(`EpisodeTracker`), the whole games ``episode_statistics`` records, their units, and a run too short for
an episode to end.
"""

import pytest
from support.commands import report_line

from torchwm.cli import main

OBS_POLICY = (
    "import numpy as np\n"
    "def policy(obs, action_space):\n"
    "    # Deterministic in the observations: the same frames give the same actions on every path.\n"
    "    return (np.asarray(obs).reshape(len(obs), -1).sum(axis=1, dtype=np.int64) // 3) % 4\n"
)
LIVES_STACK = (
    "id: ALE/Breakout-v5\nnum_envs: 2\nseed: 0\nwrappers:\n  - episode_statistics\n"
    "  - atari_preprocessing\n  - episodic_life\n  - name: frame_stack\n    stack_size: 4\n"
)


def test_run_reports_whole_game_returns_with_episodic_life(tmp_path, monkeypatch, capsys):
    import gymnasium as gym
    import numpy as np

    import torchwm
    from torchwm.factory import env_fn

    (tmp_path / "obs_policy.py").write_text(OBS_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "lives.yaml"
    config.write_text(LIVES_STACK)
    steps = 500
    assert (
        main(["run", str(config), "--steps", str(steps), "--policy", "obs_policy:policy", "--no-progress"])
        == 0
    )
    out = capsys.readouterr().out

    # The reference: Gymnasium's own chain of the same stack (no fused env), the same seeds and policy.
    # A whole game's return is the sum of the raw rewards until the last life is lost; episode_statistics
    # at the bottom of the chain (Gymnasium's RecordEpisodeStatistics) gives its length.
    import obs_policy

    spec = torchwm.load_config(config)
    envs = gym.vector.SyncVectorEnv([env_fn(spec.replace(fused=False))] * spec.num_envs)
    obs, _ = envs.reset(seed=spec.seed)
    running, games, lengths, lives_lost = np.zeros(spec.num_envs), [], [], 0
    for _ in range(steps):
        obs, rewards, terminated, truncated, infos = envs.step(obs_policy.policy(obs, envs.action_space))
        running += rewards
        for i in np.flatnonzero(terminated | truncated):
            if infos["lives"][i] > 0 and not truncated[i]:
                lives_lost += 1  # episodic_life: the learner's episode ends, the game goes on
                continue
            games.append(running[i])
            running[i] = 0
            assert infos["_episode"][i]
            lengths.append(infos["episode"]["l"][i])
    envs.close()
    assert len(games) >= 2 and lives_lost > len(games)  # several games, each of several lives

    assert report_line(out, "episodes finished:").startswith(
        f"episodes finished: {len(games)} (recorded by episode_statistics: whole games"
    )
    assert report_line(out, "return:") == (
        f"return: mean {np.mean(games):.2f}, max {np.max(games):.2f} "
        f"(mean length {np.mean(lengths):.1f} emulator frames)"
    )
    # The learner's episodes are counted apart, and said to be one per life.
    learner = report_line(out, "learner episodes")
    assert learner.startswith(
        f"learner episodes (terminated or truncated): {lives_lost + len(games)} (one per life lost)"
    )


def test_run_frames_are_the_frames_of_the_game():
    from torchwm.cli import length_unit
    from torchwm.factory import resolve_spec

    # Under atari_preprocessing the ALE env skips no frames: a step of it, which l counts, is one frame.
    assert (
        length_unit(resolve_spec("ALE/Breakout-v5", wrappers=["episode_statistics", "atari_preprocessing"]))
        == "emulator frames"
    )
    # Without it, ALE's v5 env skips 4 frames a step itself: l counts those steps.
    assert (
        length_unit(resolve_spec("ALE/Breakout-v5", wrappers=["episode_statistics"]))
        == "ALE env steps of 4 frames each"
    )
    assert length_unit(resolve_spec("CartPole-v1", wrappers=["episode_statistics"])).startswith(
        "steps of the env"
    )


def test_episode_tracker_attributes_partial_rows_to_their_envs():
    from torchwm.cli.summary import EpisodeTracker

    tracker = EpisodeTracker(4, "next_step")
    f, t = [False, False], [True, False]
    tracker.update([1.0, 10.0], f, f, env_ids=[2, 0])
    tracker.update([2.0, 20.0], t, f, env_ids=[2, 1])  # env 2 ends: 1 + 2
    tracker.update([0.0, 5.0], f, f, env_ids=[2, 0])  # env 2's reset row counts for no episode
    tracker.update([30.0, 7.0], [False, True], f, env_ids=[1, 0])  # env 0 ends: 10 + 5 + 7
    assert tracker.finished_returns == [3.0, 22.0]
    assert tracker.finished_lengths == [2, 3]
    assert tracker.returns.tolist() == [0.0, 50.0, 0.0, 0.0]
    assert tracker.lengths.tolist() == [0, 2, 0, 0]


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_run_with_asynchronous_batches_counts_each_env_s_episodes(mode, capsys):
    code = main(
        [
            "run", "CartPole-v1", "--num-envs", "4", "--backend", "shmem", "--seed", "0", "--steps", "300",
            "--set", "backends.shmem.batch_size=2", "--set", "backends.shmem.num_workers=2",
            "--set", f"autoreset_mode={mode}", "--no-progress",
        ]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert report_line(out, "ran 300 steps").startswith(
        "ran 300 steps of 2 of 4 envs (batch_size) = 600 env steps"
    )
    finished = int(report_line(out, "episodes finished:").split(": ")[1])
    assert finished > 10
    # CartPole pays 1 a step: an episode's return is its length unless rows went to the wrong env.
    returns = report_line(out, "return:")
    mean_return = float(returns.split("mean ")[1].split(",")[0])
    assert f"mean length {mean_return:.1f} steps" in returns
    assert "Traceback" not in err and "pending call" not in err  # every env collected before close


@pytest.mark.parametrize(
    ("args", "limit"),
    [
        (["CartPole-v1"], "an episode of CartPole-v1 lasts at most 500 steps (its max_episode_steps)"),
        # pong's atari_preprocessing skips 4 frames a step: ALE's 108000-frame limit is 27000 steps.
        (
            ["pong", "--backend", "sync", "--num-envs", "1"],
            "an episode of ALE/Pong-v5 lasts at most 27,000 steps (108,000 emulator frames, ALE's "
            "max_num_frames_per_episode)",
        ),
    ],
)
def test_a_run_with_no_episode_ended_says_so_and_how_long_one_lasts(args, limit, capsys):
    assert main(["run", *args, "--steps", "6", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert report_line(out, "episodes finished:") == "episodes finished: 0"
    assert report_line(out, "no episode ended") == (
        f"no episode ended within 6 steps (the longest so far: 6 steps); {limit}; run more steps with "
        "--steps to see returns"
    )


def test_a_run_where_episodes_ended_has_no_such_line(capsys):
    assert main(["run", "CartPole-v1", "--steps", "300", "--seed", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert int(report_line(out, "episodes finished:").split(": ")[1]) > 0
    assert "no episode ended" not in out
