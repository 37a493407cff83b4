"""The ``torchwm`` command: ``list``, ``run``, ``bench`` and ``check`` (also ``python -m torchwm``).

``run`` builds the env a config file, a shipped config's name (``pong``) or
an env id describes and steps it with a random (or the user's) policy,
reporting steps per second (timed from the end of the first reset) and
episode returns (whole games where ``episode_statistics`` records them);
``list`` shows every registered name, the plugin behind it and the shipped
configs; ``bench`` is the front end to `torchwm.bench`; ``check`` validates
a config (every error with its key path) or runs `torchwm.testing` on a
backend. Every user error on every command (a bad option, a missing file, an
unknown key or name with the closest one suggested, a missing extra) prints
one line on stderr and exits with status 2, without a traceback
(``--traceback`` shows it); a failed conformance check or measurement, or a
video ``run --video`` could not finish, exits 1 and Ctrl-C during ``run``
exits 130 after printing the figures so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import gymnasium
import numpy as np
from tqdm import tqdm

from torchwm import bench, listing
from torchwm.config import (
    CONFIG_SUFFIXES,
    apply_overrides,
    check_backend_options,
    check_expansion,
    did_you_mean,
    dump_config,
    find_config,
    interpolate_env,
    is_config_reference,
    load_run_config,
    read_config,
    shipped_configs,
    validate_config,
)
from torchwm.errors import (
    ConfigError,
    DuplicateNameError,
    UnknownNameError,
    UnsupportedStackError,
    WorkerError,
)
from torchwm.extras import MissingExtraError, missing_extra
from torchwm.factory import RECORDERS, build_env, make_vec_from_spec, spec_env_fns
from torchwm.native import kernel_status
from torchwm.plugins import DEFAULT_PLUGINS, backend_options, failed_plugins, plugin_manager, registry
from torchwm.spec import EPISODE_STATISTICS, resolve_wrapper, with_env_fn
from torchwm.vector.pool import WorkerPool, check_pool_options
from torchwm.vector.transports.processes import ProcessWorker
from torchwm.wrappers.record_video import VideoWriteError, check_recording

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
KINDS = ("backends", "wrappers", "sources", "plugins", "configs")


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit status 2."""


# Errors that mean "the input was wrong" (or an extra is missing), not "torchwm is broken": one line,
# status 2.
INPUT_ERRORS = (
    UsageError,
    ConfigError,
    UnknownNameError,
    UnsupportedStackError,
    DuplicateNameError,
    MissingExtraError,
    gymnasium.error.DependencyNotInstalled,
)


class OneLineParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line (no usage block), with a suggestion."""

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            message += did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status.

    Example:
        >>> from torchwm.cli import main
        >>> main(["run", "CartPole-v1", "--steps", "10", "--no-progress"])  # doctest: +SKIP
        0
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unknown_arguments(getattr(args, "parser", parser), unknown)
    if args.command is None:
        parser.error("a command is required: list, run, bench or check (torchwm --help describes them)")
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", UserWarning)
            try:
                return args.handler(args)
            finally:
                for note in notes:
                    print(f"torchwm {args.command}: note: {note.message}", file=sys.stderr)
    except Exception as exc:
        status = _status_of(exc)
        if status is None or args.traceback:
            raise
        print(f"torchwm {args.command}: error: {_first_line(_explain(exc))}", file=sys.stderr)
        return status


def _status_of(exc: BaseException) -> int | None:
    """The exit status of an error shown as one line, or None for an error that gets its traceback."""
    if isinstance(exc, INPUT_ERRORS):
        return EXIT_USAGE
    if isinstance(exc, bench.BenchChildError):
        # The child's own error is the first line; --traceback shows its stderr.
        return EXIT_USAGE if exc.input_error else EXIT_FAILED
    if isinstance(exc, VideoWriteError):
        return EXIT_FAILED  # the input was fine; the video could not be written (a full disk)
    return None


def _explain(exc: BaseException) -> str:
    if "pygame" in str(exc) and isinstance(exc, gymnasium.error.DependencyNotInstalled):
        return str(missing_extra("render", "rendering this env"))
    return str(exc).strip() or type(exc).__name__


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0]


def _unknown_arguments(parser: argparse.ArgumentParser, unknown: list[str]) -> NoReturn:
    options = [s for action in parser._actions for s in action.option_strings]
    first = next((a for a in unknown if a.startswith("-")), unknown[0])
    hint = did_you_mean(first.partition("=")[0], options) if first.startswith("-") else ""
    parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="torchwm", description="Vectorized RL environments from a name, a backend and a wrapper stack."
    )
    parser.add_argument("--version", action="version", version=f"torchwm {_version('torchwm')}")
    common = OneLineParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    listing = commands.add_parser(
        "list",
        parents=[common],
        help="registered backends, wrappers, sources, plugins and the shipped configs",
    )
    listing.add_argument("kind", nargs="?", metavar="KIND", help=f"one of {', '.join(KINDS)} (default: all)")
    listing.set_defaults(handler=cmd_list, parser=listing)

    run = commands.add_parser(
        "run", parents=[common], help="build an env from a config or an env id and step it"
    )
    run.add_argument(
        "target",
        metavar="CONFIG_OR_ENV_ID",
        help="a config file (.toml, .yaml, .yml, .json), a shipped config by name (torchwm list configs: "
        "pong, ...), or an env id such as ALE/Pong-v5",
    )
    run.add_argument(
        "--steps", type=_positive_int, help="vector steps to run (default: [run] steps, or 1000)"
    )
    run.add_argument("--num-envs", type=_positive_int, help="number of envs (overrides num_envs)")
    run.add_argument(
        "--backend", help="backend name (overrides backend; backend_kwargs it does not take are dropped)"
    )
    run.add_argument(
        "--seed", type=_non_negative_int, help="seed of the first reset and of the random policy"
    )
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key: num_envs=16, backends.shmem.num_workers=2, wrappers[1].stack_size=2",
    )
    run.add_argument(
        "--policy",
        metavar="MODULE:FUNCTION",
        help="policy(obs, action_space) -> actions (default: seeded action_space.sample())",
    )
    run.add_argument(
        "--allow-policy-import",
        action="store_true",
        help="let the config's run.policy import and run that code (refused without this flag)",
    )
    run.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (every default explicit) in the file's format (TOML, YAML or "
        "JSON; TOML for an env id) and exit",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--video",
        metavar="DIR",
        help="record env 0's episodes to MP4 files in DIR (record_video, "
        "Gymnasium's episode schedule; needs torchwm's [video] extra)",
    )
    run.set_defaults(handler=cmd_run, parser=run)

    bench_parser = commands.add_parser(
        "bench",
        parents=[common],
        help="steps per second of backends and their peers side by side (torchwm.bench)",
    )
    bench.add_arguments(bench_parser)
    bench_parser.set_defaults(handler=bench.run_command, parser=bench_parser)

    check = commands.add_parser(
        "check",
        parents=[common],
        help="validate a config file, or run the conformance checks (torchwm.testing) on a backend",
    )
    check.add_argument(
        "target",
        nargs="?",
        metavar="BACKEND_OR_CONFIG",
        help="a backend name (sync, shmem, ...), or a config file (.toml, .yaml, .yml, .json) or shipped "
        "config name; a name that is both a backend and a shipped config (ray) is the backend",
    )
    check.add_argument(
        "--config", metavar="CONFIG", help="the config file or shipped config to validate (never a backend)"
    )
    check.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a backend: one of its options, num_workers=2 (or backend_kwargs.num_workers=2); "
        "a config: a key override, as torchwm run --set takes it",
    )
    check.set_defaults(handler=cmd_check, parser=check)
    return parser


# ----------------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace) -> int:
    if args.kind is not None and args.kind not in KINDS:
        raise UsageError(
            f"list {args.kind!r}: expected one of {', '.join(KINDS)}{did_you_mean(args.kind, KINDS)}"
        )
    kinds = [args.kind] if args.kind else list(KINDS)
    describe = {
        "backends": listing.list_backends,
        "wrappers": listing.list_wrappers,
        "sources": listing.list_sources,
    }
    for n, kind in enumerate(kinds):
        if n:
            print()
        print(f"{kind}:")
        rows: list[tuple[str, ...]]
        if kind == "plugins":
            rows = [(name, dist, ", ".join(provides)) for name, dist, provides in _plugins()]
        elif kind == "configs":
            rows = [(c.name, c.description) for c in listing.list_configs()]
        else:
            rows = []
            for info in describe[kind]():
                dist = f"{info.distribution or '?'} {info.version or ''}".strip()
                options = ", ".join(
                    k if v is listing.REQUIRED else f"{k}={v!r}" for k, v in info.options.items()
                )
                rows.append(
                    (
                        info.name,
                        f"{info.plugin} ({dist})",
                        f"options: {options or '(none)'}"
                        + (f"; {info.description}" if info.description else ""),
                    )
                )
        _print_rows(rows)
    if args.kind is None:
        print(f"\nfused Atari env, after the emulator: {kernel_status()}")
    return EXIT_OK


def _plugins() -> list[tuple[str, str, list[str]]]:
    """(plugin name, "distribution version", what it registered) for every loaded plugin."""
    manager = plugin_manager()
    dists = {
        manager.get_name(plugin): f"{d.metadata['name']} {d.version}"
        for plugin, d in manager.list_plugin_distinfo()
    }
    provided: dict[str, list[str]] = {}
    for kind in ("backend", "wrapper", "source"):
        for entry in registry(kind):
            provided.setdefault(entry.plugin, []).append(f"{kind} {entry.name}")
    rows = []
    for name, plugin in sorted(manager.list_name_plugin()):
        if plugin is None:
            rows.append((name, "blocked", ["(disabled by TORCHWM_DISABLE_PLUGINS)"]))
            continue
        dist = dists.get(name) or (
            f"torchwm {_version('torchwm')}" if name in DEFAULT_PLUGINS else "(registered at run time)"
        )
        rows.append((name, dist, provided.get(name, ["(nothing)"])))
    for failed in failed_plugins():
        rows.append(
            (
                failed.name,
                f"{failed.distribution or '?'} {failed.version or ''}".strip(),
                [f"NOT LOADED: {failed.error}"],
            )
        )
    return rows


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _print_rows(rows: Sequence[tuple[str, ...]]) -> None:
    if not rows:
        print("  (none)")
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        print("  " + "  ".join([*cells, row[-1]]))


# ----------------------------------------------------------------------------- run


@dataclasses.dataclass
class EpisodeTracker:
    """Per-env returns and lengths across autoresets, and the episodes that finished.

    Under ``next_step`` autoreset the step after an episode ends is the reset step of that env:
    its reward (0) and flags belong to no episode, so that row is skipped once.
    """

    num_envs: int
    autoreset_mode: str = "next_step"
    returns: np.ndarray = dataclasses.field(init=False)
    lengths: np.ndarray = dataclasses.field(init=False)
    finished_returns: list[float] = dataclasses.field(default_factory=list)
    finished_lengths: list[int] = dataclasses.field(default_factory=list)
    _resetting: np.ndarray = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.returns = np.zeros(self.num_envs, dtype=np.float64)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._resetting = np.zeros(self.num_envs, dtype=np.bool_)

    def update(self, rewards: Any, terminations: Any, truncations: Any) -> np.ndarray:
        """Add one vector step; returns which envs ended an episode on it."""
        live = ~self._resetting
        self.returns[live] += np.asarray(rewards, dtype=np.float64)[live]
        self.lengths[live] += 1
        done = (np.asarray(terminations) | np.asarray(truncations)) & live
        for i in np.flatnonzero(done):
            self.finished_returns.append(float(self.returns[i]))
            self.finished_lengths.append(int(self.lengths[i]))
        self.returns[done] = 0.0
        self.lengths[done] = 0
        if self.autoreset_mode == "next_step":
            self._resetting = done
        return done


# The clock of ``torchwm run``'s figures (a module attribute, so that a test can give a fake one).
clock: Callable[[], float] = time.perf_counter


def cmd_run(args: argparse.Namespace) -> int:
    spec, run_options = _load_run(args)
    try:
        if args.video is not None:
            from torchwm.wrappers.record_video import with_video

            spec = with_video(spec, args.video)
        check_recording(spec)  # record_video from a config too: refused here, not in a worker
    except (OSError, ValueError) as exc:
        if isinstance(exc, INPUT_ERRORS):
            raise
        raise UsageError(str(exc)) from exc
    if args.print_config:
        sys.stdout.write(dump_config(spec, config_format(args.target)))
        return EXIT_OK
    steps = args.steps or run_options.steps
    if args.policy is None and run_options.policy is not None and not args.allow_policy_import:
        # A config is data (YAML is read with safe_load); naming code in it runs nothing unless asked.
        raise UsageError(
            f"run.policy: the config asks to import and run {run_options.policy!r}; code named in a "
            f"config is imported only with --allow-policy-import (or pass --policy {run_options.policy})"
        )
    policy_name = args.policy or run_options.policy
    policy = load_policy(policy_name) if policy_name else None

    videos_before = video_files(spec) if recorders_of(spec) else None
    video_error: VideoWriteError | None = None
    began = clock()
    try:
        envs = _build(spec)
    except KeyboardInterrupt:
        print("torchwm run: interrupted while building the env", file=sys.stderr)
        return EXIT_INTERRUPTED
    report = RunReport(spec, EpisodeTracker(spec.num_envs, spec.autoreset_mode))
    interrupted = False
    print(
        f"torchwm run: {spec.id} x {spec.num_envs} envs on {spec.backend} "
        f"(autoreset {spec.autoreset_mode}, seed {spec.seed}), {steps} steps",
        file=sys.stderr,
        flush=True,
    )
    progress = _progress(steps, disable=args.no_progress)
    try:
        obs, _ = envs.reset()
        # Steps per second count the stepping only: building the env and its first reset are start-up.
        report.started = clock()
        for _ in range(steps):
            actions = policy(obs, envs.action_space) if policy else envs.action_space.sample()
            obs, rewards, terminations, truncations, infos = envs.step(actions)
            done = report.update(rewards, terminations, truncations, infos)
            if spec.autoreset_mode == "disabled" and done.any():
                obs, _ = envs.reset(options={"reset_mask": done})
            progress.update(1)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        report.ended = clock()
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


def config_format(target: str) -> str:
    """The format ``--print-config`` writes: the config file's own (toml, yaml or json); TOML for an env
    id."""
    if not is_config_reference(target):
        return "toml"
    suffix = find_config(target).suffix.lower().lstrip(".")
    return "yaml" if suffix == "yml" else suffix


def _load_run(args: argparse.Namespace) -> tuple[Any, Any]:
    overrides = list(args.overrides)
    # The options win over the file's keys, as --set does.
    if args.num_envs is not None:
        overrides.append(f"num_envs={args.num_envs}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    target = args.target if is_config_reference(args.target) else {"id": args.target}
    return load_run_config(target, overrides, backend=args.backend)


def _build(spec: Any) -> Any:
    try:
        return make_vec_from_spec(spec)
    except (MemoryError, WorkerError) as exc:
        if not is_memory_error(exc):
            raise
        raise UsageError(memory_message(spec, exc)) from exc
    except (TypeError, ValueError) as exc:
        # An option value the backend or the env refuses (a bad backend_kwargs or env_kwargs value) is bad
        # input.
        if isinstance(exc, INPUT_ERRORS):
            raise
        raise UsageError(f"building {spec.id} x {spec.num_envs} on {spec.backend!r} failed: {exc}") from exc


def is_memory_error(exc: BaseException) -> bool:
    """A `MemoryError`, here or in a worker (whose `WorkerError` names it)."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, WorkerError) and re.search(r"\braised \w*MemoryError\(", str(exc)) is not None


# numpy's MemoryError: "Unable to allocate 931. GiB for an array with shape (1000000, 1000000) and data type
# uint8"
_ALLOCATION = re.compile(r"Unable to allocate .*? for an array with shape \(([\d, ]*)\)[^\n]*")


def memory_message(spec: Any, exc: BaseException) -> str:
    """One line for a `MemoryError` met building ``spec``: the option that asked for too much when the
    size numpy could not allocate shows which (its value is a side of the array), else numpy's message."""
    text = str(exc) + "\n" + getattr(exc, "remote_traceback", "")
    allocation = _ALLOCATION.search(text)
    said = allocation.group(0) if allocation else (_first_line(text) if text.strip() else "MemoryError")
    sides = {int(n) for n in re.findall(r"\d+", allocation.group(1))} if allocation else set()
    candidates = [
        (value, f"wrapper {wrapper.name!r} option {key}={value}")
        for wrapper in spec.wrappers
        if wrapper.fn is None
        for key, value in wrapper.kwargs.items()
        if type(value) is int and value > 1 and value in sides
    ] + [
        (value, f"env kwarg {key}={value}")
        for key, value in spec.env_kwargs.items()
        if type(value) is int and value > 1 and value in sides
    ]
    if candidates:
        _, option = max(candidates, key=lambda c: c[0])
        return f"{option} asks for more memory than this machine has ({said})"
    return f"building {spec.id} x {spec.num_envs} on {spec.backend!r} ran out of memory: {said}"


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
        names = sorted(path.name for path in written if path.parent == folder)
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


def _progress(total: int, disable: bool) -> Any:
    return tqdm(
        total=total, unit="step", file=sys.stderr, disable=disable, mininterval=0.5, dynamic_ncols=True
    )


@dataclasses.dataclass
class RunReport:
    """What ``torchwm run`` measured: the steps, the timing window, the learner's episodes and the recorded
    ones.

    ``games`` are the (return, length) pairs ``episode_statistics`` recorded in ``infos["episode"]``
    (``infos["final_info"]["episode"]`` under ``same_step``): on the env the source makes, so on Atari a
    whole game across lives on the raw score, its length in that env's steps. ``tracker`` sums what the
    learner sees (a life each under ``episodic_life``, clipped under ``clip_reward``).
    """

    spec: Any
    tracker: EpisodeTracker
    steps: int = 0
    started: float | None = None  # the clock after the first reset: the timing window starts here
    ended: float | None = None
    startup: float = 0.0  # building the env and its first reset
    games: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    @property
    def records_games(self) -> bool:
        return any(w.name == EPISODE_STATISTICS for w in self.spec.wrappers)

    def update(self, rewards: Any, terminations: Any, truncations: Any, infos: Any) -> np.ndarray:
        self.steps += 1
        self.games += recorded_episodes(infos)
        return self.tracker.update(rewards, terminations, truncations)

    @property
    def elapsed(self) -> float:
        return (self.ended - self.started) if self.started is not None and self.ended is not None else 0.0


def recorded_episodes(infos: Any) -> list[tuple[float, int]]:
    """(return, length) of each episode ``episode_statistics`` recorded in one vector step's infos."""
    found: list[tuple[float, int]] = []
    if not isinstance(infos, dict):
        return found
    final = infos.get("final_info")
    for where in (infos, final if isinstance(final, dict) else {}):
        episode, mask = where.get("episode"), where.get("_episode")
        if episode is None or mask is None:
            continue
        found += [(float(episode["r"][i]), int(episode["l"][i])) for i in np.flatnonzero(mask)]
    return found


def length_unit(spec: Any) -> str:
    """What ``episode_statistics``'s length ``l`` counts: steps of the env the source makes.

    On an ALE env those are emulator frames when it skips none (``frameskip=1``, which
    ``atari_preprocessing`` sets: its frame skip, no-op starts and FIRE resets all count).
    """
    if spec.family != "atari":
        return "steps of the env itself (below the wrappers)"
    frameskip = spec.env_kwargs.get("frameskip", 1)
    if frameskip == 1:
        return "emulator frames"
    if isinstance(frameskip, int):
        return f"ALE env steps of {frameskip} frames each"
    return f"ALE env steps (frameskip {frameskip!r})"


def _frames_per_step(spec: Any) -> int | None:
    """Emulator frames in one env step under ``atari_preprocessing`` (its frame_skip), else None."""
    pre = next((w.kwargs for w in spec.wrappers if w.name == "atari_preprocessing"), None)
    if spec.family != "atari" or pre is None or spec.env_kwargs.get("frameskip", 1) != 1:
        return None
    return int(pre["frame_skip"])


def _learner_notes(spec: Any) -> str:
    """How the learner's episodes differ from whole games, for the stack in use."""
    notes = []
    names = {w.name: w.kwargs for w in spec.wrappers}
    if "episodic_life" in names or names.get("atari_preprocessing", {}).get("terminal_on_life_loss"):
        notes.append("one per life lost")
    if "clip_reward" in names:
        notes.append("clipped rewards")
    return f" ({', '.join(notes)})" if notes else ""


def print_summary(report: RunReport, interrupted: bool) -> None:
    spec, tracker, steps = report.spec, report.tracker, report.steps
    env_steps = steps * spec.num_envs
    elapsed = report.elapsed
    rate = env_steps / elapsed if elapsed > 0 else float("nan")
    print(
        f"{'interrupted after' if interrupted else 'ran'} {steps} steps x {spec.num_envs} envs "
        f"= {env_steps} env steps in {elapsed:.2f} s (after a start-up of {report.startup:.2f} s, not timed: "
        f"building the env and its first reset)"
    )
    frames = _frames_per_step(spec)
    print(
        f"steps per second: {rate:,.0f} env steps/s ({rate / spec.num_envs:,.0f} vector steps/s"
        + (f"; {rate * frames:,.0f} emulator frames/s at {frames} frames a step" if frames else "")
        + ")"
    )
    finished = tracker.finished_returns
    if report.records_games:
        games = report.games
        what = "whole games across lives, raw score" if spec.family == "atari" else "on the env itself"
        print(f"episodes finished: {len(games)} (recorded by episode_statistics: {what})")
        if games:
            returns, lengths = [r for r, _ in games], [n for _, n in games]
            print(
                f"return: mean {np.mean(returns):.2f}, max {np.max(returns):.2f} "
                f"(mean length {np.mean(lengths):.1f} {length_unit(spec)})"
            )
        print(
            f"learner episodes (terminated or truncated): {len(finished)}{_learner_notes(spec)}"
            + (
                f", return mean {np.mean(finished):.2f}, mean length {np.mean(tracker.finished_lengths):.1f} "
                "steps"
                if finished
                else ""
            )
        )
    else:
        print(f"episodes finished: {len(finished)}")
        if finished:
            print(
                f"return: mean {np.mean(finished):.2f}, max {np.max(finished):.2f} "
                f"(mean length {np.mean(tracker.finished_lengths):.1f} steps{_learner_notes(spec)})"
            )
    sys.stdout.flush()


def load_policy(name: str) -> Callable[[Any, Any], Any]:
    """``"module:function"`` -> the function; the current directory is importable, as with ``python -m``."""
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"--policy expects module:function, got {name!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--policy {name}: cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UsageError(f"--policy {name}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise UsageError(f"--policy {name}: {attribute!r} is not callable")
    return target


# ----------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    kind, target = check_target(args.target, args.config)
    if kind == "config":
        return check_config(target, args.overrides)
    return check_backend(target, args.overrides)


def check_target(target: str | None, config: str | None) -> tuple[str, str]:
    """``("backend", name)`` or ``("config", target)``: what ``torchwm check`` was given.

    In this order: ``--config X`` is a config; a name with a config suffix (``.toml``, ``.yaml``,
    ``.yml``, ``.json``) or a path separator is a config file; a registered backend's name is that
    backend; a shipped config's name is that config; any other existing file is a config (and is
    refused as one). So a name that is both a backend and a shipped config (``ray``) is the backend,
    as it was before ``check`` read configs: ``--config ray`` checks the config.
    """
    if config is not None:
        if target is not None:
            raise UsageError(
                f"check: give a backend or --config, not both (got {target!r} and --config {config!r})"
            )
        return "config", config
    if target is None:
        raise UsageError(
            "check: expected a backend name or a config file (torchwm check sync, torchwm check my.yaml)"
        )
    if Path(target).suffix.lower() in CONFIG_SUFFIXES or os.sep in target or "/" in target:
        return "config", target
    backends = registry("backend").names()
    if target in backends:
        return "backend", target
    shipped = shipped_configs()
    if target in shipped or Path(target).is_file():
        return "config", target
    if did_you_mean(target, backends):
        registry("backend").get(target)  # UnknownNameError, with the closest names
    if did_you_mean(target, list(shipped)):
        return "config", target  # the loader says which shipped config is close
    raise UsageError(
        f"check {target!r}: not a backend nor a config{did_you_mean(target, [*backends, *shipped])}; "
        f"the backends are: {', '.join(backends)}; the shipped configs: {', '.join(shipped) or '(none)'}; "
        f"a config file's name ends in {', '.join(CONFIG_SUFFIXES)}"
    )


def check_config(target: str, overrides: Sequence[str]) -> int:
    """``torchwm check CONFIG``: every error with its key path (status 2), or the resolved config (status
    0)."""
    spec, errors = config_errors(target, overrides)
    if errors:
        for error in errors:
            print(f"torchwm check: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"torchwm check: {target}: valid ({spec.id} x {spec.num_envs} on {spec.backend}); "
        f"the resolved config, every default explicit:",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.write(dump_config(spec, config_format(target)))
    return EXIT_OK


# The key path an error message starts with: "wrappers[1].stack_size: expected ...".
_ERROR_KEY = re.compile(r"^([A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*): ")
_KEY_PART = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")
# Errors after which nothing else can be checked: every other key is read against the env id.
_FATAL_KEYS = ("id", "config")
MAX_CONFIG_ERRORS = 50


def config_errors(target: str, overrides: Sequence[str] = ()) -> tuple[Any, list[str]]:
    """The resolved `VecSpec` of a config (None if it has errors) and every error in it, each with its key
    path.

    The loader stops at the first error; to find the next, the key at fault is set aside (a bad
    option, an unknown key, a bad wrapper item) and the rest validated again, until the rest is
    valid or an error leaves nothing to check (a missing or unknown ``id``, an unreadable file).
    Each message starts with the file's name, then the key as the file writes it (wrapper indexes
    are those of the file, whatever was set aside before).
    """
    try:
        spec = load_run_config(target, overrides)[0]
        problem = preflight_problem(spec)
        if problem is None:
            return spec, []
        first = f"{target}: {problem[1]}"
    except ConfigError as exc:
        first = str(exc)
    try:
        path = find_config(target)
        label = f"{target}: " if path == Path(target) else f"{target} ({path}): "
        data = read_config(path)
        check_expansion(data)
        data = apply_overrides(interpolate_env(data), overrides)
    except ConfigError:
        return None, [first]  # the file itself (missing, unreadable, not a table): one error
    wrappers = data.get("wrappers")
    positions = list(range(len(wrappers))) if isinstance(wrappers, list) else []
    errors: list[str] = []
    for _ in range(MAX_CONFIG_ERRORS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a version note is no error, and the loader gave it once
                spec = validate_config(data)[0]
        except ConfigError as exc:
            message = str(exc)
        else:
            problem = preflight_problem(spec)
            if problem is None:
                break
            message = _keyed(problem, spec, data)
        key = _ERROR_KEY.match(message)
        parts = _key_parts(key.group(1)) if key else []
        if (
            parts[:1] == ["wrappers"]
            and len(parts) > 1
            and isinstance(parts[1], int)
            and parts[1] < len(positions)
        ):
            message = message.replace(f"wrappers[{parts[1]}]", f"wrappers[{positions[parts[1]]}]", 1)
        if f"{label}{message}" in errors:
            break
        errors.append(f"{label}{message}")
        if not parts or parts[0] in _FATAL_KEYS or not _set_aside(data, parts, positions):
            break
    return None, errors or [first]


# What building a vector env refuses as bad input (`_build`), and a MemoryError (an option asking for too
# much).
_BUILD_ERRORS = (TypeError, ValueError, MemoryError, gymnasium.error.Error, *INPUT_ERRORS)


def preflight_problem(spec: Any) -> tuple[str | int | None, str] | None:
    """What building ``spec``'s vector env would refuse, found without starting a process: ``(where,
    message)``, ``where`` the backend option (a str) or the index in ``spec.wrappers`` (an int) at fault,
    or None.

    The same checks, not copies: the ``record_video`` checks ``torchwm run`` makes (`check_recording`);
    a worker pool's option checks (`check_pool_options`) and a process transport's (its ``configure``, which
    checks and starts nothing; Ray's connects to Ray, so a plugin transport's is left to the build); and
    one env of the spec built and closed here, as a worker would build it (the wrappers check their
    options when they wrap an env).
    """
    try:
        check_recording(spec)
    except (OSError, ValueError) as exc:
        return next(i for i, w in enumerate(spec.wrappers) if w.name in RECORDERS), str(exc)
    factory = registry("backend").get(spec.backend).factory
    options = dict(spec.backend_kwargs)
    if isinstance(factory, type) and issubclass(factory, WorkerPool):
        try:
            settings = check_pool_options(
                spec.backend, spec.num_envs, options, tuple(factory.transport.OPTIONS), factory.unit
            )
            if issubclass(factory.transport, ProcessWorker):
                pooled = with_env_fn(spec, settings.env_fn, spec.backend)
                factory.transport.configure(
                    spec.backend, pooled, spec_env_fns(pooled), settings.transport_options, settings
                )
        except (TypeError, ValueError) as exc:
            # The pool's messages start with "<backend>: <option> ...".
            named = re.match(rf"{re.escape(spec.backend)}: (\w+)", str(exc))
            return (named.group(1) if named and named.group(1) in options else None), str(exc)
    accepted = backend_options(spec.backend)
    if spec.env_fns is not None or (accepted is not None and "env_fn" not in accepted):
        return None  # the user's factories (built in the workers only), or a backend that builds from the id
    return _one_env_problem(spec)


def _one_env_problem(spec: Any) -> tuple[int | None, str] | None:
    """Build one env of ``spec`` here (its recorders left out: `check_recording` checked them, and a recorder
    would make its folder) and close it; what went wrong, with the wrapper at fault."""
    core = spec.replace(num_envs=1, wrappers=tuple(w for w in spec.wrappers if w.name not in RECORDERS))
    if spec.family == "atari" and importlib.util.find_spec("ale_py") is not None:
        import ale_py

        # Check's stderr holds its errors, one a line: not the banner ALE prints for its first emulator.
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    error = _build_error(core)
    if error is None:
        return None
    # The first stack prefix that fails shows the wrapper at fault (0: the env itself).
    prefix = core.replace(fused=False)
    for end in range(len(core.wrappers) + 1):
        if _build_error(prefix.replace(wrappers=core.wrappers[:end])) is not None:
            if end == 0:
                return None, f"building the env {spec.id} failed: {error}"
            at_fault = core.wrappers[end - 1]
            named = error if repr(at_fault.name) in error else f"wrapper {at_fault.name!r}: {error}"
            return spec.wrappers.index(at_fault), named
    return None, f"building one env of {spec.id} with its stack failed: {error}"


def _build_error(spec: Any) -> str | None:
    try:
        env = build_env(spec, index=0)
    except _BUILD_ERRORS as exc:
        return memory_message(spec, exc) if isinstance(exc, MemoryError) else _first_line(_explain(exc))
    env.close()
    return None


def _keyed(problem: tuple[str | int | None, str], spec: Any, data: dict[str, Any]) -> str:
    """A `preflight_problem` as a config error: ``key.path: message``, the key as the file writes it."""
    where, message = problem
    key: str | None = None
    if isinstance(where, str):
        flat = data.get("backend_kwargs")
        key = (
            f"backend_kwargs.{where}"
            if isinstance(flat, dict) and where in flat
            else f"backends.{spec.backend}.{where}"
        )
    elif isinstance(where, int):
        at_fault = spec.wrappers[where]
        items = data.get("wrappers")
        for index, item in enumerate(items if isinstance(items, list) else []):
            try:
                if resolve_wrapper(item, family=spec.family, env_id=spec.id) == at_fault:
                    key = f"wrappers[{index}]"
                    break
            except Exception:  # noqa: BLE001 - an item that does not resolve is not the one at fault
                continue
        else:
            key = "size" if at_fault.name == "pixels" and data.get("size") is not None else "wrappers"
    return f"{key}: {message}" if key else message


def _key_parts(key: str) -> list[str | int]:
    return [m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _KEY_PART.finditer(key)]


def _set_aside(data: dict[str, Any], parts: list[str | int], positions: list[int]) -> bool:
    """Remove the key an error is about from ``data`` so that the rest can be checked; False if it is not
    there."""
    if parts[0] == "backend":
        # The options were for the unknown backend: checked against the default one they would all be errors.
        data.pop("backend_kwargs", None)
        return data.pop("backend", None) is not None
    if parts[0] == "wrappers" and len(parts) > 1 and isinstance(parts[1], int):
        items, index = data.get("wrappers"), parts[1]
        if not isinstance(items, list) or index >= len(items):
            return False
        item = items[index]
        if len(parts) > 2 and parts[2] != "name" and isinstance(item, dict) and parts[2] in item:
            del item[parts[2]]  # a bad option: the wrapper is still checked with its other options
        else:
            del items[index]
            del positions[index]
        return True
    parent: Any = data
    for part in parts[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
        return True
    if isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        del parent[last]
        return True
    return False


def check_backend(backend: str, overrides: Sequence[str]) -> int:
    """``torchwm check BACKEND``: the conformance checks of `torchwm.testing`, one line each."""
    registry("backend").get(backend)  # an unknown name is bad input, before any check runs
    overrides = [o.removeprefix("backend_kwargs.") for o in overrides]
    backend_kwargs = apply_overrides({}, overrides)
    check_backend_options(backend, backend_kwargs)  # a misspelt option: one line, not one failure per check
    import torchwm.testing

    print(
        f"conformance checks on backend {backend!r}"
        + (f" with backend_kwargs {backend_kwargs}" if backend_kwargs else ""),
        flush=True,
    )
    results = torchwm.testing.run_checks(backend, backend_kwargs=backend_kwargs)
    for result in results:
        if getattr(result, "skipped", False):
            print(f"SKIP  {result.name}: {result.message}")
        elif result.passed:
            print(f"PASS  {result.name}")
        else:
            lines = result.message.strip().splitlines() or [""]
            print(f"FAIL  {result.name}: {lines[0]}")
            for line in lines[1:]:
                print(f"      {line}")
    failed = [r.name for r in results if not r.passed]
    print(
        f"{len(results) - len(failed)} of {len(results)} checks passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return EXIT_FAILED if failed else EXIT_OK


# ----------------------------------------------------------------------------- argument types


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


if __name__ == "__main__":
    sys.exit(main())
