"""``torchwm check``: validate a config, single- or multi-agent (every error with its key path, else the
resolved config), or run the conformance checks of `torchwm.testing` on a backend (one line each; status 1
if one fails).

`check_target` tells which of the two it was given; the config's errors come from `config_errors`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from torchwm.cli.common import config_format
from torchwm.cli.config_errors import config_errors
from torchwm.cli.setup import add_set_argument
from torchwm.command_line import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Commands, UsageError
from torchwm.config import (
    CONFIG_SUFFIXES,
    apply_overrides,
    check_backend_options,
    dump_config,
    shipped_configs,
)
from torchwm.errors import did_you_mean
from torchwm.plugins import registry


def register(commands: Commands) -> None:
    parser = commands.add_command(
        "check",
        "validate a config file, or run the conformance checks (torchwm.testing) on a backend",
        cmd_check,
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="BACKEND_OR_CONFIG",
        help="a backend name (sync, shmem, ...), or a config file (.toml, .yaml, .yml, .json) or shipped "
        "config name; a name that is both a backend and a shipped config (ray) is the backend",
    )
    parser.add_argument(
        "--config", metavar="CONFIG", help="the config file or shipped config to validate (never a backend)"
    )
    add_set_argument(parser)


def cmd_check(args: argparse.Namespace) -> int:
    kind, target = check_target(args.target, args.config)
    if kind == "config":
        return check_config(target, args.overrides)
    return check_backend(target, args.overrides)


def check_target(target: str | None, config: str | None) -> tuple[str, str]:
    """``("backend", name)`` or ``("config", target)``: what ``torchwm check`` was given.

    In this order: ``--config X`` is a config; a name with a config suffix (``.toml``, ``.yaml``,
    ``.yml``, ``.json``) or a path separator is a config file; a registered backend's name is that
    backend; a shipped config's name is that config; any other existing file is a config (and is
    refused as one). So a name that is both a backend and a shipped config (``ray``) is the backend:
    ``--config ray`` checks the config.
    """
    if config is not None:
        if target is not None:
            raise UsageError(
                f"check: give a backend or --config, not both (got {target!r} and --config {config!r})"
            )
        return "config", config
    if target is None:
        raise UsageError(
            "check: expected a backend name or a config file (torchwm check sync, torchwm check my.yaml)"
        )
    if Path(target).suffix.lower() in CONFIG_SUFFIXES or os.sep in target or "/" in target:
        return "config", target
    backends = registry("backend").names()
    if target in backends:
        return "backend", target
    shipped = shipped_configs()
    if target in shipped or Path(target).is_file():
        return "config", target
    if did_you_mean(target, backends):
        registry("backend").get(target)  # UnknownNameError, with the closest names
    if did_you_mean(target, list(shipped)):
        return "config", target  # the loader says which shipped config is close
    raise UsageError(
        f"check {target!r}: not a backend nor a config{did_you_mean(target, [*backends, *shipped])}; "
        f"the backends are: {', '.join(backends)}; the shipped configs: {', '.join(shipped) or '(none)'}; "
        f"a config file's name ends in {', '.join(CONFIG_SUFFIXES)}"
    )


def check_config(target: str, overrides: Sequence[str]) -> int:
    """``torchwm check CONFIG``: every error with its key path (status 2), or the resolved config (status
    0)."""
    spec, run, errors = config_errors(target, overrides)
    if errors:
        for error in errors:
            print(f"torchwm check: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"torchwm check: {target}: valid ({spec.id} x {spec.num_envs} on {spec.backend}); "
        f"the resolved config, every default explicit:",
        file=sys.stderr,
        flush=True,
    )
    sys.stdout.write(dump_config(spec, config_format(target), run=run))
    return EXIT_OK


def check_backend(backend: str, overrides: Sequence[str]) -> int:
    """``torchwm check BACKEND``: the conformance checks of `torchwm.testing`, one line each."""
    registry("backend").get(backend)  # an unknown name is bad input, before any check runs
    overrides = [o.removeprefix("backend_kwargs.") for o in overrides]
    backend_kwargs = apply_overrides({}, overrides)
    check_backend_options(backend, backend_kwargs)  # a misspelt option: one line, not one failure per check
    import torchwm.testing

    print(
        f"conformance checks on backend {backend!r}"
        + (f" with backend_kwargs {backend_kwargs}" if backend_kwargs else ""),
        flush=True,
    )
    results = torchwm.testing.run_checks(backend, backend_kwargs=backend_kwargs)
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
    print(
        f"{len(results) - len(failed)} of {len(results)} checks passed"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return EXIT_FAILED if failed else EXIT_OK
