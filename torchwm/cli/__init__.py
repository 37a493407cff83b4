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
is the command `torchwm.bench.command` declares, registered here) that registers its parser and handler
with ``register(commands)``, as tox's commands do; `COMMANDS` lists them for `build_parser`. The parser,
the exit statuses and the one-line errors are `torchwm.command_line`'s, which ``python -m torchwm.bench``
runs too; what the commands share besides is in `common`, and the setup the commands that build an env
take (CONFIG_OR_ENV_ID, the setup flags, ``--set``) in `setup`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from torchwm import command_line
from torchwm.cli import bench, check, listing_command, record, run
from torchwm.cli.check import check_target
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
    return command_line.run(build_parser(), argv)


def build_parser() -> argparse.ArgumentParser:
    return command_line.build_parser(command.register for command in COMMANDS)
