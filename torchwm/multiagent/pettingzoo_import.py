"""PettingZoo, imported for `torchwm.multiagent` only: a missing install is one line naming the extra.

torchwm does not depend on PettingZoo; `pettingzoo_env_types` imports it on first use and, if it is
missing, raises `torchwm.extras.MissingExtraError` (an ``ImportError``) with the command that installs
torchwm's ``pettingzoo`` extra.
"""

from __future__ import annotations

from typing import Any

from torchwm.extras import missing_extra


def pettingzoo_env_types() -> tuple[Any, Any]:
    """PettingZoo's ``(ParallelEnv, AECEnv)`` classes."""
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "pettingzoo":
            raise missing_extra("pettingzoo", "torchwm.multiagent") from exc
        raise
    return ParallelEnv, AECEnv
