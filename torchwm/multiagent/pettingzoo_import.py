"""PettingZoo, imported for `torchwm.multiagent` only: a missing install is one line naming the extra.

torchwm does not depend on PettingZoo; `pettingzoo_env_types` imports it on first use and, if it is
missing, raises ``ModuleNotFoundError`` saying ``pip install "torchwm[pettingzoo]"``.
"""

from __future__ import annotations

INSTALL_HINT = 'torchwm.multiagent needs PettingZoo: pip install "torchwm[pettingzoo]"'


def pettingzoo_env_types() -> tuple[type, type]:
    """PettingZoo's ``(ParallelEnv, AECEnv)`` classes."""
    try:
        from pettingzoo.utils.env import AECEnv, ParallelEnv
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] == "pettingzoo":
            raise ModuleNotFoundError(INSTALL_HINT, name="pettingzoo") from exc
        raise
    return ParallelEnv, AECEnv

