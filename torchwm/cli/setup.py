"""The setup a command builds, as every ``torchwm`` command that builds one takes it: the arguments, reading
them, building the env, and the user's policy.

`add_setup_arguments` declares CONFIG_OR_ENV_ID, a flag per setup option that has one (``--num-envs``,
``--seed``, ``--backend``, ``--autoreset-mode``, ``--autoreset-seeds``: derived from
`torchwm.spec.setup_options`, with the option's own help) and ``--set``; `load_setup` reads them into a
`VecSpec` (a `torchwm.multiagent.MultiAgentSpec` for a config with a ``[multiagent]`` table), the flags over
the config's keys as ``--set`` is. `build_envs` builds that spec with the
one-line errors of bad input, and `load_policy` imports ``--policy module:function``: ``run`` and
``record`` share both.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from torchwm.command_line import INPUT_ERRORS, UsageError
from torchwm.config import is_config_reference, is_memory_error, memory_message, parse_value
from torchwm.errors import WorkerError
from torchwm.factory import make_vec_from_spec
from torchwm.multiagent.make import make_vec_from_spec as make_multiagent_vec_from_spec
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.setup_config import load_setup_config
from torchwm.spec import SetupOption, expected_text, setup_options

TARGET_HELP = (
    "a config file (.toml, .yaml, .yml, .json), a shipped config by name (torchwm list configs: pong, ...), "
    "or an env id such as ALE/Pong-v5"
)
SET_HELP = (
    "override a config key: num_envs=16, backends.shmem.num_workers=2, wrappers[1].stack_size=2 "
    "(torchwm check BACKEND: one of the backend's options, num_workers=2)"
)
# --backend switches the file's backend (config.switch_backend): its [backends.NAME] table applies, and
# the file's backend_kwargs the new one does not take are dropped.
SWITCHED = "backend"


def add_setup_arguments(parser: argparse.ArgumentParser) -> None:
    """CONFIG_OR_ENV_ID, a flag per setup option that declares one, and ``--set``; `load_setup` reads them."""
    parser.add_argument("target", metavar="CONFIG_OR_ENV_ID", help=TARGET_HELP)
    for option in setup_options():
        if option.flag:
            _add_flag(parser, option)
    add_set_argument(parser)


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE``, as often as wanted, into ``args.overrides``."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP
    )


def _add_flag(parser: argparse.ArgumentParser, option: SetupOption) -> None:
    flag = "--" + option.name.replace("_", "-")
    what = f"{option.help}; over the config's {option.name}"
    if option.name == SWITCHED:
        what += ", whose backend_kwargs this backend does not take are dropped"
    if option.config_type is bool:
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=what)
    else:
        parser.add_argument(flag, type=_flag_value(option.name), help=what)


@functools.cache
def _flag_value(name: str) -> Callable[[str], Any]:
    """An argparse type: the flag's text, checked as the config key ``name`` checks it once read as ``--set``
    reads a value (TOML), and refused in the key's own words (``expected an integer >= 1, got '0'``). One
    per option, so that every command's flag is the same."""
    option = next(option for option in setup_options() if option.name == name)

    def parse(text: str) -> Any:
        import pydantic  # the config layer's checker; a flag is a config key

        value = parse_value(text)
        try:
            pydantic.TypeAdapter(option.config_type).validate_python(value, strict=option.config_strict)
        except pydantic.ValidationError as exc:
            raise argparse.ArgumentTypeError(f"{expected_text(exc.errors()[0])}, got {text!r}") from None
        return text

    return parse


def load_setup(args: argparse.Namespace) -> tuple[Any, Any]:
    """The `VecSpec` (or, for a config with a ``[multiagent]`` table, the `MultiAgentSpec`) and the ``[run]``
    options of `add_setup_arguments`' arguments: the config or env id, with the flags over its keys, as
    ``--set`` is (after it)."""
    overrides = list(args.overrides)
    for option in setup_options():
        value = getattr(args, option.name, None) if option.flag and option.name != SWITCHED else None
        if value is not None:
            text = ("true" if value else "false") if isinstance(value, bool) else value
            overrides.append(f"{option.name}={text}")
    target = args.target if is_config_reference(args.target) else {"id": args.target}
    return load_setup_config(target, overrides, backend=getattr(args, SWITCHED))


def build_envs(spec: Any) -> Any:
    """The vector env ``spec`` describes; what the machine or the backend refuses of the input is a
    `UsageError` (one line, status 2)."""
    multiagent = isinstance(spec, MultiAgentSpec)
    try:
        return make_multiagent_vec_from_spec(spec) if multiagent else make_vec_from_spec(spec)
    except (MemoryError, WorkerError) as exc:
        if not is_memory_error(exc) or multiagent:
            raise
        raise UsageError(memory_message(spec, exc)) from exc
    except AssertionError as exc:
        # make_vec's refusal of the env's agents (spaces that differ under layout="agents", ...): bad input.
        if not multiagent:
            raise
        raise UsageError(f"building {spec.id} x {spec.num_envs} on {spec.backend!r} failed: {exc}") from exc
    except (TypeError, ValueError) as exc:
        # An option value the backend or the env refuses (a bad backend_kwargs or env_kwargs value) is bad
        # input.
        if isinstance(exc, INPUT_ERRORS):
            raise
        raise UsageError(f"building {spec.id} x {spec.num_envs} on {spec.backend!r} failed: {exc}") from exc


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
