"""The ``record_video`` wrapper and ``torchwm run --video``: files, frame counts, first frames, on every
backend.

A video's frames are read back with the ffmpeg of imageio-ffmpeg (the [video] extra). H.264 is lossy, so
a frame "equals" a render when it is much closer to it than to the env's other frames.
"""

import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import imageio_ffmpeg  # the [video] extra (the README's test command installs it)
import numpy as np
import pytest

import torchwm
from torchwm.errors import UnsupportedStackError, WorkerError


def read_frames(path: Path) -> list[np.ndarray]:
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = reader.send(None)
    width, height = meta["size"]
    return [np.frombuffer(frame, np.uint8).reshape(height, width, 3).astype(np.int16) for frame in reader]


def distance(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


def cartpole_renders(seed: int, actions: list[int]) -> list[np.ndarray]:
    """Gymnasium's own CartPole frames for the seed and actions: the reset's, then one a step."""
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=seed)
    frames = [env.render()]
    for action in actions:
        env.step(action)
        frames.append(env.render())
    env.close()
    return frames


def run_first_episode(envs, action: int) -> int:
    """Steps with a constant action until env 0's episode ends; its length."""
    envs.reset()
    for step in range(1, 500):
        _, _, terminations, truncations, _ = envs.step(np.full(envs.num_envs, action, dtype=np.int64))
        if terminations[0] or truncations[0]:
            return step
    raise AssertionError("CartPole with a constant action ends within 500 steps")


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_env_0_episode_is_recorded_with_every_frame_and_the_envs_render(backend, tmp_path):
    seed = 5
    options = {} if backend == "sync" else {"num_workers": 2}
    with torchwm.make_vec(
        "CartPole-v1",
        3,
        backend=backend,
        seed=seed,
        backend_kwargs=options,
        wrappers=[{"name": "record_video", "video_folder": str(tmp_path)}],
    ) as envs:
        length = run_first_episode(envs, action=1)
    # env 0 only (the default env_ids); under next_step autoreset episode 1 has not started yet
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rl-video-env0-episode-0.mp4"]
    frames = read_frames(tmp_path / "rl-video-env0-episode-0.mp4")
    assert len(frames) == length + 1  # the reset's frame, then one a step
    renders = cartpole_renders(seed, [1] * length)
    assert frames[0].shape == renders[0].shape
    assert distance(frames[0], renders[0]) < 0.5 * distance(frames[0], renders[-1])
    assert distance(frames[-1], renders[-1]) < 0.5 * distance(frames[-1], renders[0])


def test_env_ids_and_every_n_episodes(tmp_path):
    with torchwm.make_vec(
        "CartPole-v1",
        3,
        seed=0,
        wrappers=[
            {
                "name": "record_video",
                "video_folder": str(tmp_path),
                "env_ids": [1, 2],
                "every_n_episodes": 2,
                "name_prefix": "run",
            }
        ],
    ) as envs:
        envs.reset()
        episodes = np.zeros(3, dtype=int)
        while episodes.min() < 3:
            _, _, terminations, truncations, _ = envs.step(np.zeros(3, dtype=np.int64))
            episodes += terminations | truncations
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "run-env1-episode-0.mp4" in names and "run-env2-episode-2.mp4" in names
    assert not any("env0" in name or "episode-1." in name or "episode-3." in name for name in names), names


def test_bad_options_fail_before_anything_is_built(tmp_path):
    with pytest.raises(TypeError, match="did you mean 'every_n_episodes'"):
        torchwm.make_vec("CartPole-v1", wrappers=[{"name": "record_video", "every_n_episode": 2}])
    with pytest.raises(TypeError, match="every_n_episodes"):
        torchwm.make_vec("CartPole-v1", wrappers=[{"name": "record_video", "every_n_episodes": 0}])


def test_fused_atari_env_records_the_screen(tmp_path):
    """The standard Atari stack stays fused with a recorder at its end; the frames are the full screen."""
    seed, steps = 3, 12
    stack = ["atari_preprocessing", "frame_stack", {"name": "record_video", "video_folder": str(tmp_path)}]
    with torchwm.make_vec(
        "ALE/Pong-v5", 2, backend="shmem", seed=seed, wrappers=stack, backend_kwargs={"num_workers": 2}
    ) as envs:
        assert envs.spec.fused
        envs.reset()
        for _ in range(steps):
            envs.step(np.zeros(2, dtype=np.int64))
    frames = read_frames(tmp_path / "rl-video-env0-episode-0.mp4")
    assert len(frames) == steps + 1 and frames[0].shape == (210, 160, 3)
    reference = torchwm.make_env("ALE/Pong-v5", render_mode="rgb_array", fused=False)
    reference.reset(seed=seed)
    first = reference.render()
    for _ in range(steps):
        reference.step(0)
    last = reference.render()
    reference.close()
    assert distance(frames[0], first) < 2.0
    assert distance(frames[-1], last) < 2.0


def test_ale_native_refuses_saying_why():
    with pytest.raises(UnsupportedStackError, match="record_video' needs each env's screen.*preprocessed"):
        torchwm.make_vec(
            "ALE/Pong-v5",
            2,
            backend="ale-native",
            wrappers=["atari_preprocessing", "frame_stack", "record_video"],
        )


def test_an_env_that_cannot_render_rgb_is_refused(tmp_path):
    with pytest.raises((ValueError, WorkerError), match="render_mode='rgb_array'"):
        torchwm.make_vec(
            "CartPole-v1",
            render_mode="human",
            wrappers=[{"name": "record_video", "video_folder": str(tmp_path)}],
        )


def test_torchwm_run_video(tmp_path):
    config = tmp_path / "setup.yaml"
    config.write_text(
        "id: CartPole-v1\nnum_envs: 2\nbackend: shmem\nseed: 0\nbackend_kwargs:\n  num_workers: 2\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchwm",
            "run",
            str(config),
            "--steps",
            "60",
            "--no-progress",
            "--video",
            str(tmp_path / "videos"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    videos = sorted((tmp_path / "videos").iterdir())
    assert videos and videos[0].name == "rl-video-env0-episode-0.mp4"
    assert len(read_frames(videos[0])) > 1


def test_without_moviepy_the_video_extra_is_named(tmp_path):
    script = (
        "import sys; sys.modules['moviepy'] = None\n"
        "import torchwm\n"
        "torchwm.make_vec('CartPole-v1', "
        f"wrappers=[{{'name': 'record_video', 'video_folder': {str(tmp_path)!r}}}])"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "needs moviepy, which is in torchwm's [video] extra" in out.stderr.strip().splitlines()[-1]


# ---------------------------------------------------------------------------- refusals, errors, overwrites


class NoRenderEnv(gym.Env):
    """An env without render modes, whose constructor takes no render_mode."""

    metadata = {"render_modes": []}
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, True, False, {}


@pytest.fixture
def no_render_id():
    gym.register("torchwm-test/NoRender-v0", entry_point=NoRenderEnv)
    yield "torchwm-test/NoRender-v0"
    gym.registry.pop("torchwm-test/NoRender-v0", None)


def test_recording_an_env_without_rgb_array_names_record_video(no_render_id, tmp_path):
    from torchwm.wrappers.record_video import with_video

    spec = torchwm.load_config({"id": no_render_id})
    with pytest.raises(ValueError, match=r"record_video .*has no render mode 'rgb_array'.*\[\]"):
        with_video(spec, tmp_path / "videos")
    assert not (tmp_path / "videos").exists()


def test_the_wrapper_refuses_an_env_whose_render_modes_lack_rgb_array(tmp_path):
    from torchwm.wrappers.record_video import record_video

    class Renders(NoRenderEnv):
        metadata = {"render_modes": ["ansi"]}

        def __init__(self, render_mode=None):
            self.render_mode = render_mode

    with pytest.raises(ValueError, match="record_video .*has no render mode 'rgb_array'.*'ansi'"):
        record_video(Renders(render_mode="rgb_array"), str(tmp_path))


@pytest.mark.parametrize(
    "make_path, error, message",
    [
        (lambda tmp: tmp / "file", FileExistsError, "is a file, expected a folder"),
        (lambda tmp: tmp / "file" / "videos", NotADirectoryError, "cannot be made: .*file' is a file"),
    ],
)
def test_a_video_folder_that_cannot_be_made_is_refused_before_anything_starts(
    tmp_path, make_path, error, message
):
    from torchwm.wrappers.record_video import with_video

    (tmp_path / "file").write_text("")
    spec = torchwm.load_config({"id": "CartPole-v1", "backend": "shmem"})
    with pytest.raises(error, match=f"record_video: video_folder .*{message}"):
        with_video(spec, make_path(tmp_path))


@pytest.mark.parametrize("where", ["file", "file/videos"])
def test_torchwm_run_video_into_a_file_is_one_line_status_2(tmp_path, where):
    (tmp_path / "file").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "torchwm", "run", "CartPole-v1", "--backend", "shmem", "--steps", "5"]
        + ["--no-progress", "--video", str(tmp_path / where)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchwm run: error: record_video: video_folder"), lines
    assert "torchwm run: CartPole-v1" not in out.stderr  # refused before the env was built


def full_disk_writer(monkeypatch, tmp_path):
    """Every video goes to a file that is /dev/full, where each write fails with ENOSPC, as on a full disk."""
    record_video = importlib.import_module("torchwm.wrappers.record_video")

    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full")
    full = tmp_path / "full.mp4"
    full.symlink_to("/dev/full")
    real = record_video.Mp4Writer
    monkeypatch.setattr(record_video, "mp4_writer", lambda path, *size: real(str(full), *size))


def test_a_video_that_cannot_be_finished_raises_on_close(tmp_path, monkeypatch):
    full_disk_writer(monkeypatch, tmp_path)
    envs = torchwm.make_vec(
        "CartPole-v1", seed=0, wrappers=[{"name": "record_video", "video_folder": str(tmp_path / "v")}]
    )
    envs.reset()
    for _ in range(3):
        envs.step(np.zeros(1, dtype=np.int64))
    with pytest.raises(OSError, match="record_video: could not finish .*No space left on device"):
        envs.close()


def test_torchwm_run_reports_a_video_it_could_not_finish(tmp_path, monkeypatch, capsys):
    from torchwm.cli import main

    full_disk_writer(monkeypatch, tmp_path)
    status = main(["run", "CartPole-v1", "--steps", "5", "--no-progress", "--video", str(tmp_path / "v")])
    captured = capsys.readouterr()
    assert status == 1
    assert "ran 5 steps" in captured.out  # the figures are still printed
    errors = [line for line in captured.err.splitlines() if "error" in line]
    assert len(errors) == 1 and "No space left on device" in errors[0], captured.err


def test_torchwm_run_finds_an_unplayable_video_a_worker_left(tmp_path, monkeypatch, capsys):
    """A worker closes its envs where no error reaches the parent: run reads back what was written."""
    from torchwm.cli import main

    record_video = importlib.import_module("torchwm.wrappers.record_video")

    def close_without_finishing(self):  # imageio-ffmpeg's writer did so silently when ffmpeg failed
        self._process.kill()
        self._process.wait()

    monkeypatch.setattr(record_video.Mp4Writer, "close", close_without_finishing)
    folder = tmp_path / "v"
    status = main(
        ["run", "CartPole-v1", "--backend", "shmem", "--steps", "5", "--no-progress", "--video", str(folder)]
        + ["--set", "backend_kwargs.num_workers=1", "--set", 'backend_kwargs.context="fork"']
    )
    captured = capsys.readouterr()
    assert status == 1
    assert f"videos written to {folder}{os.sep}: rl-video-env0-episode-0.mp4" in captured.out
    assert f"torchwm run: error: record_video: {folder / 'rl-video-env0-episode-0.mp4'} is unplayable" in (
        captured.err
    )


def test_run_says_where_the_videos_went(tmp_path, capsys):
    from torchwm.cli import main

    folder = tmp_path / "v"
    assert (
        main(["run", "CartPole-v1", "--seed", "0", "--steps", "40", "--no-progress", "--video", str(folder)])
        == 0
    )
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["rl-video-env0-episode-0.mp4", "rl-video-env0-episode-1.mp4"]
    assert f"videos written to {folder}{os.sep}: {', '.join(names)}\n" in capsys.readouterr().out


def _gymnasiums_overwrite_warning(folder: Path) -> str:
    """The words of Gymnasium's own RecordVideo warning for ``folder`` (which exists)."""
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    with pytest.warns(UserWarning) as caught:
        gym.wrappers.RecordVideo(env, str(folder)).close()
    (words,) = [str(w.message) for w in caught if "Overwriting" in str(w.message)]
    # "WARN: Overwriting existing videos at <folder> folder (try ...)", coloured by Gymnasium's logger
    return words[words.index("Overwriting") :].split("\x1b")[0]


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_recording_again_into_a_folder_warns_about_the_videos_it_replaces(backend, tmp_path):
    # Warned in the user's process before any worker starts, where a worker's own warning is lost.
    stack = [{"name": "record_video", "video_folder": str(tmp_path), "env_ids": [0, 1]}]
    options = {} if backend == "sync" else {"num_workers": 2, "context": "fork"}
    with torchwm.make_vec("CartPole-v1", 2, seed=0, wrappers=stack) as envs:
        run_first_episode(envs, action=1)
    first = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    assert set(first) == {"rl-video-env0-episode-0.mp4", "rl-video-env1-episode-0.mp4"}
    words = re.escape(_gymnasiums_overwrite_warning(tmp_path))  # Gymnasium's category and words
    with pytest.warns(
        UserWarning, match=rf"{words}.*2 video\(s\) of envs 0, 1 .*rl-video-env0-episode-0.mp4"
    ):
        torchwm.make_vec(
            "CartPole-v1", 2, seed=0, wrappers=stack, backend=backend, backend_kwargs=options
        ).close()
    # another name_prefix collides with nothing: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torchwm.make_vec(
            "CartPole-v1",
            2,
            wrappers=[{**stack[0], "name_prefix": "second"}],
            backend=backend,
            backend_kwargs=options,
        ).close()


def test_a_single_env_recording_again_warns_once(tmp_path):
    stack = [{"name": "record_video", "video_folder": str(tmp_path)}]
    (tmp_path / "rl-video-env0-episode-0.mp4").write_bytes(b"")
    with pytest.warns(
        UserWarning, match=r"Overwriting existing videos at .* 1 video\(s\) of env 0 "
    ) as caught:
        torchwm.make_env("CartPole-v1", wrappers=stack).close()
    assert sum("Overwriting" in str(w.message) for w in caught) == 1
    with pytest.warns(UserWarning, match="Overwriting existing videos") as caught:
        torchwm.make_vec("CartPole-v1", 2, wrappers=stack).close()  # sync: warned once, not again by env 0
    assert sum("Overwriting" in str(w.message) for w in caught) == 1


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_record_video_on_an_env_without_rgb_frames_is_refused_by_make_vec(backend, tmp_path):
    # From Python as from `torchwm run`: the error names record_video, before any worker starts.
    with pytest.raises(ValueError, match="record_video"):
        torchwm.make_vec(
            "torchwm/NoRender-v0" if "torchwm/NoRender-v0" in gym.registry else _register_no_render(),
            1,
            backend=backend,
            wrappers=[{"name": "record_video", "video_folder": str(tmp_path)}],
        )


class _NoRenderEnv(gym.Env):
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


def _register_no_render() -> str:
    gym.register("torchwm/NoRender-v0", entry_point=_NoRenderEnv)
    return "torchwm/NoRender-v0"


@pytest.mark.parametrize("fused", [True, False])
def test_under_episodic_life_a_video_is_a_whole_game_numbered_by_games(fused, tmp_path):
    # A lost life ends the learner's episode, not the game: the video goes on, and its number counts games.
    stack = [
        "atari_preprocessing",
        "episodic_life",
        {"name": "record_video", "video_folder": str(tmp_path), "every_n_episodes": 1},
    ]
    with torchwm.make_vec("ALE/Breakout-v5", 1, seed=0, wrappers=stack, fused=fused) as envs:
        assert envs.spec.fused == fused
        envs.action_space.seed(0)
        envs.reset()
        games, lives_lost, first_game_frames, frames = 0, 0, 0, 1  # the first reset's frame
        while games < 2:
            _, _, terminations, truncations, infos = envs.step(envs.action_space.sample())
            frames += 1
            if terminations[0] or truncations[0]:
                if truncations[0] or infos["lives"][0] == 0:
                    games += 1
                    first_game_frames = first_game_frames or frames
                else:
                    lives_lost += 1
                if games == 2:
                    break  # before the step that starts a third game
                envs.step(envs.action_space.sample())  # next_step: this step resets env 0, one frame
                frames += 1
            assert frames < 20_000, "two random games of Breakout end sooner"
    assert lives_lost >= 4  # Breakout's 5 lives: the lost lives were episodes of their own before
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["rl-video-env0-episode-0.mp4", "rl-video-env0-episode-1.mp4"]
    assert len(read_frames(tmp_path / "rl-video-env0-episode-0.mp4")) == first_game_frames


def test_torchwm_run_lists_the_videos_in_episode_order(tmp_path, capsys):
    from torchwm.cli import main

    folder = tmp_path / "v"
    assert (
        main(
            ["run", "CartPole-v1", "--seed", "0", "--steps", "1000", "--no-progress", "--video", str(folder)]
        )
        == 0
    )
    listed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("videos written"))
    names = listed.split(": ", 1)[1].split(", ")
    numbers = [int(re.search(r"episode-(\d+)\.mp4", name).group(1)) for name in names]
    assert {8, 27} <= set(numbers) and numbers == sorted(numbers), names  # episode-8 before episode-27
