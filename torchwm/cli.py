"""The ``torchwm`` command: ``list``, ``run``, ``bench`` and ``check`` (also ``python -m torchwm``).

``run`` builds the env a config file or an env id describes and steps it with
a random (or the user's) policy, reporting steps per second and episode
returns; ``list`` shows every registered name and the plugin behind it;
``bench`` and ``check`` are front ends to `torchwm.bench` and
`torchwm.testing`. Bad input (a missing file, an unknown key or name, a
wrong type) prints one line on stderr and exits with status 2, without a
traceback (``--traceback`` shows it); a failed conformance check exits 1 and
Ctrl-C during ``run`` exits 130 after printing the figures so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchwm.config import CONFIG_SUFFIXES, apply_overrides, dump_config, load_run_config
from torchwm.errors import ConfigError, DuplicateNameError, UnknownNameError, UnsupportedStackError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
KINDS = ("backends", "wrappers", "sources", "plugins")


class UsageError(Exception):
    """Bad input on the command line: printed as one line, exit status 2."""


# Errors that mean "the input was wrong", not "torchwm is broken": one line, status 2.
INPUT_ERRORS = (UsageError, ConfigError, UnknownNameError, UnsupportedStackError, DuplicateNameError)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status.

    Example:
        >>> from torchwm.cli import main
        >>> main(["run", "CartPole-v1", "--num-envs", "2", "--steps", "10", "--seed", "0", "--no-progress"])  # doctest: +SKIP
        0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.handler(args)
    except INPUT_ERRORS as exc:
        if args.traceback:
            raise
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"torchwm {args.command}: error: {message}", file=sys.stderr)
        return EXIT_USAGE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchwm", description="Vectorized RL environments from a name, a backend and a wrapper stack."
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    listing = commands.add_parser("list", parents=[common], help="registered backends, wrappers, sources and plugins")
    listing.add_argument("kind", nargs="?", choices=KINDS, help="one kind only (default: all)")
    listing.set_defaults(handler=cmd_list)

    run = commands.add_parser("run", parents=[common], help="build an env from a config file or an env id and step it")
    run.add_argument("target", metavar="CONFIG_OR_ENV_ID",
                     help=f"a config file ({', '.join(CONFIG_SUFFIXES)}) or an env id such as ALE/Pong-v5")
    run.add_argument("--steps", type=_positive_int, help="vector steps to run (default: [run] steps, or 1000)")
    run.add_argument("--num-envs", type=_positive_int, help="number of envs (overrides num_envs)")
    run.add_argument("--backend", help="backend name (overrides backend)")
    run.add_argument("--seed", type=_non_negative_int, help="seed of the first reset and of the random policy")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key: num_envs=16, backend_kwargs.num_workers=2, wrappers[1].stack_size=2")
    run.add_argument("--policy", metavar="MODULE:FUNCTION",
                     help="policy(obs, action_space) -> actions (default: seeded action_space.sample())")
    run.add_argument("--print-config", action="store_true",
                     help="print the resolved config (TOML, every default explicit) and exit")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(handler=cmd_run)

    bench = commands.add_parser("bench", parents=[common], help="steps per second of backends side by side (torchwm.bench)")
    bench.add_argument("--env", default="CartPole-v1", help="env id (default: CartPole-v1)")
    bench.add_argument("--backends", type=_name_list, default=None,
                       help="comma-separated backends and peers (default: gym-sync and every torchwm "
                            "Python backend registered among sync, subproc, shmem)")
    bench.add_argument("--num-envs", type=_int_list, default=[8, 16, 32], help="comma-separated sizes (default: 8,16,32)")
    bench.add_argument("--steps", type=_positive_int, default=None, help="vector steps per measurement")
    bench.add_argument("--repeats", type=_positive_int, default=3, help="repeats per measurement; the median is kept")
    bench.add_argument("--baseline", default=None, help="backend the ratios are relative to (default: the first)")
    bench.add_argument("--set", dest="overrides", action="append", default=[], metavar="BACKEND.KEY=VALUE",
                       help="a backend option, e.g. shmem.num_workers=2")
    bench.add_argument("--memory", action="store_true", help="also measure the PSS memory of the process tree")
    bench.add_argument("--plot", type=Path, metavar="PNG", help="write a plot of steps/s against num_envs")
    bench.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    bench.set_defaults(handler=cmd_bench)

    check = commands.add_parser("check", parents=[common], help="run the conformance checks (torchwm.testing) on a backend")
    check.add_argument("backend", help="backend name")
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="a backend option: num_workers=2 (or backend_kwargs.num_workers=2)")
    check.set_defaults(handler=cmd_check)
    return parser


# ----------------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace) -> int:
    from torchwm.plugins import registry

    kinds = [args.kind] if args.kind else list(KINDS)
    for n, kind in enumerate(kinds):
        if n:
            print()
        print(f"{kind}:")
        if kind == "plugins":
            rows = [(name, dist, ", ".join(provides)) for name, dist, provides in _plugins()]
        else:
            rows = []
            for entry in registry(kind[:-1]):
                dist = f"{entry.distribution or '?'} {entry.version or ''}".strip()
                declared = entry.metadata.get("options")
                found = dict(declared) if isinstance(declared, dict) else _options(kind, entry.factory)
                options = ", ".join(f"{k}={v!r}" if v is not inspect.Parameter.empty else k for k, v in found.items())
                description = entry.metadata.get("description", "")
                rows.append((entry.name, f"{entry.plugin} ({dist})", f"options: {options or '(none)'}"
                             + (f"; {description}" if description else "")))
        _print_rows(rows)
    return EXIT_OK


def _options(kind: str, factory: Callable[..., Any]) -> dict[str, Any]:
    """Keyword options and their defaults: a wrapper's after ``env``, a backend's after ``spec``."""
    if kind == "sources":
        return {}
    try:
        params = list(inspect.signature(factory).parameters.values())[1:]  # after env / spec
    except (TypeError, ValueError):
        return {}
    options: dict[str, Any] = {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        # The names are checked further in; a plugin can list them with register(..., options={...}).
        options["**" + next(p.name for p in params if p.kind is p.VAR_KEYWORD)] = inspect.Parameter.empty
    return options


def _plugins() -> list[tuple[str, str, list[str]]]:
    """(plugin name, "distribution version", what it registered) for every loaded plugin."""
    from torchwm.plugins import DEFAULT_PLUGINS, plugin_manager, registry

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
    return rows


def _version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _print_rows(rows: list[tuple[str, ...]]) -> None:
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
    if args.print_config:
        sys.stdout.write(dump_config(spec))
        return EXIT_OK
    steps = args.steps or run_options.steps
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
    target = args.target
    overrides = list(args.overrides)
    # The options win over the file's keys, as --set does; json.dumps quotes a name as a TOML string.
    if args.num_envs is not None:
        overrides.append(f"num_envs={args.num_envs}")
    if args.backend is not None:
        overrides.append(f"backend={json.dumps(args.backend)}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    path = Path(target)
    if path.suffix.lower() in CONFIG_SUFFIXES or path.is_file():
        if not path.is_file():
            raise UsageError(f"{target}: no such config file")
        return load_run_config(path, overrides)
    return load_run_config({"id": target}, overrides)


def _build(spec: Any) -> Any:
    from torchwm.factory import make_vec_from_spec

    try:
        return make_vec_from_spec(spec)
    except (TypeError, ValueError) as exc:
        # A backend refusing its options (an unknown or bad backend_kwargs key) is bad input.
        if isinstance(exc, INPUT_ERRORS):
            raise
        raise UsageError(f"backend {spec.backend!r} refused the config: {exc}") from exc


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


# ----------------------------------------------------------------------------- bench


def cmd_bench(args: argparse.Namespace) -> int:
    try:
        from torchwm import bench
    except ImportError as exc:
        raise UsageError(f"the benchmark module torchwm.bench is not available: {exc}") from exc
    backends = args.backends or _default_bench_backends()
    baseline = args.baseline or backends[0]
    if baseline not in backends:
        raise UsageError(f"--baseline {baseline!r} is not one of --backends {','.join(backends)}")
    backend_kwargs: dict[str, dict[str, Any]] = {}
    for override in args.overrides:
        key = override.partition("=")[0]
        if "." not in key or key.split(".", 1)[0] not in backends:
            raise UsageError(f"--set {override!r}: expected BACKEND.KEY=VALUE with BACKEND one of {','.join(backends)}")
    if args.overrides:
        backend_kwargs = apply_overrides({}, args.overrides)
    kwargs: dict[str, Any] = {"repeats": args.repeats, "backend_kwargs": backend_kwargs or None,
                              "measure_memory": args.memory}
    if args.steps is not None:
        kwargs["steps"] = args.steps
    results = bench.run_bench(args.env, backends, args.num_envs, **kwargs)
    print(bench.format_table(results, baseline))
    if args.plot:
        bench.plot(results, args.plot)
        print(f"plot written to {args.plot}")
    if args.json:
        args.json.write_text(json.dumps([_as_data(r) for r in results], indent=2) + "\n")
        print(f"results written to {args.json}")
    return EXIT_OK


def _default_bench_backends() -> list[str]:
    from torchwm.plugins import registry

    return ["gym-sync", *[name for name in ("sync", "subproc", "shmem") if name in registry("backend")]]


def _as_data(result: Any) -> Any:
    return dataclasses.asdict(result) if dataclasses.is_dataclass(result) else dict(vars(result))


# ----------------------------------------------------------------------------- check


def cmd_check(args: argparse.Namespace) -> int:
    from torchwm.plugins import registry

    registry("backend").get(args.backend)  # an unknown name is bad input, before any check runs
    overrides = [o[len("backend_kwargs."):] if o.startswith("backend_kwargs.") else o for o in args.overrides]
    backend_kwargs = apply_overrides({}, overrides)
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


def _int_list(text: str) -> list[int]:
    return [_positive_int(part.strip()) for part in text.split(",") if part.strip()]


def _name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


if __name__ == "__main__":
    sys.exit(main())
