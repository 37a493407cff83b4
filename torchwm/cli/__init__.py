"""The ``torchwm`` command: ``list``, ``run``, ``record``, ``bench`` and ``check`` (``python -m torchwm``).

``run`` builds the env a config file, a shipped config's name (``pong``) or
an env id describes and steps it with a random (or the user's) policy,
reporting steps per second (timed from the end of the first reset) and
episode returns (whole games where ``episode_statistics`` records them);
``list`` shows every registered name, the plugin behind it and the shipped
configs; ``record`` records episodes to a Minari dataset; ``bench`` is
the front end to `torchwm.bench`; ``check`` validates
a config (every error with its key path) or runs `torchwm.testing` on a
backend. Every user error on every command (a bad option, a missing file, an
unknown key or name with the closest one suggested, a missing extra) prints
one line on stderr and exits with status 2, without a traceback
(``--traceback`` shows it); a failed conformance check or measurement, or a
video ``run --video`` could not finish, exits 1 and Ctrl-C during ``run``
exits 130 after printing the figures so far.

Each command is a module of this package (`listing_command`, `run`, `record`, `bench`, `check`; ``bench``
measures with the `torchwm.bench` library) that registers its parser and handler with ``register(commands)``,
as tox's commands do; `COMMANDS` lists them for `build_parser`. What they share is in `common`, and the
setup the commands that build an env take (CONFIG_OR_ENV_ID, the setup flags, ``--set``) in `setup`.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from collections.abc import Sequence

from torchwm.cli import bench, check, listing_command, record, run
from torchwm.cli.check import check_target
from torchwm.cli.common import (
    Commands,
    OneLineParser,
    explain,
    first_line,
    status_of,
    unknown_arguments,
    version,
)
from torchwm.cli.summary import length_unit

__all__ = ["COMMANDS", "build_parser", "check_target", "length_unit", "main"]

# The modules of the commands, in the order ``torchwm --help`` lists them: each has ``register(commands)``.
COMMANDS = (listing_command, run, record, bench, check)


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
        unknown_arguments(getattr(args, "parser", parser), unknown)
    if args.command is None:
        names = [action.dest for action in _commands(parser)._choices_actions]
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


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="torchwm", description="Vectorized RL environments from a name, a backend and a wrapper stack."
    )
    parser.add_argument("--version", action="version", version=f"torchwm {version('torchwm')}")
    common = OneLineParser(add_help=False)
    common.add_argument("--traceback", action="store_true", help="show the full traceback of an error")
    commands = Commands(
        parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser), [common]
    )
    for command in COMMANDS:
        command.register(commands)
    return parser


def _commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[OneLineParser]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subparsers
