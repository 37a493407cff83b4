"""``torchwm run``: build the env a config file, a shipped config's name or an env id describes and step it.

The policy is random (seeded ``action_space.sample()``) or the user's ``--policy module:function``; code a
config names runs only with ``--allow-policy-import``. Steps per second are timed from the end of the
first reset; ``--video`` records env 0 and the videos written are named after the figures. Ctrl-C prints
the figures so far and exits 130; a video that could not be finished exits 1.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from torchwm.cli.common import config_format, positive_int
from torchwm.cli.setup import add_setup_arguments, build_envs, load_policy, load_setup
from torchwm.cli.summary import EpisodeTracker, RunReport, print_summary
from torchwm.command_line import EXIT_INTERRUPTED, EXIT_OK, INPUT_ERRORS, Commands, UsageError
from torchwm.config import dump_config
from torchwm.factory import RECORDERS
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.rollout import Reset, Result, policy_actions, rollout
from torchwm.wrappers.record_video import VideoWriteError, check_recording


def register(commands: Commands) -> None:
    parser = commands.add_command("run", "build an env from a config or an env id and step it", cmd_run)
    parser.add_argument(
        "--steps", type=positive_int, help="vector steps to run (default: [run] steps, or 1000)"
    )
    add_setup_arguments(parser)
    parser.add_argument(
        "--policy",
        metavar="MODULE:FUNCTION",
        help="policy(obs, action_space) -> actions (default: seeded action_space.sample())",
    )
    parser.add_argument(
        "--allow-policy-import",
        action="store_true",
        help="let the config's run.policy import and run that code (refused without this flag)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (every default explicit) in the file's format (TOML, YAML or "
        "JSON; TOML for an env id) and exit",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--video",
        metavar="DIR",
        help="record env 0's episodes to MP4 files in DIR (record_video, "
        "Gymnasium's episode schedule; needs torchwm's [video] extra)",
    )


def cmd_run(args: argparse.Namespace) -> int:
    spec, run_options = load_setup(args)
    multiagent = isinstance(spec, MultiAgentSpec)
    try:
        if multiagent:
            check_multiagent_run(spec, args.video)  # no wrapper stack, so no recorder in it
        else:
            if args.video is not None:
                from torchwm.wrappers.record_video import with_video

                spec = with_video(spec, args.video)
            check_recording(spec)  # record_video from a config too: refused here, not in a worker
    except (OSError, ValueError) as exc:
        if isinstance(exc, INPUT_ERRORS):
            raise
        raise UsageError(str(exc)) from exc
    if args.steps is not None:
        run_options = run_options.model_copy(update={"steps": args.steps})
    if args.print_config:
        # With the [run] table (the --steps given included): the printed config runs the same run.
        sys.stdout.write(dump_config(spec, config_format(args.target), run=run_options))
        return EXIT_OK
    steps = run_options.steps
    if args.policy is None and run_options.policy is not None and not args.allow_policy_import:
        # A config is data (YAML is read with safe_load); naming code in it runs nothing unless asked.
        raise UsageError(
            f"run.policy: the config asks to import and run {run_options.policy!r}; code named in a "
            f"config is imported only with --allow-policy-import (or pass --policy {run_options.policy})"
        )
    policy_name = args.policy or run_options.policy
    policy = load_policy(policy_name) if policy_name else None

    videos_before = video_files(spec) if not multiagent and recorders_of(spec) else None
    video_error: VideoWriteError | None = None
    began = time.perf_counter()
    try:
        envs = build_envs(spec)
    except KeyboardInterrupt:
        print("torchwm run: interrupted while building the env", file=sys.stderr)
        return EXIT_INTERRUPTED
    agent_names = tuple(envs.possible_agents) if multiagent else ()
    report = RunReport(spec, EpisodeTracker(spec.num_envs, spec.autoreset_mode, agent_names))
    interrupted = False
    each = f" ({len(agent_names)} agents each: {', '.join(agent_names)})" if multiagent else ""
    print(
        f"torchwm run: {spec.id} x {spec.num_envs} envs{each} on {spec.backend} "
        f"(autoreset {spec.autoreset_mode}, seed {spec.seed}), {steps} steps",
        file=sys.stderr,
        flush=True,
    )
    progress = _progress(steps, disable=args.no_progress)

    def started(reset: Reset) -> None:
        if reset.first:
            # Steps per second count the stepping only: building the env and its first reset are start-up.
            report.started = time.perf_counter()

    def counted(result: Result) -> np.ndarray:
        done = report.update(
            result.rewards, result.terminations, result.truncations, result.infos, env_ids=result.env_ids
        )
        progress.update(1)
        return result.env_ids[done]

    try:
        rollout(
            envs, policy_actions(envs, spec, policy), counted, lambda: report.steps >= steps, on_reset=started
        )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        report.ended = time.perf_counter()
        progress.close()
        try:
            envs.close()
        except VideoWriteError as exc:
            video_error = exc  # said after the figures, which are good
    report.startup = (report.started if report.started is not None else report.ended) - began
    print_summary(report, interrupted)
    if videos_before is not None:
        unplayable = report_videos(spec, videos_before)
        video_error = video_error or unplayable
    if video_error is not None:
        raise video_error
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def check_multiagent_run(spec: MultiAgentSpec, video: str | None) -> None:
    """What ``torchwm run`` refuses of a multi-agent setup, before building it: it steps the ``agents``
    layout (a row per agent, the rows `torchwm.rollout` and the policy take), and records no video."""
    if spec.layout != "agents":
        raise UsageError(
            f"multiagent.layout: torchwm run steps layout 'agents' (a row per agent, each agent's return "
            f"reported), got {spec.layout!r}; run it with --set multiagent.layout=agents, or step the "
            f"{spec.layout!r} layout from Python (torchwm.multiagent.make_vec_from_config)"
        )
    if video is not None:
        raise UsageError(
            "--video: a multi-agent setup has no wrapper stack to record with; run it without --video"
        )


def recorders_of(spec: Any) -> list[Any]:
    return [w for w in spec.wrappers if w.fn is None and w.name in RECORDERS]


def video_files(spec: Any) -> dict[Path, int]:
    """The MP4 files in the folders of the spec's ``record_video`` wrappers, with their modification
    times: what a run finds there before it starts."""
    found: dict[Path, int] = {}
    for recorder in recorders_of(spec):
        folder = Path(recorder.kwargs.get("video_folder", "videos"))
        if folder.is_dir():
            found.update({path: path.stat().st_mtime_ns for path in folder.glob("*.mp4")})
    return found


def report_videos(spec: Any, before: dict[Path, int]) -> VideoWriteError | None:
    """Say which videos the run wrote, folder by folder; the error of the first one left unplayable (a worker
    process closes its envs where no error reaches this one), or None."""
    from torchwm.wrappers.record_video import unfinished_video

    written = {path: mtime for path, mtime in video_files(spec).items() if before.get(path) != mtime}
    folders = dict.fromkeys(Path(r.kwargs.get("video_folder", "videos")) for r in recorders_of(spec))
    for folder in folders:
        names = sorted((path.name for path in written if path.parent == folder), key=in_number_order)
        print(
            f"videos written to {folder}{os.sep}: {', '.join(names)}"
            if names
            else f"no video written to {folder}{os.sep} (no recorded episode started)"
        )
    sys.stdout.flush()
    for path in sorted(written):
        why = unfinished_video(path)
        if why is not None:
            return VideoWriteError(f"record_video: {path} is unplayable: {why}")
    return None


def in_number_order(name: str) -> tuple[Any, ...]:
    """A sort key that orders the numbers in names by value: ``episode-8`` before ``episode-27``."""
    # re.split with a group alternates text and digits, so two keys compare text with text, ints with ints.
    return tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name)))


def _progress(total: int, disable: bool) -> Any:
    return tqdm(
        total=total, unit="step", file=sys.stderr, disable=disable, mininterval=0.5, dynamic_ncols=True
    )
