"""The ``torchwm`` command: ``list``, ``run``, ``bench`` and ``check`` (also ``python -m torchwm``).

``run`` builds the env a config file, a shipped config's name (``pong``) or
an env id describes and steps it with a random (or the user's) policy,
reporting steps per second and episode returns; ``list`` shows every
registered name, the plugin behind it and the shipped configs; ``bench`` and
``check`` are front ends to `torchwm.bench` and `torchwm.testing`. Every
user error on every command (a bad option, a missing file, an unknown key or
name with the closest one suggested, a missing extra) prints one line on
stderr and exits with status 2, without a traceback (``--traceback`` shows
it); a failed conformance check or measurement exits 1 and Ctrl-C during
``run`` exits 130 after printing the figures so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.metadata
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from torchwm.config import (
    apply_overrides,
    check_backend_options,
    did_you_mean,
    dump_config,
    is_config_reference,
    load_run_config,
)
from torchwm.errors import ConfigError, DuplicateNameError, UnknownNameError, UnsupportedStackError
from torchwm.extras import MissingExtraError, missing_extra

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
KINDS = ("backends", "wrappers", "sources", "plugins", "configs")


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit status 2."""


# Errors that mean "the input was wrong" (or an extra is missing), not "torchwm is broken": one line, status 2.
INPUT_ERRORS = (UsageError, ConfigError, UnknownNameError, UnsupportedStackError, DuplicateNameError, MissingExtraError)


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
        >>> main(["run", "CartPole-v1", "--num-envs", "2", "--steps", "10", "--seed", "0", "--no-progress"])  # doctest: +SKIP
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
    import gymnasium

    from torchwm.bench import BenchChildError

    if isinstance(exc, INPUT_ERRORS) or isinstance(exc, gymnasium.error.DependencyNotInstalled):
        return EXIT_USAGE
    if isinstance(exc, BenchChildError):
        # The child's own error is the first line; --traceback shows its stderr.
        return EXIT_USAGE if exc.input_error else EXIT_FAILED
    return None


def _explain(exc: BaseException) -> str:
    if "pygame" in str(exc) and type(exc).__name__ == "DependencyNotInstalled":
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
    from torchwm import bench

    parser = OneLineParser(
        prog="torchwm", description="Vectorized RL environments from a name, a backend and a wrapper stack."
    )
    parser.add_argument("--version", action="version", version=f"torchwm {_version('torchwm')}")
    common = OneLineParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)

    listing = commands.add_parser("list", parents=[common], help="registered backends, wrappers, sources, plugins "
                                                                  "and the shipped configs")
    listing.add_argument("kind", nargs="?", metavar="KIND", help=f"one of {', '.join(KINDS)} (default: all)")
    listing.set_defaults(handler=cmd_list, parser=listing)

    run = commands.add_parser("run", parents=[common], help="build an env from a config or an env id and step it")
    run.add_argument("target", metavar="CONFIG_OR_ENV_ID",
                     help="a config file (.toml, .yaml, .yml, .json), a shipped config by name (torchwm list configs: "
                          "pong, ...), or an env id such as ALE/Pong-v5")
    run.add_argument("--steps", type=_positive_int, help="vector steps to run (default: [run] steps, or 1000)")
    run.add_argument("--num-envs", type=_positive_int, help="number of envs (overrides num_envs)")
    run.add_argument("--backend", help="backend name (overrides backend; backend_kwargs it does not take are dropped)")
    run.add_argument("--seed", type=_non_negative_int, help="seed of the first reset and of the random policy")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key: num_envs=16, backends.shmem.num_workers=2, wrappers[1].stack_size=2")
    run.add_argument("--policy", metavar="MODULE:FUNCTION",
                     help="policy(obs, action_space) -> actions (default: seeded action_space.sample())")
    run.add_argument("--allow-policy-import", action="store_true",
                     help="let the config's run.policy import and run that code (refused without this flag)")
    run.add_argument("--print-config", action="store_true",
                     help="print the resolved config (TOML, every default explicit) and exit")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--video", metavar="DIR", help="record env 0's episodes to MP4 files in DIR (record_video, "
                                                    "Gymnasium's episode schedule; needs torchwm's [video] extra)")
    run.set_defaults(handler=cmd_run, parser=run)

    bench_parser = commands.add_parser("bench", parents=[common],
                                       help="steps per second of backends and their peers side by side (torchwm.bench)")
    bench.add_arguments(bench_parser)
    bench_parser.set_defaults(handler=bench.run_command, parser=bench_parser)

    check = commands.add_parser("check", parents=[common], help="run the conformance checks (torchwm.testing) on a backend")
    check.add_argument("backend", help="backend name")
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="a backend option: num_workers=2 (or backend_kwargs.num_workers=2)")
    check.set_defaults(handler=cmd_check, parser=check)
    return parser


# ----------------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace) -> int:
    from torchwm import listing

    if args.kind is not None and args.kind not in KINDS:
        raise UsageError(f"list {args.kind!r}: expected one of {', '.join(KINDS)}{did_you_mean(args.kind, KINDS)}")
    kinds = [args.kind] if args.kind else list(KINDS)
    describe = {"backends": listing.list_backends, "wrappers": listing.list_wrappers, "sources": listing.list_sources}
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
                options = ", ".join(k if v is listing.REQUIRED else f"{k}={v!r}" for k, v in info.options.items())
                rows.append((info.name, f"{info.plugin} ({dist})", f"options: {options or '(none)'}"
                             + (f"; {info.description}" if info.description else "")))
        _print_rows(rows)
    if args.kind is None:
        from torchwm.native import kernel_status

        print(f"\nfused Atari env, after the emulator: {kernel_status()}")
    return EXIT_OK


def _plugins() -> list[tuple[str, str, list[str]]]:
    """(plugin name, "distribution version", what it registered) for every loaded plugin."""
    from torchwm.plugins import DEFAULT_PLUGINS, failed_plugins, plugin_manager, registry

    manager = plugin_manager()
    dists = {manager.get_name(plugin): f"{d.metadata['name']} {d.version}" for plugin, d in manager.list_plugin_distinfo()}
    provided: dict[str, list[str]] = {}
    for kind in ("backend", "wrapper", "source"):
        for entry in registry(kind):
            provided.setdefault(entry.plugin, []).append(f"{kind} {entry.name}")
    rows = []
    for name, plugin in sorted(manager.list_name_plugin()):
        if plugin is None:
            rows.append((name, "blocked", ["(disabled by TORCHWM_DISABLE_PLUGINS)"]))
            continue
        dist = dists.get(name) or (f"torchwm {_version('torchwm')}" if name in DEFAULT_PLUGINS else "(registered at run time)")
        rows.append((name, dist, provided.get(name, ["(nothing)"])))
    for failed in failed_plugins():
        rows.append((failed.name, f"{failed.distribution or '?'} {failed.version or ''}".strip(),
                     [f"NOT LOADED: {failed.error}"]))
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


def cmd_run(args: argparse.Namespace) -> int:
    spec, run_options = _load_run(args)
    if args.video is not None:
        from torchwm.wrappers.record_video import with_video

        spec = with_video(spec, args.video)
    if args.print_config:
        sys.stdout.write(dump_config(spec))
        return EXIT_OK
    steps = args.steps or run_options.steps
    if args.policy is None and run_options.policy is not None and not args.allow_policy_import:
        # A config is data (YAML is read with safe_load); naming code in it runs nothing unless asked.
        raise UsageError(f"run.policy: the config asks to import and run {run_options.policy!r}; code named in a "
                         f"config is imported only with --allow-policy-import (or pass --policy {run_options.policy})")
    policy_name = args.policy or run_options.policy
    policy = load_policy(policy_name) if policy_name else None

    try:
        envs = _build(spec)
    except KeyboardInterrupt:
        print("torchwm run: interrupted while building the env", file=sys.stderr)
        return EXIT_INTERRUPTED
    tracker = EpisodeTracker(spec.num_envs, spec.autoreset_mode)
    done_steps, interrupted = 0, False
    print(f"torchwm run: {spec.id} x {spec.num_envs} envs on {spec.backend} "
          f"(autoreset {spec.autoreset_mode}, seed {spec.seed}), {steps} steps", file=sys.stderr, flush=True)
    progress = _progress(steps, disable=args.no_progress)
    start = time.perf_counter()
    try:
        obs, _ = envs.reset()
        for _ in range(steps):
            actions = policy(obs, envs.action_space) if policy else envs.action_space.sample()
            obs, rewards, terminations, truncations, _ = envs.step(actions)
            done = tracker.update(rewards, terminations, truncations)
            if spec.autoreset_mode == "disabled" and done.any():
                obs, _ = envs.reset(options={"reset_mask": done})
            done_steps += 1
            progress.update(1)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        elapsed = time.perf_counter() - start
        progress.close()
        envs.close()
    print_summary(spec, tracker, done_steps, elapsed, interrupted)
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def _load_run(args: argparse.Namespace):
    overrides = list(args.overrides)
    # The options win over the file's keys, as --set does.
    if args.num_envs is not None:
        overrides.append(f"num_envs={args.num_envs}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    target = args.target if is_config_reference(args.target) else {"id": args.target}
    return load_run_config(target, overrides, backend=args.backend)


def _build(spec: Any) -> Any:
    from torchwm.factory import make_vec_from_spec

    try:
        return make_vec_from_spec(spec)
    except (TypeError, ValueError) as exc:
        # An option value the backend or the env refuses (a bad backend_kwargs or env_kwargs value) is bad input.
        if isinstance(exc, INPUT_ERRORS):
            raise
        raise UsageError(f"building {spec.id} x {spec.num_envs} on {spec.backend!r} failed: {exc}") from exc


def _progress(total: int, disable: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="step", file=sys.stderr, disable=disable, mininterval=0.5, dynamic_ncols=True)


def print_summary(spec: Any, tracker: EpisodeTracker, steps: int, elapsed: float, interrupted: bool) -> None:
    env_steps = steps * spec.num_envs
    rate = env_steps / elapsed if elapsed > 0 else float("nan")
    print(f"{'interrupted after' if interrupted else 'ran'} {steps} steps x {spec.num_envs} envs "
          f"= {env_steps} env steps in {elapsed:.2f} s")
    print(f"steps per second: {rate:,.0f} env steps/s ({rate / spec.num_envs:,.0f} vector steps/s)")
    finished = tracker.finished_returns
    print(f"episodes finished: {len(finished)}")
    if finished:
        print(f"return: mean {np.mean(finished):.2f}, max {np.max(finished):.2f} "
              f"(mean length {np.mean(tracker.finished_lengths):.1f} steps)")
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
    from torchwm.plugins import registry

    registry("backend").get(args.backend)  # an unknown name is bad input, before any check runs
    overrides = [o[len("backend_kwargs."):] if o.startswith("backend_kwargs.") else o for o in args.overrides]
    backend_kwargs = apply_overrides({}, overrides)
    check_backend_options(args.backend, backend_kwargs)  # a misspelt option: one line, not one failure per check
    import torchwm.testing

    print(f"conformance checks on backend {args.backend!r}"
          + (f" with backend_kwargs {backend_kwargs}" if backend_kwargs else ""), flush=True)
    results = torchwm.testing.run_checks(args.backend, backend_kwargs=backend_kwargs)
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
    print(f"{len(results) - len(failed)} of {len(results)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
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
