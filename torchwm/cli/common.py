"""What the ``torchwm`` commands share: exit statuses, the one-line error of bad input, argument types.

A user error (a bad option, a missing file, an unknown name, a missing extra) is one of `INPUT_ERRORS`:
`status_of` maps it to status 2 and `explain` to the line printed for it; a failed check or measurement
is status 1. `add_setup_arguments` declares, and `load_setup` reads, the setup ``run`` and ``record`` build;
``check`` takes its ``--set`` (`add_set_argument`). `config_format` serves both ``run`` and ``check``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from collections.abc import Callable
from typing import Any, NoReturn

import gymnasium

from torchwm.bench import BenchChildError
from torchwm.config import find_config, is_config_reference, load_run_config
from torchwm.errors import (
    ConfigError,
    DuplicateNameError,
    UnknownNameError,
    UnsupportedStackError,
    did_you_mean,
)
from torchwm.extras import MissingExtraError, missing_extra
from torchwm.wrappers.record_video import VideoWriteError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


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


def status_of(exc: BaseException) -> int | None:
    """The exit status of an error shown as one line, or None for an error that gets its traceback."""
    if isinstance(exc, INPUT_ERRORS):
        return EXIT_USAGE
    if isinstance(exc, BenchChildError):
        # The child's own error is the first line; --traceback shows its stderr.
        return EXIT_USAGE if exc.input_error else EXIT_FAILED
    if isinstance(exc, VideoWriteError):
        return EXIT_FAILED  # the input was fine; the video could not be written (a full disk)
    return None


def explain(exc: BaseException) -> str:
    if "pygame" in str(exc) and isinstance(exc, gymnasium.error.DependencyNotInstalled):
        return str(missing_extra("render", "rendering this env"))
    return str(exc).strip() or type(exc).__name__


def first_line(text: str) -> str:
    return text.strip().splitlines()[0]


def unknown_arguments(parser: argparse.ArgumentParser, unknown: list[str]) -> NoReturn:
    options = [s for action in parser._actions for s in action.option_strings]
    first = next((a for a in unknown if a.startswith("-")), unknown[0])
    hint = did_you_mean(first.partition("=")[0], options) if first.startswith("-") else ""
    parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def config_format(target: str) -> str:
    """The format ``--print-config`` writes: the config file's own (toml, yaml or json); TOML for an env
    id."""
    if not is_config_reference(target):
        return "toml"
    suffix = find_config(target).suffix.lower().lstrip(".")
    return "yaml" if suffix == "yml" else suffix


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


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """The setup a command builds, as ``torchwm run`` and ``torchwm record`` take it: CONFIG_OR_ENV_ID,
    ``--num-envs``, ``--backend``, ``--seed`` and ``--set``; `load_setup` reads them."""
    parser.add_argument(
        "target",
        metavar="CONFIG_OR_ENV_ID",
        help="a config file (.toml, .yaml, .yml, .json), a shipped config by name (torchwm list configs: "
        "pong, ...), or an env id such as ALE/Pong-v5",
    )
    parser.add_argument("--num-envs", type=positive_int, help="number of envs (overrides num_envs)")
    parser.add_argument(
        "--backend", help="backend name (overrides backend; backend_kwargs it does not take are dropped)"
    )
    parser.add_argument(
        "--seed", type=non_negative_int, help="seed of the first reset and of the random policy"
    )
    add_set_argument(
        parser,
        help="override a config key: num_envs=16, backends.shmem.num_workers=2, wrappers[1].stack_size=2",
    )


def add_set_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE``, as often as wanted, into ``args.overrides``."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def load_setup(args: argparse.Namespace) -> tuple[Any, Any]:
    """The `VecSpec` and the ``[run]`` options of `add_setup_arguments`' arguments: the config or env id, with
    ``--num-envs``, ``--seed`` and ``--backend`` over its keys, as ``--set`` is."""
    overrides = list(args.overrides)
    if args.num_envs is not None:
        overrides.append(f"num_envs={args.num_envs}")
    if args.seed is not None:
        overrides.append(f"seed={args.seed}")
    target = args.target if is_config_reference(args.target) else {"id": args.target}
    return load_run_config(target, overrides, backend=args.backend)
