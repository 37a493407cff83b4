"""The ``record_video`` wrapper: MP4 videos of chosen envs of a vector env, with Gymnasium's `RecordVideo`.

A wrapper of a torchwm stack wraps each single env where the env lives: in
the worker process on ``subproc`` and ``shmem``, in the parent on ``sync``.
Every env of a vector env is built from the same spec; `torchwm.factory`
tells the wrapper which env it is building (`torchwm.wrappers.env_index`),
so that the envs named in ``env_ids`` (env 0 by default) record and the others
pass through unchanged. Each recorded env writes
``<video_folder>/<name_prefix>-env<i>-episode-<n>.mp4``, one file an episode
chosen by the trigger; the episode still being recorded is written when the
vector env closes. Frames are the env's ``render()`` in ``rgb_array`` mode
(the full Atari screen for an ALE id, whatever the preprocessing after it).
`RecordVideo` decides when to record; the frames go, as they are captured,
to the ffmpeg of the imageio-ffmpeg wheel (`RecordingEnv`), because moviepy,
which `RecordVideo` writes with at the end of an episode, keeps the whole
episode in memory and drops the last frame when the frame count over the fps
rounds down (11 frames at 50 fps give 10). The ``[video]``
extra installs moviepy (which `RecordVideo` asks for) and imageio-ffmpeg;
its ffmpeg is inside the wheel, so nothing is downloaded at run time.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
import pydantic

from torchwm.extras import missing_extra
from torchwm.wrappers.env_index import current_env_index


class RecordingEnv(gym.wrappers.RecordVideo):
    """Gymnasium's `RecordVideo`, each frame sent to ffmpeg as it is captured (see the module docstring).

    Streaming keeps no frames in memory (`RecordVideo` keeps a whole episode: a long Atari game is
    gigabytes) and leaves little to do when the env closes, which a worker process does within the
    vector env's close deadline.
    """

    _writer: Any = None

    def _capture_frame(self) -> None:
        assert self.recording, "Cannot capture a frame, recording wasn't started."
        frame = self.env.render()
        if not isinstance(frame, np.ndarray):
            self.stop_recording()
            raise TypeError(
                f"record_video: render() returned {type(frame).__name__}, not an RGB frame (an array)"
            )
        if self._writer is None:
            self._writer = mp4_writer(
                os.path.join(self.video_folder, f"{self._video_name}.mp4"),
                frame.shape[1],
                frame.shape[0],
                self.frames_per_sec,
            )
        self._writer.send(np.ascontiguousarray(frame, dtype=np.uint8))

    def stop_recording(self) -> None:
        assert self.recording, "stop_recording was called, but no recording was started"
        writer, self._writer = self._writer, None
        self.recording = False
        self._video_name = None
        if writer is not None:
            writer.close()  # ffmpeg writes the rest and ends


def mp4_writer(path: str, width: int, height: int, fps: float) -> Any:
    """A started imageio-ffmpeg writer of an H.264 MP4: ``send`` H x W x 3 uint8 frames, then ``close``."""
    import imageio_ffmpeg

    # macro_block_size=2: H.264 in yuv420p needs even sides, and imageio-ffmpeg's default of 16
    # would rescale a 600x400 CartPole frame.
    writer = imageio_ffmpeg.write_frames(
        path, (width, height), fps=fps, macro_block_size=2, ffmpeg_log_level="error"
    )
    writer.send(None)  # starts ffmpeg
    return writer


class EveryNEpisodes:
    """Episode trigger: episodes 0, n, 2n, ... (picklable, unlike a lambda)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, episode_id: int) -> bool:
        return episode_id % self.n == 0

    def __repr__(self) -> str:
        return f"EveryNEpisodes({self.n})"


def record_video(
    env: gym.Env,
    video_folder: str = "videos",
    every_n_episodes: Annotated[int, pydantic.Field(ge=1)] | None = None,
    episode_trigger: Callable[[int], bool] | None = None,
    env_ids: tuple[Annotated[int, pydantic.Field(ge=0)], ...] = (0,),
    name_prefix: str = "rl-video",
    fps: Annotated[int, pydantic.Field(ge=1)] | None = None,
) -> gym.Env:
    """Record the envs ``env_ids`` of a vector env (env 0 by default) to MP4 files in ``video_folder``.

    Args:
        env: one env of the stack (the wrapper is applied to every env; only those in ``env_ids`` record).
        video_folder: where the videos go (created if missing).
        every_n_episodes: record episodes 0, n, 2n, ... of each recorded env. With neither this nor
            ``episode_trigger``, Gymnasium's default schedule: episodes 0, 1, 8, 27, ... (cubes) up to
            1000, then every 1000th.
        episode_trigger: ``f(episode_index) -> bool`` (Python only; a config file gives ``every_n_episodes``).
        env_ids: the indices of the envs to record, in the vector env.
        name_prefix: start of the file names; ``-env<i>-episode-<n>.mp4`` follows.
        fps: frames per second of the video; by default the env's ``metadata["render_fps"]``.
    """
    index = current_env_index()
    if index is None:
        index = 0  # a single env (make_env) is env 0
    if index not in env_ids:
        return env
    if every_n_episodes is not None and episode_trigger is not None:
        raise ValueError("record_video: give every_n_episodes or episode_trigger, not both")
    if every_n_episodes is not None:
        episode_trigger = EveryNEpisodes(every_n_episodes)
    if env.render_mode != "rgb_array":
        raise ValueError(
            f"record_video needs an env that renders RGB frames (render_mode='rgb_array'), and "
            f"{env.spec.id if env.spec else env!r} has render_mode={env.render_mode!r}; "
            f"torchwm sets render_mode='rgb_array' itself unless the env kwargs set another"
        )
    try:
        import imageio_ffmpeg  # noqa: F401
        import moviepy  # noqa: F401
    except ImportError as exc:
        raise missing_extra("video", "the wrapper record_video") from exc
    os.makedirs(video_folder, exist_ok=True)
    with warnings.catch_warnings():
        # Gymnasium warns when the folder exists: several recorded envs share it on purpose.
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
        return RecordingEnv(
            env,
            os.fspath(video_folder),
            episode_trigger=episode_trigger,
            name_prefix=f"{name_prefix}-env{index}",
            fps=fps,
        )


def with_video(spec: Any, video_folder: str | os.PathLike[str], **options: Any) -> Any:
    """``spec`` (a `torchwm.VecSpec`) with ``record_video`` at the end of its stack: what ``torchwm run
    --video``
    builds. ``options`` are record_video's (``every_n_episodes``, ``env_ids``, ...).

    Raises:
        MissingExtraError: moviepy or imageio-ffmpeg is not installed (checked here, before any worker
        starts).
    """
    from torchwm.spec import resolve_wrapper, wrapper_env_kwargs

    try:
        import imageio_ffmpeg  # noqa: F401
        import moviepy  # noqa: F401
    except ImportError as exc:
        raise missing_extra("video", "recording videos (record_video, --video)") from exc
    recorder = resolve_wrapper(
        {"name": "record_video", "video_folder": os.fspath(video_folder), **options},
        family=spec.family,
        env_id=spec.id,
    )
    # A recorder at the end of the stack changes nothing the fused Atari env decides on (spec.fused stays).
    return spec.replace(
        wrappers=(*spec.wrappers, recorder), env_kwargs={**wrapper_env_kwargs((recorder,)), **spec.env_kwargs}
    )
