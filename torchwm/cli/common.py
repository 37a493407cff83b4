"""What the ``torchwm`` commands share: exit statuses, the one-line error of bad input, argument types.

A user error (a bad option, a missing file, an unknown name, a missing extra) is one of `INPUT_ERRORS`:
`status_of` maps it to status 2 and `explain` to the line printed for it; a failed check or measurement
is status 1. `config_format` and `memory_message` serve both ``run`` and ``check``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
from collections.abc import Callable
from typing import Any, NoReturn

import gymnasium

from torchwm import bench
from torchwm.config import did_you_mean, find_config, is_config_reference
from torchwm.errors import (
    ConfigError,
    DuplicateNameError,
    UnknownNameError,
    UnsupportedStackError,
    WorkerError,
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
    if isinstance(exc, bench.BenchChildError):
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


def is_memory_error(exc: BaseException) -> bool:
    """A `MemoryError`, here or in a worker (whose `WorkerError` names it)."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, WorkerError) and re.search(r"\braised \w*MemoryError\(", str(exc)) is not None


# numpy's MemoryError: "Unable to allocate 931. GiB for an array with shape (1000000, 1000000) and data type
# uint8"
_ALLOCATION = re.compile(r"Unable to allocate .*? for an array with shape \(([\d, ]*)\)[^\n'\"]*")


def memory_message(spec: Any, exc: BaseException) -> str:
    """One line for a `MemoryError` met building ``spec``: the option that asked for too much when the
    size numpy could not allocate shows which (its value is a side of the array), else numpy's message."""
    text = str(exc) + "\n" + getattr(exc, "remote_traceback", "")
    allocation = _ALLOCATION.search(text)
    said = allocation.group(0) if allocation else (first_line(text) if text.strip() else "MemoryError")
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
