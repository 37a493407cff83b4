"""What makes a ``torchwm`` command a command line, whichever entry point runs it (``torchwm``, ``python -m
torchwm``, ``python -m torchwm.bench``): the parser, exit statuses and the one-line error of bad input.

A command's module has ``register(commands)``, which calls `Commands.add_command` with its name, help and
handler and adds its arguments to the parser it gets back, as tox's commands do. `build_parser` makes the
``torchwm`` parser of the commands given; `run` parses the arguments and runs the command's handler. A
user error (a bad option, a missing file, an unknown name, a missing extra) is one of `INPUT_ERRORS`:
`status_of` maps it to status 2 and `explain` to the line printed for it; a failed check or measurement
is status 1 (an error of a lower layer that knows which it is says so in ``exit_status``: a measuring
child's, `torchwm.bench.BenchChildError`). Everything else gets its traceback.

The commands themselves are `torchwm.cli`'s modules, and the bench's (`torchwm.bench.command`): both stand on
this module, so that ``python -m torchwm.bench`` runs the same command as ``torchwm bench`` without
importing the command line above it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

import gymnasium

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


class Commands:
    """Where each command registers itself, as tox's commands do (``parser.add_command``): a command's module
    has ``register(commands)``, which calls `add_command` with its name, help and handler and adds its
    arguments to the parser it gets back; `build_parser` calls each module's."""

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


def build_parser(registers: Iterable[Callable[[Commands], None]]) -> argparse.ArgumentParser:
    """The ``torchwm`` parser with the commands each ``register(commands)`` adds, in that order."""
    parser = OneLineParser(
        prog="torchwm", description="Vectorized RL environments from a name, a backend and a wrapper stack."
    )
    parser.add_argument("--version", action="version", version=f"torchwm {version('torchwm')}")
    common = OneLineParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    commands = Commands(
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser), [common]
    )
    for register in registers:
        register(commands)
    return parser


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Parse ``argv`` with ``parser`` (of `build_parser`) and run the command; returns the exit status. The
    warnings and the ``torchwm`` logger's warnings are printed once each after it, as notes; an error of
    bad input or a failure `status_of` knows is one line, unless ``--traceback``."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        unknown_arguments(getattr(args, "parser", parser), unknown)
    if args.command is None:
        names = [action.dest for action in _subparsers(parser)._choices_actions]
        parser.error(
            f"a command is required: {', '.join(names[:-1])} or {names[-1]} (torchwm --help describes them)"
        )
    logged = NoteCollector()
    torchwm_logger = logging.getLogger("torchwm")
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", UserWarning)
            torchwm_logger.addHandler(logged)
            try:
                return args.handler(args)
            finally:
                torchwm_logger.removeHandler(logged)
                texts = [note_text(note.message) for note in notes] + logged.texts
                for text in dict.fromkeys(texts):  # each once
                    print(f"torchwm {args.command}: note: {text}", file=sys.stderr)
    except Exception as exc:
        status = status_of(exc)
        if status is None or args.traceback:
            raise
        print(f"torchwm {args.command}: error: {first_line(explain(exc))}", file=sys.stderr)
        return status


def note_text(message: Warning | str) -> str:
    """A warning as the command line says it: without torchwm's own prefix (the line has one)."""
    return str(message).removeprefix("torchwm: ")


class NoteCollector(logging.Handler):
    """Keeps what the ``torchwm`` logger says at WARNING or above during a command (a worker slow to
    start), to print with the command's warnings: in the command line's words where the record has them
    (its ``command_line`` attribute: ``--set backends.shmem.context=fork``)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(getattr(record, "command_line", None) or note_text(record.getMessage()))


def status_of(exc: BaseException) -> int | None:
    """The exit status of an error shown as one line, or None for an error that gets its traceback."""
    if isinstance(exc, INPUT_ERRORS):
        return EXIT_USAGE
    if isinstance(exc, VideoWriteError):
        return EXIT_FAILED  # the input was fine; the video could not be written (a full disk)
    # An error of a lower layer that knows whether bad input or a failure caused it (a measuring child's).
    status = getattr(exc, "exit_status", None)
    return status if status in (EXIT_USAGE, EXIT_FAILED) else None


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


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[OneLineParser]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers
