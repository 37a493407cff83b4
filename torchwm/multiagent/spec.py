"""`MultiAgentSpec`: a multi-agent setup as plain data, and the one declaration of the options of
`torchwm.multiagent.make_vec`.

Each option of ``make_vec`` is a field of `MultiAgentSpec`, declared once with `option_field`: its default,
its check, its help and where a config file writes it (the keys a single-agent config has too, such as
``num_envs`` and ``backend``, at the top; the PettingZoo env, its options and the layout's options in the
``[multiagent]`` table). ``make_vec`` runs the checks on what a Python caller gives
(`check_make_vec_options`), a spec runs them when it is made, and the config file runs them through its
pydantic model (`torchwm.multiagent.config`), so that each mistake is said in the same words wherever it
comes from. A spec's ``env`` is a PettingZoo module path, what a file can hold; `MultiAgentSpec.to_dict` and
`from_dict` round-trip it, and `torchwm.multiagent.make.make_vec_from_spec` builds it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torchwm.multiagent.agents_env import DEAD_AGENTS
from torchwm.multiagent.agents_vector import INFO_FORMATS
from torchwm.multiagent.parallel_vector import GROUP_MAPS
from torchwm.spec import (
    check_count,
    check_optional_seed,
    check_options,
    check_registered,
    package_versions,
    parse_autoreset_mode,
)

LAYOUTS = ("agents", "parallel", "aec")
# The metadata key under which a `MultiAgentSpec` field holds its `Option`.
OPTION = "torchwm_multiagent_option"
# Where a config file writes an option: at the top, or in this table.
TABLE = "multiagent"
# A PettingZoo module path: dotted Python names ("mpe2.simple_spread_v3").
_MODULE_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class Option:
    """One option of ``make_vec``: a `MultiAgentSpec` field's metadata.

    Attributes:
        name: the keyword of ``make_vec``, the field and the config key.
        default: ``make_vec``'s default (`dataclasses.MISSING`: required).
        help: one line, for the docs and the config's errors.
        check: takes the value given and returns it normalised (``"NextStep"`` -> ``"next_step"``), or raises
            ``TypeError``/``ValueError`` (`UnknownNameError` for a backend) with the message every caller
            sees.
        in_table: a config file writes it in the ``[multiagent]`` table (else at the top).
    """

    name: str
    default: Any
    help: str
    check: Callable[[Any], Any]
    in_table: bool


class OptionConflictError(ValueError):
    """Two options that do not go together; ``option`` is the one the message is about."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def option_field(
    default: Any,
    *,
    help: str,
    check: Callable[[Any], Any],
    in_table: bool = False,
    field_default: Any = dataclasses.MISSING,
) -> Any:
    """A `MultiAgentSpec` field and its `Option`. ``field_default``: the field's own default where it
    differs from ``make_vec``'s (``None`` options become an empty dict); a dict default is a new one each
    time."""
    own = default if field_default is dataclasses.MISSING else field_default
    metadata = {OPTION: {"default": default, "help": help, "check": check, "in_table": in_table}}
    if isinstance(own, dict):
        return dataclasses.field(default_factory=dict, metadata=metadata)
    return dataclasses.field(default=own, metadata=metadata)


def check_one_of(name: str, choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
        return str(value)

    return check


def check_true_or_false(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
        return value

    return check


def check_env_path(value: Any) -> str:
    """A PettingZoo module path (what a spec and a config file hold; ``make_vec`` takes more, checked by
    `torchwm.multiagent.sources`)."""
    if not isinstance(value, str) or not _MODULE_PATH.fullmatch(value):
        raise TypeError(
            f'env must be a PettingZoo module path such as "mpe2.simple_spread_v3" or '
            f'"pettingzoo.butterfly.pistonball_v6", got {value!r}'
        )
    return value


def check_group_map(value: Any) -> Any:
    """None, a named map, or ``{group: [agents]}`` (which agents exist is checked against the env's)."""
    if value is None or value in GROUP_MAPS:
        return value
    if isinstance(value, Mapping) and all(
        isinstance(members, (list, tuple)) and all(isinstance(a, str) for a in members)
        for members in value.values()
    ):
        return {str(group): list(members) for group, members in value.items()}
    raise ValueError(
        f"group_map must be None, one of {list(GROUP_MAPS)} or a dict {{group: [agents]}}, got {value!r}"
    )


@dataclass(frozen=True)
class MultiAgentSpec:
    """A multi-agent setup, every default explicit: what `torchwm.multiagent.make_vec` builds from a
    PettingZoo module path. Its fields are ``make_vec``'s options (`options`)."""

    env: str = option_field(
        dataclasses.MISSING,
        help='the PettingZoo env\'s module path ("mpe2.simple_spread_v3")',
        check=check_env_path,
        in_table=True,
    )
    env_kwargs: dict[str, Any] = option_field(
        None,
        field_default={},
        help="keyword arguments of the module's parallel_env() (env() for layout aec)",
        check=check_options("env_kwargs"),
        in_table=True,
    )
    num_envs: int = option_field(
        1, help="N, the PettingZoo envs", check=lambda value: check_count("num_envs", value)
    )
    backend: str = option_field(
        "sync", help="a registered backend (torchwm list backends)", check=check_registered("backend")
    )
    backend_kwargs: dict[str, Any] = option_field(
        None, field_default={}, help="options of the backend", check=check_options("backend_kwargs")
    )
    layout: str = option_field(
        "agents",
        help="agents (a row per agent), parallel (dicts by agent) or aec (turn-based)",
        check=check_one_of("layout", LAYOUTS),
        in_table=True,
    )
    autoreset_mode: str = option_field(
        "same_step", help="same_step (SuperSuit's), next_step or disabled", check=parse_autoreset_mode
    )
    dead_agents: str = option_field(
        "error",
        help="error, or zero: a dead agent's rows are zeros until its env resets",
        check=check_one_of("dead_agents", DEAD_AGENTS),
        in_table=True,
    )
    pad_spaces: bool = option_field(
        False,
        help="zero-pad Box observations and Discrete actions of differing agents to one space",
        check=check_true_or_false("pad_spaces"),
        in_table=True,
    )
    info_format: str = option_field(
        "gymnasium",
        help="gymnasium (dicts of arrays) or list (one dict per row)",
        check=check_one_of("info_format", INFO_FORMATS),
        in_table=True,
    )
    group_map: Any = option_field(
        None,
        help="layout parallel only: all_agents, one_group_per_agent, by_prefix or {group: [agents]}",
        check=check_group_map,
        in_table=True,
    )
    seed: int | None = option_field(
        None, help="seed of the first reset (env i gets seed + i)", check=check_optional_seed
    )
    autoreset_seeds: bool = option_field(
        False,
        help='seed every episode from (seed, env, episode), in infos["episode_seed"]',
        check=check_true_or_false("autoreset_seeds"),
    )

    def __post_init__(self) -> None:
        checked = check_make_vec_options({option.name: getattr(self, option.name) for option in options()})
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def id(self) -> str:
        """What the setup runs, as the commands name it: the env's module path."""
        return self.env

    @property
    def family(self) -> str:
        return "multiagent"

    def replace(self, **changes: Any) -> MultiAgentSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as a config file writes it (the ``[multiagent]`` table's keys in ``"multiagent"``),
        that `from_dict` turns back into an equal spec."""
        data: dict[str, Any] = {}
        table: dict[str, Any] = {}
        for option in options():
            value = getattr(self, option.name)
            value = dict(value) if isinstance(value, dict) else value
            (table if option.in_table else data)[option.name] = value
        data[TABLE] = table
        data["versions"] = package_versions()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MultiAgentSpec:
        """The spec `to_dict` wrote."""
        data = dict(data)
        data.pop("versions", None)
        table = dict(data.pop(TABLE, {}))
        known = {option.name for option in options()}
        unknown = sorted((set(data) | set(table)) - known)
        if unknown:
            raise ValueError(
                f"MultiAgentSpec.from_dict: unknown keys {unknown}; expected some of {sorted(known)}"
            )
        return cls(**data, **table)


def options() -> tuple[Option, ...]:
    """Every option of ``make_vec``, in `MultiAgentSpec`'s field order."""
    return tuple(
        Option(name=spec_field.name, **spec_field.metadata[OPTION])
        for spec_field in dataclasses.fields(MultiAgentSpec)
    )


def check_make_vec_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (options of ``make_vec`` by name) checked one by one with their declared checks, then
    together; returns them normalised.

    Raises:
        TypeError, ValueError: an option's check (`OptionConflictError` for two that do not go together).
        UnknownNameError: an unknown backend, with the closest names.
    """
    declared = {option.name: option for option in options()}
    checked = {name: declared[name].check(value) for name, value in values.items()}
    layout = checked.get("layout", declared["layout"].default)
    if checked.get("info_format") == "list" and layout == "parallel":
        raise OptionConflictError(
            "info_format",
            'info_format="list" gives one info dict per row of layout="agents"; layout="parallel" gives '
            'dicts by agent: use info_format="gymnasium"',
        )
    if checked.get("group_map") is not None and layout != "parallel":
        raise OptionConflictError(
            "group_map",
            f'group_map keys the dicts of layout="parallel"; it means nothing for layout={layout!r}',
        )
    return checked
