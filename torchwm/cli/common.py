"""What the ``torchwm`` commands share beyond the command line's own machinery (`torchwm.command_line`: exit
statuses, the one-line error of bad input, `Commands`): `config_format`, which serves both ``run`` and
``check``, and argument types. The setup a command builds is `torchwm.cli.setup`'s.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from torchwm.config import find_config, is_config_reference


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
