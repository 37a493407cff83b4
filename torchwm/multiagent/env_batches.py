"""Reading the batch of the vector env that runs `AgentsEnv` envs: what both multi-agent layouts share.

The inner vector env (N rows, one per PettingZoo env) returns each env's agents in the `spaces.Dict`
observation of `torchwm.multiagent.agents_env`; `EnvStep` takes one of its results apart: the agents'
observations, rewards and flags (under ``same_step``, those of an env that ended are the ones in
``infos["final_obs"]``, since its observation row is already the new episode's; those of an env whose
worker was restarted are the lost episode's end: truncated, reward 0), the agents' infos and the
env-level infos. The layouts (`torchwm.multiagent.agents_vector`, `torchwm.multiagent.parallel_vector`)
lay them out as rows or as dicts. Also here: the reshapes between ``(N, A, ...)`` and ``(N*A, ...)``
batches, views where NumPy can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Keys of the inner vector env's infos that `EnvStep` reads itself; every other key is the env's (its
# ``episode_seed``, a restart's words) and is given for each of its agents.
AGENT_INFO_KEYS = ("agent_infos", "final_obs", "final_info", "env_id")
# The key of the envs whose worker was restarted (``restart_on_crash``): env-level, given to every agent.
WORKER_RESTARTED = "worker_restarted"


def join_rows(batch: Any, rows: int) -> Any:
    """A ``(N, A, ...)`` batch (nested dicts and tuples of arrays) as ``(N*A, ...)``: views where it can."""
    if isinstance(batch, dict):
        return {key: join_rows(value, rows) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(join_rows(value, rows) for value in batch)
    return batch.reshape(rows, *batch.shape[2:])


def split_rows(batch: Any, envs: int, agents: int) -> Any:
    """A ``(N*A, ...)`` batch as ``(N, A, ...)``."""
    if isinstance(batch, dict):
        return {key: split_rows(value, envs, agents) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(split_rows(value, envs, agents) for value in batch)
    return batch.reshape(envs, agents, *batch.shape[1:])


def agent_column(batch: Any, k: int) -> Any:
    """Column ``k`` of a ``(N, A, ...)`` batch: agent ``k`` of every env, ``(N, ...)`` (a view)."""
    if isinstance(batch, dict):
        return {key: agent_column(value, k) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(agent_column(value, k) for value in batch)
    return batch[:, k]


def agent_row(batch: Any, k: int) -> Any:
    """Agent ``k`` of one env's stacked ``(A, ...)`` values."""
    if isinstance(batch, dict):
        return {key: agent_row(value, k) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(agent_row(value, k) for value in batch)
    return batch[k]


@dataclass
class EnvStep:
    """One result of the inner vector env, taken apart (see the module).

    Attributes:
        observations: the agents' observations, ``(n, A, ...)`` or a dict by agent of ``(n, ...)``.
        rewards: float32 ``(n, A)``; terminations, truncations, agent_mask: bool ``(n, A)``.
        action_mask: int8 ``(n, A, mask_size)`` or None.
        ended: bool ``(n,)``: the env ended its episode on this step and was reset at once (``same_step``).
        final_observations: for each env of ``ended``, its agents' last observations (else None).
        agent_infos: for each env, its agents' infos (one dict each) or None when all are empty.
        final_agent_infos: for each env of ``ended``, its agents' infos of the ending step.
        env_infos: the env-level infos (Gymnasium's batch over the n envs, ``_key`` masks included).
        env_ids: the envs of the rows, in order.
    """

    observations: Any
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    agent_mask: np.ndarray
    action_mask: np.ndarray | None
    ended: np.ndarray
    final_observations: list[Any]
    agent_infos: list[list[dict] | None]
    final_agent_infos: list[list[dict] | None]
    env_infos: dict[str, Any]
    env_ids: np.ndarray

    @classmethod
    def read(cls, obs: dict[str, Any], infos: dict[str, Any], env_ids: np.ndarray) -> EnvStep:
        n = env_ids.size
        rewards = np.array(obs["reward"], dtype=np.float32)
        terminations = np.array(obs["terminated"], dtype=np.bool_)
        truncations = np.array(obs["truncated"], dtype=np.bool_)
        ended = np.asarray(infos.get("_final_obs", np.zeros(n, dtype=np.bool_)), dtype=np.bool_)
        final_observations: list[Any] = [None] * n
        final_agent_infos: list[list[dict] | None] = [None] * n
        final_info = infos.get("final_info", {})
        restarted = _restarted(infos, n)
        for e in np.flatnonzero(ended).tolist():
            final = infos["final_obs"][e]
            final_observations[e] = final["obs"]
            if restarted[e]:
                continue  # the row before the crash: its rewards and flags were the step before's
            # The env was reset in this step: its agents' rewards and flags are the ending step's.
            rewards[e] = final["reward"]
            terminations[e] = final["terminated"]
            truncations[e] = final["truncated"]
            final_agent_infos[e] = _agent_infos_of(final_info, e)
        # A restarted worker's env lost its episode: every agent's row ends truncated, no step ran (reward 0).
        # Its observation row is the new episode's, whose flags are False.
        rewards[restarted] = 0.0
        terminations[restarted] = False
        truncations[restarted] = True
        return cls(
            observations=obs["obs"],
            rewards=rewards,
            terminations=terminations,
            truncations=truncations,
            agent_mask=obs["agent_mask"],
            action_mask=obs.get("action_mask"),
            ended=ended,
            final_observations=final_observations,
            agent_infos=[_agent_infos_of(infos, e) for e in range(n)]
            if "agent_infos" in infos
            else [None] * n,
            final_agent_infos=final_agent_infos,
            env_infos={key: value for key, value in infos.items() if key.lstrip("_") not in AGENT_INFO_KEYS},
            env_ids=env_ids,
        )


def _restarted(infos: dict[str, Any], n: int) -> np.ndarray:
    """Which of the ``n`` envs a worker restart reset (``restart_on_crash``, ``infos["worker_restarted"]``):
    bool ``(n,)``."""
    if WORKER_RESTARTED not in infos:
        return np.zeros(n, dtype=np.bool_)
    flags = np.asarray(infos[WORKER_RESTARTED], dtype=np.bool_)
    return flags & np.asarray(infos.get(f"_{WORKER_RESTARTED}", np.ones(n, dtype=np.bool_)), dtype=np.bool_)


def _agent_infos_of(infos: dict[str, Any], e: int) -> list[dict] | None:
    """Env ``e``'s agents' infos in a batched info dict (`AgentsEnv` puts them under ``agent_infos``)."""
    if "agent_infos" not in infos or not infos["_agent_infos"][e]:
        return None
    return list(infos["agent_infos"][e])


def repeat_rows(value: Any, times: int) -> Any:
    """An env-level info batch (arrays over n envs, nested dicts) given to each of an env's ``times``
    rows: ``(n*times, ...)``."""
    if isinstance(value, dict):
        return {key: repeat_rows(sub, times) for key, sub in value.items()}
    if isinstance(value, np.ndarray):
        return np.repeat(value, times, axis=0)
    return value
