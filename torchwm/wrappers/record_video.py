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
import re
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Iterable
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, SupportsFloat

import annotated_types  # pydantic's own constraints, without importing pydantic before an option is checked
import gymnasium as gym
import numpy as np

from torchwm.extras import missing_extra
from torchwm.wrappers.env_index import current_env_index


class VideoWriteError(OSError):
    """A video could not be written to its end (ffmpeg failed: a full disk, a folder gone): the file is
    unplayable. An `OSError`, as the error moviepy raises in Gymnasium's `RecordVideo` for the same
    failure."""


class RecordingEnv(gym.wrappers.RecordVideo):
    """Gymnasium's `RecordVideo`, each frame sent to ffmpeg as it is captured (see the module docstring).

    Streaming keeps no frames in memory (`RecordVideo` keeps a whole episode: a long Atari game is
    gigabytes) and leaves little to do when the env closes, which a worker process does within the
    vector env's close deadline. A video ffmpeg could not finish raises `VideoWriteError` when its
    recording stops (at the episode's end, or in ``close``), where `RecordVideo` raises when it
    writes the file.

    Under ``episodic_life`` a lost life ends the learner's episode but not the game, and the reset after
    it goes on with the same game: a video, and its episode number, is a whole game (a game over, a
    truncation or a seeded reset ends it), as a person watching it expects, not a life.
    """

    _writer: Mp4Writer | None = None

    def __init__(self, env: gym.Env, *args: Any, **kwargs: Any) -> None:
        super().__init__(env, *args, **kwargs)
        # The emulator, when a lost life ends the episodes of this env (None: every reset starts a game).
        self._life_ale: Any = (
            getattr(env.unwrapped, "ale", None) if ends_episodes_at_lost_lives(env) else None
        )
        self._game_ended = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self._life_ale is not None:
            # What `EpisodicLifeEnv` calls a real end: the game is over, or the episode was cut.
            self._game_ended = bool(truncated) or bool(self._life_ale.game_over())
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        ale = self._life_ale
        frames_before = None if ale is None else ale.getEpisodeFrameNumber()
        obs, info = self.env.reset(seed=seed, options=options)
        starts_a_game = (
            ale is None
            or self.episode_id < 0
            or seed is not None
            or self._game_ended
            # The no-op step after a lost life ended the game, and the reset restarted it: a game that
            # goes on only gains frames.
            or ale.getEpisodeFrameNumber() < frames_before
        )
        if starts_a_game:  # what RecordVideo.reset does after its env's reset
            self.episode_id += 1
            if self.recording and self.video_length == float("inf"):
                self.stop_recording()
            if self.episode_trigger and self.episode_trigger(self.episode_id):
                self.start_recording(f"{self.name_prefix}-episode-{self.episode_id}")
        if self.recording:
            self._capture_frame()
        return obs, info

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
            writer.close()  # ffmpeg writes the rest and ends; VideoWriteError if it could not


# How long closing a video may wait for ffmpeg to write what it holds and end.
FFMPEG_CLOSE_SECONDS = 60.0


class Mp4Writer:
    """An H.264 MP4 written by the ffmpeg of the imageio-ffmpeg wheel, fed H x W x 3 uint8 frames.

    imageio-ffmpeg's own ``write_frames`` (whose command line this is) does not look at how ffmpeg
    ended, so a video ffmpeg could not finish ("Error writing trailer: No space left on device")
    went unnoticed. Here `close` waits for ffmpeg (at most `FFMPEG_CLOSE_SECONDS`) and raises
    `VideoWriteError` with ffmpeg's message unless it ended well. A frame ffmpeg no longer takes
    (it stopped on an error) is dropped: the error is raised once, by `close`.
    """

    def __init__(self, path: str, width: int, height: int, fps: float) -> None:
        import imageio_ffmpeg

        self.path = path
        self.failed: str | None = None
        command = [
            imageio_ffmpeg.get_ffmpeg_exe(),
            "-y",
            "-f",
            "rawvideo",
            "-vcodec",
            "rawvideo",
            "-s",
            f"{width}x{height}",
            "-pix_fmt",
            "rgb24",
            "-r",
            str(Fraction(fps).limit_denominator()),
            "-i",
            "-",
            "-an",
            "-vcodec",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            "-crf",
            "25",  # imageio-ffmpeg's default quality (5 of 10)
        ]
        if width % 2 or height % 2:
            # H.264 in yuv420p needs even sides: the odd one grows by a pixel (imageio-ffmpeg's
            # macro_block_size=2); a side that is even is kept as it is (a 600x400 CartPole frame).
            command += ["-vf", f"scale={width + width % 2}:{height + height % 2}"]
        command += ["-v", "error", path]
        # ffmpeg's messages go to a file, read when it ends: a pipe nobody reads could fill and stop it.
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            # Its own session: Ctrl-C in the terminal stops the program, and ffmpeg still finishes the video.
            start_new_session=True,
        )

    def send(self, frame: np.ndarray) -> None:
        if self.failed is not None:
            return
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(frame.data)  # contiguous (`_capture_frame`): no copy
        except OSError as exc:  # ffmpeg ended (BrokenPipeError): it says why, read in close
            self.failed = f"ffmpeg stopped taking frames ({exc.strerror or exc})"

    def close(self) -> None:
        process = self._process
        try:
            if process.stdin is not None:
                try:
                    process.stdin.close()
                except OSError:
                    pass  # ffmpeg has gone already: its exit status says how it ended
            try:
                status = process.wait(timeout=FFMPEG_CLOSE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise VideoWriteError(
                    f"record_video: {self.path} is unfinished: ffmpeg did not end within "
                    f"{FFMPEG_CLOSE_SECONDS:.0f} s of the episode's end and was stopped"
                ) from None
            if status != 0 or self.failed is not None:
                self._log.seek(0)
                said = ffmpeg_lines(self._log.read().decode(errors="replace"))
                # ffmpeg's first error is the cause ("Error writing trailer: No space left on device"); the
                # lines after it are what it did about it.
                why = (said[0] if said else None) or self.failed or f"ffmpeg exited with status {status}"
                raise VideoWriteError(
                    f"record_video: could not finish {self.path}, which is left unplayable: {why}"
                )
        finally:
            self._log.close()


def unfinished_video(path: str | os.PathLike[str], timeout: float = FFMPEG_CLOSE_SECONDS) -> str | None:
    """Why the MP4 at ``path`` cannot be played (ffmpeg cannot read it to its end), or None if it can."""
    import imageio_ffmpeg

    # Copies the video stream to nothing: reads every packet and the index, decodes none.
    command = [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", os.fspath(path)]
    command += ["-map", "0:v:0", "-c", "copy", "-f", "null", "-"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"ffmpeg could not read it within {timeout:.0f} s"
    said = ffmpeg_lines(done.stderr)
    if done.returncode != 0 or said:
        return f"ffmpeg cannot read it ({said[0] if said else f'status {done.returncode}'})"
    return None


def ffmpeg_lines(text: str) -> list[str]:
    """ffmpeg's messages, without the ``[mp4 @ 0x55d0...]`` each starts with."""
    lines = (re.sub(r"^(\[[^\]]*\]\s*)+", "", line.strip()) for line in text.splitlines())
    return [line for line in lines if line]


def mp4_writer(path: str, width: int, height: int, fps: float) -> Mp4Writer:
    """A started `Mp4Writer` of an H.264 MP4: ``send`` H x W x 3 uint8 frames, then ``close``."""
    return Mp4Writer(path, width, height, fps)


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
    every_n_episodes: Annotated[int, annotated_types.Ge(1)] | None = None,
    episode_trigger: Callable[[int], bool] | None = None,
    env_ids: tuple[Annotated[int, annotated_types.Ge(0)], ...] = (0,),
    name_prefix: str = "rl-video",
    fps: Annotated[int, annotated_types.Ge(1)] | None = None,
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
    check_render_modes(env.metadata.get("render_modes"), _env_label(env))
    if env.render_mode != "rgb_array":
        raise ValueError(
            f"record_video needs an env that renders RGB frames (render_mode='rgb_array'), and "
            f"{_env_label(env)} has render_mode={env.render_mode!r}; "
            f"torchwm sets render_mode='rgb_array' itself unless the env kwargs set another"
        )
    try:
        import imageio_ffmpeg  # noqa: F401
        import moviepy  # noqa: F401
    except ImportError as exc:
        raise missing_extra("video", "the wrapper record_video") from exc
    check_video_folder(video_folder)
    prefix = f"{name_prefix}-env{index}"
    if current_env_index() is None:
        # A single env (make_env); in a vector env, make_vec warned before any env was built
        # (`warn_replaced_videos`), in this process, where a worker's warning would not reach the user.
        warn_if_replacing(video_folder, {index: prefix}, stacklevel=3)  # record_video's caller
    os.makedirs(video_folder, exist_ok=True)
    with warnings.catch_warnings():
        # Gymnasium warns whenever the folder exists, which it does on purpose when several recorded envs
        # share it; `warn_if_replacing` warns with its words when videos would really be replaced.
        warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
        return RecordingEnv(
            env,
            os.fspath(video_folder),
            episode_trigger=episode_trigger,
            name_prefix=prefix,
            fps=fps,
        )


def ends_episodes_at_lost_lives(env: gym.Env) -> bool:
    """Whether ``env``'s stack holds ``episodic_life``: as a wrapper of the chain, or a layer of the fused
    Atari env (its ``stack``)."""
    if getattr(env.unwrapped, "ale", None) is None:
        return False  # episodic_life wraps ALE envs only
    from torchwm.wrappers.atari_fused import FusedAtariEnv
    from torchwm.wrappers.episodic_life import EpisodicLifeEnv

    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, EpisodicLifeEnv):
            return True
        layer = layer.env
    return isinstance(layer, FusedAtariEnv) and any(
        wrapper.name == "episodic_life" for wrapper in layer.stack
    )


def _env_label(env: gym.Env) -> str:
    return repr(env.spec.id) if env.spec else repr(env)


def check_render_modes(render_modes: Any, label: str) -> None:
    """`ValueError` (what Gymnasium's `RecordVideo` raises for an env that cannot render RGB frames) when
    ``render_modes`` (an env's ``metadata["render_modes"]``; None: not said) lacks ``"rgb_array"``."""
    if render_modes is None or "rgb_array" in render_modes:
        return
    raise ValueError(
        f"record_video records the frames an env renders in render_mode 'rgb_array', and the env {label} "
        f"has no render mode 'rgb_array' (its metadata['render_modes']: {list(render_modes)!r})"
    )


def check_video_folder(video_folder: str | os.PathLike[str]) -> None:
    """Refuse a ``video_folder`` that cannot hold videos, before anything is built: a file is in its place
    (`FileExistsError`) or in the place of a folder above it (`NotADirectoryError`), the errors
    ``os.makedirs`` raises there, or it cannot be written (`PermissionError`). Creates nothing."""
    path = Path(os.fspath(video_folder))
    if path.exists() and not path.is_dir():
        raise FileExistsError(
            f"record_video: video_folder {os.fspath(video_folder)!r} is a file, expected a folder (or a "
            f"path where one can be made)"
        )
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise NotADirectoryError(
            f"record_video: video_folder {os.fspath(video_folder)!r} cannot be made: {str(existing)!r} is "
            f"a file, not a folder"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            f"record_video: video_folder {os.fspath(video_folder)!r} cannot be "
            f"{'written' if existing == path else 'made'}: no permission to write in {str(existing)!r}"
        )


def existing_videos(video_folder: str | os.PathLike[str], prefixes: Iterable[str]) -> list[str]:
    """The names of the videos in ``video_folder`` that a recorder of each of ``prefixes`` (its
    ``<name_prefix>-env<i>``) would write again: ``<prefix>-episode-<n>.mp4``."""
    folder = Path(os.fspath(video_folder))
    if not folder.is_dir():
        return []
    found = []
    for prefix in prefixes:
        found += [p.name for p in folder.glob(f"{glob_escape(prefix)}-episode-*.mp4")]
    return sorted(found)


def warn_if_replacing(
    video_folder: str | os.PathLike[str], prefixes: dict[int, str], stacklevel: int = 1
) -> None:
    """Warn, as Gymnasium's `RecordVideo` does (a `UserWarning`, which its ``gymnasium.logger.warn``
    raises) and with its words, when ``video_folder`` holds videos that the recorders of envs
    ``prefixes`` (env index: its ``<name_prefix>-env<i>``) would write again. Gymnasium warns whenever
    the folder exists; this warns only when videos would be replaced, since several recorded envs share
    a folder on purpose. ``stacklevel`` is `warnings.warn`'s (1: this function, 2: its caller). Not
    Gymnasium's logger, whose colours and ``WARN:`` would reach ``torchwm run``'s one-line notes."""
    earlier = existing_videos(video_folder, prefixes.values())
    if not earlier:
        return
    ids = [i for i, prefix in prefixes.items() if existing_videos(video_folder, [prefix])]
    listed = ", ".join(earlier[:3]) + (", ..." if len(earlier) > 3 else "")
    warnings.warn(
        f"record_video: Overwriting existing videos at {os.path.abspath(video_folder)} folder (try "
        f"specifying a different `video_folder` for the `RecordVideo` wrapper if this is not desired): it "
        f"holds {len(earlier)} video(s) of env{'s' if len(ids) > 1 else ''} "
        f"{', '.join(map(str, ids))} from before this env ({listed}), which the episodes recorded now "
        f"replace (those of the same number). Give another video_folder or name_prefix to keep them",
        UserWarning,
        stacklevel=stacklevel,
    )


def warn_replaced_videos(spec: Any) -> None:
    """`warn_if_replacing` for each ``record_video`` wrapper of ``spec`` (a `torchwm.VecSpec`), in this
    process, before any env is built: a wrapper built in a worker warns where the user does not see it."""
    for recorder in spec.wrappers:
        if recorder.fn is not None or recorder.name != "record_video":
            continue
        name_prefix = recorder.kwargs.get("name_prefix", "rl-video")
        ids = [i for i in recorder.kwargs.get("env_ids", (0,)) if i < spec.num_envs]
        warn_if_replacing(
            recorder.kwargs.get("video_folder", "videos"),
            {i: f"{name_prefix}-env{i}" for i in ids},
            stacklevel=4,  # the caller of make_vec_from_spec
        )


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def check_recording(spec: Any) -> None:
    """What the ``record_video`` wrappers of ``spec`` (a `torchwm.VecSpec`) would refuse once built,
    checked in this process before any worker starts: a folder that cannot hold videos
    (`check_video_folder`), an env kwarg ``render_mode`` other than ``"rgb_array"``, an env that has no
    ``rgb_array`` render mode (`check_render_modes`, from the env class's metadata). Builds nothing."""
    recorders = [w for w in spec.wrappers if w.fn is None and w.name == "record_video"]
    if not recorders:
        return
    for recorder in recorders:
        check_video_folder(recorder.kwargs.get("video_folder", "videos"))
    render_mode = spec.env_kwargs.get("render_mode", "rgb_array")
    if render_mode != "rgb_array":
        raise ValueError(
            f"record_video needs an env that renders RGB frames (render_mode='rgb_array'), and the env "
            f"kwargs set render_mode={render_mode!r}"
        )
    gym_spec = gym.registry.get(spec.id) if spec.env_fns is None else None
    if gym_spec is None:
        return
    try:
        creator = (
            gym.envs.registration.load_env_creator(gym_spec.entry_point)
            if isinstance(gym_spec.entry_point, str)
            else gym_spec.entry_point
        )
    except (ImportError, AttributeError, ValueError):
        return  # building the env says what is wrong with its entry point
    metadata = getattr(creator, "metadata", None)
    if isinstance(metadata, dict):
        check_render_modes(metadata.get("render_modes"), repr(spec.id))


def with_video(spec: Any, video_folder: str | os.PathLike[str], **options: Any) -> Any:
    """``spec`` (a `torchwm.VecSpec`) with ``record_video`` at the end of its stack: what ``torchwm run
    --video``
    builds. ``options`` are record_video's (``every_n_episodes``, ``env_ids``, ...).

    Raises:
        MissingExtraError: moviepy or imageio-ffmpeg is not installed.
        OSError, ValueError: what `check_recording` refuses (a folder that cannot hold videos, an env
            that cannot render RGB frames).

    All checked here, before any worker starts.
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
    spec = spec.replace(
        wrappers=(*spec.wrappers, recorder), env_kwargs={**wrapper_env_kwargs((recorder,)), **spec.env_kwargs}
    )
    check_recording(spec)
    return spec
