"""What the ``torchwm`` commands share: exit statuses, the one-line error of bad input, argument types.

A user error (a bad option, a missing file, an unknown name, a missing extra) is one of `INPUT_ERRORS`:
`status_of` maps it to status 2 and `explain` to the line printed for it; a failed check or measurement
is status 1. `Commands` is where each command registers its parser and handler. `config_format` serves both
``run`` and ``check``; the setup a command builds is `torchwm.cli.setup`'s.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from collections.abc import Callable
from typing import NoReturn

import gymnasium

from torchwm.bench import BenchChildError
from torchwm.config import find_config, is_config_reference
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


class Commands:
    """Where each command registers itself, as tox's commands do (``parser.add_command``): a command's module
    has ``register(commands)``, which calls `add_command` with its name, help and handler and adds its
    arguments to the parser it gets back; `torchwm.cli.build_parser` calls each module's."""

    def __init__(self, subparsers: argparse._SubParsersAction[OneLineParser], parents: list[OneLineParser]):
        self._subparsers = subparsers
        self._parents = parents
        self.names: list[str] = []

    def add_command(
        self, name: str, help: str, handler: Callable[[argparse.Namespace], int]
    ) -> OneLineParser:
        """The parser of the command ``name``, whose ``handler(args)`` returns the exit status."""
        parser = self._subparsers.add_parser(name, parents=self._parents, help=help)
        parser.set_defaults(handler=handler, parser=parser)
        self.names.append(name)
        return parser


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
