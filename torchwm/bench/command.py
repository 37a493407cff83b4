"""The ``torchwm bench`` command: its arguments (`register`), what it does (`run_command`: check, measure with
`torchwm.bench`, print the table and what ran, write the plot and the JSON), and `main`, what ``python -m
torchwm.bench`` runs. The command line (`torchwm.cli`) registers it with the other commands; both run it
through `torchwm.command_line`, so that the two give one parser, one help and the same one-line errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from torchwm.bench import (
    bench_info,
    config_specs,
    default_backends,
    describe_machine,
    format_table,
    plot,
    run_bench,
    stack_refusal,
)
from torchwm.command_line import Commands, build_parser, run
from torchwm.config import apply_overrides, is_config_reference, memory_message
from torchwm.errors import ConfigError, TorchwmError, UnsupportedStackError
from torchwm.extras import missing_extra
from torchwm.factory import build_env
from torchwm.setup_config import load_setup_config


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return sizes


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


DEFAULT_SIZES = [8, 16, 32]


def register(commands: Commands) -> None:
    parser = commands.add_command(
        "bench", "steps per second of backends and their peers side by side (torchwm.bench)", run_command
    )
    parser.add_argument(
        "config",
        nargs="?",
        default=None,
        metavar="CONFIG",
        help="a config file (.toml, .yaml, .yml, .json) or a shipped config's name: measure that "
        "setup (env, env kwargs, wrapper stack, seed, num_envs, backend options)",
    )
    parser.add_argument(
        "--config", dest="config_option", default=None, metavar="CONFIG", help="the same as CONFIG"
    )
    parser.add_argument(
        "--env", default=None, help="env id under torchwm's default stack (default: CartPole-v1)"
    )
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated peers and torchwm backends (default: gym-sync,gym-async,sync,subproc,"
        "shmem; for ALE ids also ale-emulator, ale-direct and ale-native; with a config: "
        "gym-sync,gym-async, the built-in backends and the config's own, ALE's beside them for "
        "an ALE id)",
    )
    parser.add_argument(
        "--num-envs",
        type=_sizes,
        default=None,
        help="comma-separated sizes (default: 8,16,32; with a config, its num_envs)",
    )
    parser.add_argument(
        "--steps", type=_positive, default=1000, help="batched steps per repeat (default: 1000)"
    )
    parser.add_argument(
        "--repeats",
        type=_positive,
        default=3,
        help="repeats per measurement; the median is kept (default: 3)",
    )
    parser.add_argument(
        "--baseline", default=None, help="backend the ratios are against (default: the first)"
    )
    parser.add_argument(
        "--backend-kwargs",
        default=None,
        metavar="JSON",
        help='options per backend, e.g. \'{"shmem": {"num_workers": 2}}\' (over a config\'s own)',
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="BACKEND.KEY=VALUE",
        help="one backend option, e.g. shmem.num_workers=2 (after --backend-kwargs)",
    )
    parser.add_argument("--memory", action="store_true", help="also measure the PSS of each process tree")
    parser.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="write a plot of steps/s against num_envs (one num_envs: bars with the ratio to the baseline)",
    )
    parser.add_argument(
        "--json", default=None, metavar="FILE", help="write the results, machine and versions as JSON"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def main(argv: Sequence[str]) -> int:
    """``python -m torchwm.bench ARGS``: exactly ``torchwm bench ARGS``; returns the exit status."""
    return run(build_parser([register]), ["bench", *argv])


def _setup(args: argparse.Namespace) -> tuple[Any, str | None]:
    """What ``torchwm bench`` measures: ``(env id, None)`` or ``(the config's VecSpec, the config)``."""
    if args.config is not None and args.config_option is not None:
        raise ConfigError(f"give the config once: CONFIG {args.config!r} or --config {args.config_option!r}")
    config = args.config if args.config is not None else args.config_option
    if config is not None and args.env is not None:
        raise ConfigError(
            f"give a config or --env, not both (got {config!r} and --env {args.env!r}); a config "
            f"names its env"
        )
    if config is None:
        env_id = args.env or "CartPole-v1"
        if is_config_reference(env_id) and not env_id.isidentifier():
            # A file, not an id (a bare name such as "pong" is an id here: Atari short names are).
            raise ConfigError(
                f"--env {env_id!r} is a config file; --env takes an env id. Measure the config "
                f"with: torchwm bench {env_id}"
            )
        return env_id, None
    return load_setup_config(config)[0], config


def run_command(args: argparse.Namespace) -> int:
    """``torchwm bench``: check, measure, print the table, write the plot and the JSON."""
    setup, config = _setup(args)
    backends = (
        [b.strip() for b in args.backends.split(",") if b.strip()]
        if args.backends is not None
        else default_backends(setup)
    )
    baseline: str = args.baseline or (backends[0] if backends else "")
    if baseline not in backends:
        raise ConfigError(f"--baseline {baseline!r} is not one of --backends {','.join(backends)}")
    try:
        backend_kwargs = json.loads(args.backend_kwargs) if args.backend_kwargs else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--backend-kwargs: not valid JSON ({exc})") from None
    if not isinstance(backend_kwargs, dict):
        raise ConfigError(
            f"--backend-kwargs: expected a JSON object of backend names, got {args.backend_kwargs}"
        )
    for override in args.overrides:
        key = override.partition("=")[0].strip()
        if "." not in key:
            raise ConfigError(f"--set {override!r}: expected BACKEND.KEY=VALUE, e.g. shmem.num_workers=2")
    backend_kwargs = apply_overrides(backend_kwargs, args.overrides)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise missing_extra("plot", "torchwm bench --plot")  # before minutes of measuring, not after
    # Where the results go is checked before minutes of measuring too, not when writing them.
    if args.plot:
        check_output_path("--plot", args.plot)
        check_plot_format(args.plot)
    if args.json:
        check_output_path("--json", args.json)
    sizes = args.num_envs or (DEFAULT_SIZES if config is None else [setup.num_envs])
    specs = config_specs(config, backends) if config is not None else None
    settings: dict[str, Any] = {
        "env": setup if config is None else setup.id,
        "backends": backends,
        "num_envs": sizes,
        "steps": args.steps,
        "repeats": args.repeats,
        "backend_kwargs": backend_kwargs,
    }
    if config is not None:
        refusals = [(b, stack_refusal((specs or {}).get(b, setup), b)) for b in backends]
        if all(why for _, why in refusals):
            _nothing_measured(*refusals[0])  # known before building anything
    expected: list[int] | None = None
    if config is not None:
        # A multi-agent setup's batch is its agents' rows: no one env's observation to compare it with.
        expected = None if setup.family == "multiagent" else config_obs_shape(setup)
        settings["config"] = {"source": config, "spec": setup.to_dict(), "obs_shape": expected}
        print(f"torchwm bench: {config}: {describe_setup(setup)}", file=sys.stderr, flush=True)
    results = run_bench(
        setup,
        backends,
        sizes,
        steps=args.steps,
        repeats=args.repeats,
        backend_kwargs=backend_kwargs or None,
        measure_memory=args.memory,
        progress=not args.no_progress,
        specs=specs,
    )
    if all(r.skipped for r in results):
        _nothing_measured(results[0].backend, results[0].skipped)
    print(format_table(results, baseline))
    info = bench_info(settings)
    print(describe_machine(info))
    if expected is not None:
        for r in results:
            if r.obs_shape is not None and r.obs_shape[1:] != expected:
                print(
                    f"warning: {r.backend} x {r.num_envs} gave observations of shape "
                    f"{tuple(r.obs_shape[1:])}, the config's are {tuple(expected)}"
                )
    if args.plot:
        plot(results, args.plot, info, baseline)
        print(f"plot written to {args.plot}")
    if args.json:
        rows = []
        for r in results:
            row = asdict(r)
            if r.skipped:
                row["steps_per_second"] = None  # not measured (JSON has no NaN)
            if expected is not None:
                row["obs_matches_config"] = None if r.obs_shape is None else r.obs_shape[1:] == expected
            rows.append(row)
        with open(args.json, "w") as f:
            json.dump({**info, "baseline": baseline, "results": rows}, f, indent=2)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


def check_output_path(flag: str, path: str) -> None:
    """Refuse a file ``torchwm bench`` could not write (`ConfigError`: one line, status 2): a folder, a path
    whose folder does not exist or is a file, a place without write permission. Creates nothing."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; expected the path of a file to write")
    if not folder.exists():
        raise ConfigError(f"{flag} {path}: the folder {str(folder)!r} does not exist; create it first")
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: {str(folder)!r} is a file, not a folder")
    if not os.access(target if target.exists() else folder, os.W_OK):
        where = "the file" if target.exists() else f"the folder {str(folder)!r}"
        raise ConfigError(f"{flag} {path}: no permission to write {where}")


def check_plot_format(path: str) -> None:
    """Refuse a ``--plot`` file whose suffix names no format matplotlib writes (else said only when
    saving)."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix:
        return  # matplotlib writes its default format, PNG
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise ConfigError(
            f"--plot {path}: matplotlib writes no {suffix!r} files; expected a name ending in one of "
            f"{', '.join('.' + name for name in sorted(formats))}"
        )


def _nothing_measured(backend: str, why: Any) -> NoReturn:
    raise UnsupportedStackError(f"nothing measured: no backend asked can build this stack ({backend}: {why})")


def config_obs_shape(spec: Any) -> list[int] | None:
    """The shape of one observation of the env ``spec`` describes (one env built and closed); None if not an
    array."""
    try:
        env = build_env(spec.replace(num_envs=1))
    except MemoryError as exc:
        # A wrapper or env option asking for more than the machine has: bad input, as torchwm run says it.
        raise ConfigError(memory_message(spec, exc)) from exc
    except (TypeError, ValueError) as exc:
        if isinstance(exc, TorchwmError):
            raise
        # A stack whose wrappers refuse each other (resize over scaled observations): bad input, said before
        # measuring.
        raise ConfigError(f"building one env of {spec.id} with its stack failed: {exc}") from exc
    try:
        shape = env.observation_space.shape
    finally:
        env.close()
    return list(shape) if shape is not None else None


def describe_setup(spec: Any) -> str:
    """One line: the env, its kwargs, the stack, num_envs, the seed and the backend with its options."""
    if spec.family == "multiagent":
        options = f" {spec.backend_kwargs}" if spec.backend_kwargs else ""
        return (
            f"{spec.env} {spec.env_kwargs}, layout {spec.layout}, {spec.num_envs} envs, seed {spec.seed}, "
            f"backend {spec.backend}{options}"
        )
    stack = ", ".join(repr(w) for w in spec.wrappers) or "(no wrappers)"
    options = f" {spec.backend_kwargs}" if spec.backend_kwargs else ""
    return (
        f"{spec.id} {spec.env_kwargs}, stack [{stack}], {spec.num_envs} envs, seed {spec.seed}, "
        f"backend {spec.backend}{options}"
    )
