"""Config files of multi-agent setups: a ``[multiagent]`` table beside the usual top-level keys.

A config that has a ``[multiagent]`` table describes PettingZoo envs vectorized by
`torchwm.multiagent.make_vec`: the table holds the env's module path (``env = "mpe2.simple_spread_v3"``), its
options (``env_kwargs``) and the layout's options (``layout``, ``dead_agents``, ``pad_spaces``,
``info_format``, ``group_map``); the top holds what a single-agent config has too (``num_envs``,
``backend``, ``backend_kwargs`` and ``[backends.NAME]`` tables, ``seed``, ``autoreset_mode``,
``autoreset_seeds``, ``[run]``). Every key is one of ``make_vec``'s options, declared once in
`torchwm.multiagent.spec`: the pydantic model here is derived from that declaration and validates each
key with the option's own check, so a file's mistake reads as the same call's would, after the key
(``multiagent.layout: layout must be one of ['agents', 'parallel', 'aec'], got 'rows'``). The file is read
as `torchwm.config` reads single-agent ones (TOML, YAML, JSON or a dict; ``${VAR}``; ``--set``
overrides); `load_config` gives a `MultiAgentSpec`, `make_vec_from_config` the vector env
(`torchwm.setup_config` reads either kind of config, by the table).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

import pydantic
from pydantic import ConfigDict, Field

from torchwm.config import (
    MULTIAGENT_TABLE,
    RunOptions,
    check_backend_options,
    check_backend_tables,
    load_table,
    warn_versions,
)
from torchwm.errors import ConfigError, did_you_mean
from torchwm.extras import missing_extra
from torchwm.multiagent.make import make_vec_from_spec
from torchwm.multiagent.pettingzoo_import import pettingzoo_env_types
from torchwm.multiagent.sources import env_sources
from torchwm.multiagent.spec import MultiAgentSpec, Option, OptionConflictError, options

# The packages of torchwm's pettingzoo extra an env module path may start with: missing, they are the
# extra's one-line error.
EXTRA_PACKAGES = ("pettingzoo", "mpe2")
# The keys of a single-agent config that a multi-agent one has no use for, with where their job is done.
SINGLE_AGENT_KEYS = {
    "id": "the env is multiagent.env",
    "env_kwargs": "the env's options are multiagent.env_kwargs",
    "source": "the env is multiagent.env, a PettingZoo module path",
    "wrappers": "a multi-agent setup has no wrapper stack",
    "size": "a multi-agent setup has no wrapper stack",
    "fused": "a multi-agent setup has no fused Atari env",
    "family": "a multi-agent setup has no env family",
}


def _checked_by(option: Option) -> Callable[[Any], Any]:
    """The option's own check, as a pydantic validator: its message becomes the key's error, unchanged."""

    def validate(value: Any) -> Any:
        try:
            return option.check(value)
        except (TypeError, LookupError) as exc:  # pydantic reports ValueErrors only
            raise ValueError(str(exc)) from exc

    return validate


def _key(option: Option) -> tuple[Any, Any]:
    default = ... if option.default is dataclasses.MISSING else option.default
    return Annotated[Any, pydantic.AfterValidator(_checked_by(option))], Field(default)


# The keys of the [multiagent] table and of the top, one per declared option, then the file's own.
_TABLE_KEYS: dict[str, Any] = {option.name: _key(option) for option in options() if option.in_table}
TableModel = pydantic.create_model(
    "TableModel",
    __config__=ConfigDict(extra="forbid"),
    __doc__="The [multiagent] table: the options of make_vec that a config writes there.",
    **_TABLE_KEYS,
)
_TOP_KEYS: dict[str, Any] = {
    **{option.name: _key(option) for option in options() if not option.in_table},
    MULTIAGENT_TABLE: (TableModel, ...),
    "backends": (dict[str, dict[str, Any]], Field(default_factory=dict, strict=True)),
    "versions": (dict[str, str | None] | None, None),
    "run": (RunOptions, Field(default_factory=lambda: RunOptions())),
}
MultiAgentConfigModel = pydantic.create_model(
    "MultiAgentConfigModel",
    __config__=ConfigDict(extra="forbid"),
    __doc__="The keys of a multi-agent config: make_vec's options at the top, the [multiagent] table, "
    "backends, versions and [run].",
    **_TOP_KEYS,
)
TOP_KEYS = sorted(MultiAgentConfigModel.model_fields)
TABLE_KEYS = sorted(TableModel.model_fields)


def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any], overrides: Sequence[str] = ()
) -> MultiAgentSpec:
    """A validated `MultiAgentSpec` from a config file (TOML, YAML, JSON), a shipped config's name or a dict.

    Raises:
        ConfigError: the file is missing or unreadable, or a key is unknown or has a bad value; the message
            names the key (``multiagent.layout: ...``).
        MissingExtraError: PettingZoo (or the env's package of the ``pettingzoo`` extra) is not installed.

    Example:
        >>> import torchwm.multiagent
        >>> spec = torchwm.multiagent.load_config(
        ...     {"num_envs": 2, "seed": 0, "multiagent": {"env": "mpe2.simple_spread_v3"}}
        ... )
        >>> spec.env, spec.num_envs, spec.layout, spec.autoreset_mode
        ('mpe2.simple_spread_v3', 2, 'agents', 'same_step')
    """
    return load_run_config(source, overrides)[0]


def load_run_config(
    source: str | os.PathLike[str] | Mapping[str, Any],
    overrides: Sequence[str] = (),
    backend: str | None = None,
) -> tuple[MultiAgentSpec, RunOptions]:
    """Like `load_config`, and also the ``[run]`` table; ``backend`` as `torchwm.config.load_run_config`'s."""
    return load_table(source, validate_multiagent_config, overrides, backend)


def make_vec_from_config(
    source: str | os.PathLike[str] | Mapping[str, Any] | MultiAgentSpec, overrides: Sequence[str] = ()
) -> Any:
    """Build the multi-agent vector env a config file, dict or `MultiAgentSpec` describes.

    Example:
        >>> import torchwm.multiagent
        >>> envs = torchwm.multiagent.make_vec_from_config(
        ...     {"num_envs": 2, "seed": 0, "multiagent": {"env": "mpe2.simple_spread_v3"}}
        ... )
        >>> envs.num_envs, envs.possible_agents
        (6, ['agent_0', 'agent_1', 'agent_2'])
        >>> envs.close()
    """
    if isinstance(source, MultiAgentSpec):
        if not overrides:
            return make_vec_from_spec(source)
        source = source.to_dict()
    return make_vec_from_spec(load_config(source, overrides))


def validate_multiagent_config(data: Mapping[str, Any]) -> tuple[MultiAgentSpec, RunOptions]:
    """Check a raw multi-agent table key by key into a `MultiAgentSpec` (plus the ``[run]`` table)."""
    try:
        model = MultiAgentConfigModel.model_validate(dict(data))
    except pydantic.ValidationError as exc:
        raise ConfigError(describe(exc.errors()[0])) from None
    keys = dict(model)
    table = dict(keys.pop(MULTIAGENT_TABLE))
    run, backends, versions = keys.pop("run"), keys.pop("backends"), keys.pop("versions")
    check_backend_tables(backends)
    flat = keys["backend_kwargs"] or {}
    backend_kwargs = {**backends.get(keys["backend"], {}), **flat}
    check_backend_options(keys["backend"], backend_kwargs, flat)
    try:
        spec = MultiAgentSpec(**{**keys, "backend_kwargs": backend_kwargs}, **table)
    except OptionConflictError as exc:
        raise ConfigError(f"{MULTIAGENT_TABLE}.{exc.option}: {exc}") from exc
    check_env_module(spec)
    if versions:
        warn_versions(versions)
    return spec, run


def check_env_module(spec: MultiAgentSpec) -> None:
    """The env's module imports and has the function the layout calls (PettingZoo's, or the extra's
    one-line error when PettingZoo or the env's package of the extra is missing)."""
    pettingzoo_env_types()  # MissingExtraError without PettingZoo
    top = spec.env.partition(".")[0]
    if top in EXTRA_PACKAGES and importlib.util.find_spec(top) is None:
        raise missing_extra("pettingzoo", f"{MULTIAGENT_TABLE}.env {spec.env!r}")
    try:
        env_sources(spec.env, 1, dict(spec.env_kwargs), spec.layout)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{MULTIAGENT_TABLE}.env: {exc}") from exc


def describe(error: Mapping[str, Any]) -> str:
    """One pydantic error of a multi-agent config as ``key.path: message``: an option's own message for a
    bad value, the keys there are for an unknown one."""
    loc = [part for part in error["loc"] if not (isinstance(part, str) and part.startswith("function-"))]
    key = ".".join(str(part) for part in loc) or "config"
    if error["type"] == "extra_forbidden":
        in_table = loc[:1] == [MULTIAGENT_TABLE]
        if loc[:1] == ["run"]:
            known = sorted(RunOptions.model_fields)
        else:
            known = TABLE_KEYS if in_table else TOP_KEYS
        why = SINGLE_AGENT_KEYS.get(str(loc[-1]), "") if not in_table else ""
        hint = f" ({why})" if why else did_you_mean(str(loc[-1]), known)
        where = f"the [{MULTIAGENT_TABLE}] table's" if in_table else "the"
        return f"{key}: unknown key{hint}; {where} keys are: {', '.join(known)}"
    if error["type"] == "missing":
        return f"{key}: required key missing"
    if error["type"] == "value_error" and "error" in error.get("ctx", {}):
        return f"{key}: {error['ctx']['error']}"
    if loc[:1] == [MULTIAGENT_TABLE] and len(loc) == 1:
        return f"{key}: expected a table of the keys {', '.join(TABLE_KEYS)}, got {error['input']!r}"
    return f"{key}: {error['msg']}, got {error['input']!r}"
