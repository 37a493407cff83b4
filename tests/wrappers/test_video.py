"""The ``record_video`` wrapper and ``torchwm run --video``: files, frame counts, first frames, on every
backend.

A video's frames are read back with the ffmpeg of imageio-ffmpeg (the [video] extra). H.264 is lossy, so
a frame "equals" a render when it is much closer to it than to the env's other frames.
"""

import subprocess
import sys
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
