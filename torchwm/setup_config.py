"""Either kind of setup from one config: a single-agent one (`torchwm.config`, a `VecSpec`) or, for a config
with a ``[multiagent]`` table, a multi-agent one (`torchwm.multiagent.config`, a `MultiAgentSpec`), told apart
by that table. ``torchwm.load_config`` and ``torchwm.make_vec_from_config`` are this module's, and the
commands read their configs with `load_setup_config`, so that every config, of either kind, is taken
wherever a config is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from torchwm.config import MULTIAGENT_TABLE, RunOptions, load_table, validate_config
from torchwm.config import make_vec_from_config as make_single_agent_vec_from_config
from torchwm.multiagent.config import validate_multiagent_config
from torchwm.multiagent.make import make_vec_from_spec as make_multiagent_vec_from_spec
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.spec import VecSpec

Source = str | os.PathLike[str] | Mapping[str, Any]


def load_setup_config(
    source: Source, overrides: Sequence[str] = (), backend: str | None = None
) -> tuple[VecSpec | MultiAgentSpec, RunOptions]:
    """The setup a config describes (a `MultiAgentSpec` for a ``[multiagent]`` table, else a `VecSpec`) and
    its ``[run]`` table; ``overrides`` and ``backend`` as `torchwm.config.load_run_config`'s."""
    return load_table(source, validate_setup_config, overrides, backend)


def validate_setup_config(data: Mapping[str, Any]) -> tuple[VecSpec | MultiAgentSpec, RunOptions]:
    """A raw table validated as a multi-agent setup if it has a ``[multiagent]`` table, else as a
    single-agent one."""
    if MULTIAGENT_TABLE in data:
        return validate_multiagent_config(data)
    return validate_config(data)


def load_config(source: Source, overrides: Sequence[str] = ()) -> VecSpec | MultiAgentSpec:
    """A validated setup from a config file or dict: a `VecSpec`, or a `MultiAgentSpec` for a config with a
    ``[multiagent]`` table.

    Example:
        >>> import torchwm
        >>> torchwm.load_config({"id": "CartPole-v1", "num_envs": 2}).num_envs
        2
        >>> torchwm.load_config({"multiagent": {"env": "mpe2.simple_spread_v3"}}).layout
        'agents'
    """
    return load_setup_config(source, overrides)[0]


def make_vec_from_config(source: Source | VecSpec | MultiAgentSpec, overrides: Sequence[str] = ()) -> Any:
    """Build the vector env a config file, dict or spec describes (a multi-agent one for a ``[multiagent]``
    table or a `MultiAgentSpec`: `torchwm.multiagent.make_vec`'s).

    Example:
        >>> import torchwm
        >>> with torchwm.make_vec_from_config({"multiagent": {"env": "mpe2.simple_spread_v3"}}) as envs:
        ...     envs.num_envs
        3
    """
    if isinstance(source, VecSpec):
        return make_single_agent_vec_from_config(source, overrides)
    if isinstance(source, MultiAgentSpec) and not overrides:
        return make_multiagent_vec_from_spec(source)
    spec = load_config(source.to_dict() if isinstance(source, MultiAgentSpec) else source, overrides)
    if isinstance(spec, MultiAgentSpec):
        return make_multiagent_vec_from_spec(spec)
    return make_single_agent_vec_from_config(spec)
