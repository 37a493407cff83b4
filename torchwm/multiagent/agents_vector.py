"""The ``agents`` layout: `AgentsVectorEnv`, a Gymnasium vector env whose rows are agents.

SuperSuit's, PufferLib's, SB3's and CleanRL's way of training one policy for every agent (parameter
sharing): N PettingZoo envs of A agents each are ``N * A`` rows, env-major (row ``k`` is env ``k // A``,
agent ``possible_agents[k % A]``). The envs run on the torchwm vector env given (any backend), each as an
`AgentsEnv`; this layer only reshapes its ``(N, A, ...)`` arrays to rows (views where NumPy can) and lays
out the infos: Gymnasium's (arrays over rows with ``_key`` masks: ``agent_mask``, ``action_mask``, the
agents' own keys, the env-level ones given to each of the env's rows; under ``same_step``
``final_obs``/``final_info`` per row) or, with ``info_format="list"``, one dict per row (each ended row
with its ``terminal_observation``, as SuperSuit and SB3 give it).

The unit of work stays the PettingZoo env: ``env_ids`` (``reset``, ``step``, ``send``) name envs, and
all agents of an env are sent, received and reset together; ``infos["env_id"]`` gives each row's env.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.multiagent.agent_spaces import AgentSpaces, batched
from torchwm.multiagent.env_batches import EnvStep, agent_row, join_rows, repeat_rows, split_rows
from torchwm.multiagent.inner_env import InnerVectorEnv
from torchwm.vector.batching import InfoBatcher

INFO_FORMATS = ("gymnasium", "list")


class AgentsVectorEnv(InnerVectorEnv, gym.vector.VectorEnv):
    """N PettingZoo envs of A agents as a Gymnasium vector env of ``N * A`` rows (see the module).

    Built by `torchwm.multiagent.make_vec` (``layout="agents"``).

    Attributes:
        possible_agents: the agents of each env, in row order.
        num_agents_per_env: A.
        num_vector_envs: N, the PettingZoo envs.
        inner: the torchwm vector env of N rows that runs them.
    """

    def __init__(
        self,
        inner: gym.vector.VectorEnv,
        agent_spaces: AgentSpaces,
        *,
        info_format: str = "gymnasium",
        seed: int | None = None,
    ) -> None:
        single_observation = agent_spaces.shared_observation_space
        single_action = agent_spaces.shared_action_space
        if single_observation is None or single_action is None:
            raise AssertionError(
                'layout="agents" gives every agent a row of one batch, so the agents must share their '
                "observation and action spaces; pass pad_spaces=True to zero-pad Box observations and "
                'Discrete actions to one space, or use layout="parallel"'
            )
        if info_format not in INFO_FORMATS:
            raise ValueError(f"info_format must be one of {list(INFO_FORMATS)}, got {info_format!r}")
        self._init_inner(inner, agent_spaces)
        self.info_format = info_format
        self.num_envs = self.num_vector_envs * self.num_agents_per_env
        self.single_observation_space = single_observation
        self.single_action_space = single_action
        self.observation_space = batched(single_observation, self.num_envs)
        self.action_space = batched(single_action, self.num_envs)
        if seed is not None:
            self.action_space.seed(seed)

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None, env_ids: Any = None
    ) -> tuple[Any, Any]:
        """Reset every env (all its agents), or the envs ``env_ids`` (their rows only). ``seed=s`` seeds
        env ``i`` with ``s + i``; a list gives one seed per env. Under ``autoreset_mode="disabled"``,
        ``options["reset_mask"]`` is over rows: an env resets where all its rows are True (a dead agent's
        row is True while its env goes on)."""
        if options is not None and "reset_mask" in options:
            options = {**options, "reset_mask": self._env_mask(options["reset_mask"])}
        obs, infos, ids = self._inner_reset(seed, options, env_ids)
        rows = self._rows(EnvStep.read(obs, infos, ids))
        return rows[0], rows[4]

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """Start stepping every env, or the envs ``env_ids``: ``actions`` holds one row per agent of
        those envs, env-major (``len(env_ids) * A`` rows)."""
        envs = self.num_vector_envs if env_ids is None else len(self._env_id_list(env_ids))
        rows = envs * self.num_agents_per_env
        actions = self._checked_actions(self.single_action_space, actions, rows)
        self._inner_send(split_rows(actions, envs, self.num_agents_per_env), env_ids)

    def recv(self, timeout: float | None = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        """The rows of the envs sent (all of them, or the first ``batch_size`` ready: whole envs, each
        row's env in ``infos["env_id"]``). ``timeout``: seconds to wait (default: the backend's), then
        `EnvTimeoutError` (a ``TimeoutError``), the step still in flight."""
        return self._rows(self._inner_recv(timeout))

    def step(self, actions: Any, env_ids: Any = None) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        self.send(actions, env_ids)
        return self.recv()

    def restore_state(self, states: Any, env_ids: Any = None) -> tuple[Any, Any]:
        """Restore envs saved by ``clone_state`` (whole PettingZoo envs): their rows, as `reset` gives
        them."""
        obs, infos, ids = self._inner_restore(states, env_ids)
        rows = self._rows(EnvStep.read(obs, infos, ids))
        return rows[0], rows[4]

    # -- rows ----------------------------------------------------------------------------------------

    def _env_mask(self, mask: Any) -> np.ndarray:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
            raise ValueError(
                f"reset_mask must be a bool array of shape ({self.num_envs},), one per row, got "
                f"{mask.dtype} of shape {mask.shape}"
            )
        return mask.reshape(self.num_vector_envs, self.num_agents_per_env).all(axis=1)

    def _rows(self, step: EnvStep) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, Any]:
        a = self.num_agents_per_env
        rows = step.env_ids.size * a
        observations = join_rows(step.observations, rows)
        infos = self._list_infos(step, rows) if self.info_format == "list" else self._vector_infos(step, rows)
        return (
            observations,
            step.rewards.reshape(rows),
            step.terminations.reshape(rows),
            step.truncations.reshape(rows),
            infos,
        )

    def _vector_infos(self, step: EnvStep, rows: int) -> dict[str, Any]:
        a = self.num_agents_per_env
        every = np.ones(rows, dtype=np.bool_)
        infos: dict[str, Any] = {}
        if any(info is not None for info in step.agent_infos):
            infos = InfoBatcher(rows).batch(_spread(step.agent_infos, a))
        infos.update(repeat_rows(step.env_infos, a))
        infos["agent_mask"], infos["_agent_mask"] = step.agent_mask.reshape(rows), every
        if step.action_mask is not None:
            infos["action_mask"] = step.action_mask.reshape(rows, -1)
            infos["_action_mask"] = every
        if step.ended.any():
            final_obs = np.full(rows, None, dtype=object)
            for e in np.flatnonzero(step.ended).tolist():
                for k in range(a):
                    final_obs[e * a + k] = agent_row(step.final_observations[e], k)
            ended_rows = np.repeat(step.ended, a)
            infos["final_obs"], infos["_final_obs"] = final_obs, ended_rows
            final_infos = [info if info is not None else [{}] * a for info in step.final_agent_infos]
            infos["final_info"] = InfoBatcher(rows).batch(
                [info if ended_rows[r] else {} for r, info in enumerate(_spread(final_infos, a))]
            )
            infos["_final_info"] = ended_rows
        if self._partial(step):
            infos["env_id"] = np.repeat(step.env_ids, a)
        return infos

    def _list_infos(self, step: EnvStep, rows: int) -> list[dict[str, Any]]:
        a = self.num_agents_per_env
        env_level = repeat_rows(step.env_infos, a)
        agent_mask = step.agent_mask.reshape(rows)
        action_mask = None if step.action_mask is None else step.action_mask.reshape(rows, -1)
        partial = self._partial(step)
        out: list[dict[str, Any]] = []
        for e in range(step.env_ids.size):
            agent_infos = step.agent_infos[e]
            final_infos = step.final_agent_infos[e]
            for k in range(a):
                r = e * a + k
                info: dict[str, Any] = {}
                if step.ended[e]:
                    # SuperSuit's order: the ending step's info and last observation, then the reset's info.
                    info.update(final_infos[k] if final_infos is not None else {})
                    info["terminal_observation"] = agent_row(step.final_observations[e], k)
                if agent_infos is not None:
                    info.update(agent_infos[k])
                for key, value in env_level.items():
                    if not key.startswith("_") and env_level.get(f"_{key}", every_true)[r]:
                        info[key] = value[r]
                info["agent_mask"] = bool(agent_mask[r])
                if action_mask is not None:
                    info["action_mask"] = action_mask[r]
                if partial:
                    info["env_id"] = int(step.env_ids[e])
                out.append(info)
        return out


class _EveryTrue:
    """A mask that is True at every row (for env-level info keys without one)."""

    def __getitem__(self, row: int) -> bool:
        return True


every_true = _EveryTrue()


def _spread(per_env: Sequence[list[dict] | None], a: int) -> list[dict]:
    """Per-env lists of A agent infos (None: all empty) as one list of rows."""
    rows: list[dict] = []
    for infos in per_env:
        rows.extend(infos if infos is not None else [{}] * a)
    return rows
