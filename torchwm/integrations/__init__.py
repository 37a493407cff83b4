"""Adapters that hand a torchwm vector env to a learning library that has its own env interface.

`torchwm.integrations.sb3`: Stable-Baselines3's `VecEnv`. `torchwm.integrations.tianshou`: Tianshou's
`BaseVectorEnv` (`TianshouVectorEnv`, for its collectors and trainers). CleanRL and skrl take Gymnasium
vector envs as they are (docs/training.md says which autoreset mode each expects).
"""

from __future__ import annotations

from typing import Any


def check_full_batch(vec: Any, adapter: str) -> None:
    """Refuse a vector env whose steps return only some of its envs (``batch_size < num_envs``).

    SB3, RLlib and TorchRL step every env at each step and read one row per env: an env made with a
    smaller ``batch_size`` (torchwm's asynchronous mode, which `TianshouVectorEnv` uses) would fail on
    a later step, far from the cause.

    Args:
        vec: the vector env (a Gymnasium vector wrapper around a torchwm env too).
        adapter: names the adapter in the message.

    Raises:
        ValueError: the env has ``batch_size`` smaller than ``num_envs``.
    """
    batch_size = getattr(vec.unwrapped, "batch_size", None)
    # The agents layout of torchwm.multiagent counts its batch in PettingZoo envs, each of several rows.
    num_envs = getattr(vec.unwrapped, "num_vector_envs", vec.num_envs)
    if batch_size is not None and batch_size < num_envs:
        raise ValueError(full_batch_error(adapter, batch_size, num_envs))


def full_batch_error(adapter: str, batch_size: Any, num_envs: int) -> str:
    """The message of `check_full_batch`, also for an option seen before the env is built."""
    return (
        f"{adapter} steps every env at each step, but the vector env returns only batch_size={batch_size} "
        f"of its num_envs={num_envs} envs per step: leave batch_size unset (or set it to {num_envs})"
    )
