# The MIT License
#
# Copyright (c) 2016 OpenAI
# Copyright (c) 2022 Farama Foundation
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in
# all copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
# THE SOFTWARE.
#
# Ported from Gymnasium 1.4.0 tests/wrappers/vector/test_record_video.py (commit 95a790e19, "Update to
# v1.4.0"). Adapted: gymnasium.make_vec(...) is the suite's `make_vec` fixture, torchwm.make_vec on every
# backend (vectorization_mode is replaced by the backend; see adapter.py); the module is skipped without
# moviepy; each test runs in a temporary folder; the module runs on `sync` and `shmem`, not `subproc`.

"""Test suite for RecordVideo wrapper."""

import os
import shutil

import numpy as np
import pytest

import gymnasium as gym

pytest.importorskip("moviepy", reason="RecordVideo needs moviepy (gymnasium[other]), an optional dependency")
from gymnasium.vector import AutoresetMode  # noqa: E402
from gymnasium.wrappers.vector import RecordVideo  # noqa: E402

# RecordVideo reaches the envs through render() and the step's arrays: subproc's render() takes the
# same worker pool and pipe as shmem's, and the rest of the suite runs subproc. Rendering and encoding
# the videos cost most of this module's time, so each autoreset mode runs once, one of them on shmem
# (each backend's autoreset modes are the conformance suite's).
MODES_AND_BACKENDS = [
    (AutoresetMode.NEXT_STEP, "sync"),
    (AutoresetMode.SAME_STEP, "sync"),
    (AutoresetMode.DISABLED, "shmem"),
]


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    """Ported: the videos go to a temporary folder, not the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(("autoreset_mode", "backend"), MODES_AND_BACKENDS)
def test_video_folder_and_filenames(
    make_vec,
    autoreset_mode: gym.vector.AutoresetMode,
    video_folder: str = "custom_video_folder",
    name_prefix: str = "video-prefix",
    n_envs: int = 10,
):
    envs = make_vec(
        "CartPole-v1",
        num_envs=n_envs,
        render_mode="rgb_array",
        vectorization_mode=gym.VectorizeMode.SYNC,
        vector_kwargs={"autoreset_mode": autoreset_mode},
    )
    envs = RecordVideo(
        envs,
        video_folder=video_folder,
        name_prefix=name_prefix,
        episode_trigger=lambda x: x in [1, 4],
        step_trigger=lambda x: x in [0, 30],
        video_aspect_ratio=(1, 1),
    )

    envs.reset(seed=123)
    envs.action_space.seed(123)
    for _ in range(150):
        actions = envs.action_space.sample()
        _, _, terminations, truncations, _ = envs.step(actions)

        autoresets = np.logical_or(terminations, truncations)
        if autoreset_mode == AutoresetMode.DISABLED and np.any(autoresets):
            envs.reset(options={"reset_mask": autoresets})

    envs.close()

    assert os.path.isdir(video_folder)
    mp4_files = {file for file in os.listdir(video_folder) if file.endswith(".mp4")}
    shutil.rmtree(video_folder)
    assert mp4_files == {
        "video-prefix-step-0.mp4",  # step triggers
        "video-prefix-step-30.mp4",
        "video-prefix-episode-1.mp4",  # episode triggers
        "video-prefix-episode-4.mp4",
    }


@pytest.mark.parametrize(("autoreset_mode", "backend"), MODES_AND_BACKENDS)
@pytest.mark.parametrize("episodic_trigger", [None, lambda x: x in [0, 3, 5, 10, 12]])
def test_episodic_trigger(make_vec, autoreset_mode, episodic_trigger, n_envs=10):
    """Test RecordVideo using the default episode trigger."""
    envs = make_vec(
        "CartPole-v1",
        num_envs=n_envs,
        render_mode="rgb_array",
        vectorization_mode=gym.VectorizeMode.SYNC,
        vector_kwargs={"autoreset_mode": autoreset_mode},
    )
    envs = RecordVideo(
        envs,
        "videos",
        episode_trigger=episodic_trigger,
        video_aspect_ratio=(1, 1),
    )
    envs.reset(seed=123)
    envs.action_space.seed(123)
    episode_count = 0
    for _ in range(199):
        action = envs.action_space.sample()
        _, _, terminations, truncations, _ = envs.step(action)
        if terminations[0] or truncations[0]:
            episode_count += 1

        autoresets = np.logical_or(terminations, truncations)
        if autoreset_mode == AutoresetMode.DISABLED and np.any(autoresets):
            envs.reset(options={"reset_mask": autoresets})
    envs.close()

    assert os.path.isdir("videos")
    mp4_files = [file for file in os.listdir("videos") if file.endswith(".mp4")]
    shutil.rmtree("videos")
    assert envs.episode_trigger is not None
    assert len(mp4_files) == sum(
        envs.episode_trigger(i) for i in range(episode_count + 1)
    )


@pytest.mark.parametrize(("autoreset_mode", "backend"), MODES_AND_BACKENDS)
def test_step_trigger(make_vec, autoreset_mode, n_envs=10):
    """Test RecordVideo defining step trigger function."""
    envs = make_vec(
        "CartPole-v1",
        num_envs=n_envs,
        render_mode="rgb_array",
        vectorization_mode=gym.VectorizeMode.SYNC,
        vector_kwargs={"autoreset_mode": autoreset_mode},
    )
    envs = RecordVideo(
        envs,
        "videos",
        step_trigger=lambda x: x % 100 == 0,
        video_aspect_ratio=(1, 1),
    )
    envs.reset(seed=123)
    envs.action_space.seed(123)
    for _ in range(199):
        action = envs.action_space.sample()
        _, _, terminations, truncations, _ = envs.step(action)

        autoresets = np.logical_or(terminations, truncations)
        if autoreset_mode == AutoresetMode.DISABLED and np.any(autoresets):
            envs.reset(options={"reset_mask": autoresets})

    envs.close()
    assert os.path.isdir("videos")
    mp4_files = [file for file in os.listdir("videos") if file.endswith(".mp4")]
    shutil.rmtree("videos")
    assert len(mp4_files) == 2


@pytest.mark.parametrize(("autoreset_mode", "backend"), MODES_AND_BACKENDS)
def test_both_episodic_and_step_trigger(make_vec, autoreset_mode, n_envs=10):
    """Test RecordVideo defining both step and episode trigger functions."""
    envs = make_vec(
        "CartPole-v1",
        num_envs=n_envs,
        render_mode="rgb_array",
        vectorization_mode=gym.VectorizeMode.SYNC,
        vector_kwargs={"autoreset_mode": autoreset_mode},
    )
    envs = RecordVideo(
        envs,
        "videos",
        step_trigger=lambda x: x == 100,
        episode_trigger=lambda x: x == 0 or x == 3,
        video_aspect_ratio=(1, 1),
    )

    envs.reset(seed=123)
    envs.action_space.seed(123)
    for _ in range(199):
        action = envs.action_space.sample()
        _, _, terminations, truncations, _ = envs.step(action)

        autoresets = np.logical_or(terminations, truncations)
        if autoreset_mode == AutoresetMode.DISABLED and np.any(autoresets):
            envs.reset(options={"reset_mask": autoresets})
    envs.close()

    assert os.path.isdir("videos")
    mp4_files = [file for file in os.listdir("videos") if file.endswith(".mp4")]
    shutil.rmtree("videos")
    assert len(mp4_files) == 3


@pytest.mark.parametrize(("autoreset_mode", "backend"), MODES_AND_BACKENDS)
def test_video_length(make_vec, autoreset_mode, video_length: int = 10, n_envs=10):
    """Test if argument video_length of RecordVideo works properly."""
    envs = make_vec(
        "CartPole-v1",
        num_envs=n_envs,
        render_mode="rgb_array",
        vectorization_mode=gym.VectorizeMode.SYNC,
        vector_kwargs={"autoreset_mode": autoreset_mode},
    )
    envs = RecordVideo(
        envs,
        "videos",
        step_trigger=lambda x: x == 0,
        video_length=video_length,
        video_aspect_ratio=(1, 1),
    )

    envs.reset(seed=123)
    envs.action_space.seed(123)
    for _ in range(video_length):
        _, _, terminations, truncations, _ = envs.step(envs.action_space.sample())

        if terminations[0] or truncations[0]:
            break

        autoresets = np.logical_or(terminations, truncations)
        if autoreset_mode == AutoresetMode.DISABLED and np.any(autoresets):
            envs.reset(options={"reset_mask": autoresets})

    # check that the environment is still recording then take a step to take the number of steps > video
    # length
    assert envs.recording
    envs.step(envs.action_space.sample())
    assert not envs.recording
    envs.close()

    # check that only one video is recorded
    assert os.path.isdir("videos")
    mp4_files = [file for file in os.listdir("videos") if file.endswith(".mp4")]
    shutil.rmtree("videos")
    assert len(mp4_files) == 1


def test_record_video_step_returns_arrays_not_scalars(make_vec):
    """Regression test for https://github.com/Farama-Foundation/Gymnasium/issues/1580.

    ``RecordVideo.step`` previously declared a return type of
    ``tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]``, which
    misled static type checkers (Pyright/Pylance) into thinking that
    ``terminations`` / ``truncations`` were Python ``bool``s rather than
    numpy arrays. At runtime they are arrays of shape ``(num_envs,)``, the
    same as the underlying :class:`VectorEnv.step`, so the annotation now
    matches the runtime contract.
    """
    envs = make_vec(
        "CartPole-v1",
        num_envs=4,
        render_mode="rgb_array",
        vectorization_mode=gym.VectorizeMode.SYNC,
    )
    envs = RecordVideo(envs, "videos", video_aspect_ratio=(1, 1))

    envs.reset(seed=42)
    envs.action_space.seed(42)
    obs, rewards, terminations, truncations, info = envs.step(
        envs.action_space.sample()
    )

    try:
        assert isinstance(rewards, np.ndarray)
        assert rewards.shape == (4,)
        assert isinstance(terminations, np.ndarray)
        assert terminations.shape == (4,)
        assert isinstance(truncations, np.ndarray)
        assert truncations.shape == (4,)
        # The caller pattern from the original bug report — calling array
        # methods on the returned terminations/truncations — must work.
        done = terminations | truncations
        assert isinstance(done, np.ndarray)
        assert done.shape == (4,)
        _ = done.any()
    finally:
        envs.close()
        if os.path.isdir("videos"):
            shutil.rmtree("videos")
