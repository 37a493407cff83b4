"""The ``parallel`` layout: `ParallelVectorEnv`, PettingZoo's parallel API over N envs at once.

TorchRL's, RLlib's and BenchMARL's way, for agents with spaces of their own: ``reset`` and ``step`` take
and give dicts keyed by agent of arrays ``(N, ...)`` (rewards float32 ``(N,)``), the PettingZoo
``ParallelEnv`` API with a batch dimension. ``group_map`` keys them by group instead, each group's agents
stacked ``(N, G, ...)`` (their spaces must match): ``"all_agents"``, ``"one_group_per_agent"``,
``"by_prefix"`` (TorchRL's default: the agent's name before its last ``_``), or ``{group: [agents]}``.

Infos: ``infos[agent]`` (or ``infos[group]``) holds the agents' own infos as Gymnasium batches them over
the N envs (``_key`` masks); ``infos["agent_mask"]`` and ``infos["action_mask"]`` are dicts by agent (or
group) of arrays; env-level keys (``episode_seed``, ...) are arrays over envs; under ``same_step``,
``infos["final_obs"]`` is a dict by agent (or group) of the ended envs' last observations (rows of envs
that did not end are zeros) with ``infos["_final_obs"]`` (N,) saying which envs ended, and
``infos["final_info"]`` their agents' infos.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, create_empty_array

from torchwm.multiagent.agent_spaces import AgentSpaces
from torchwm.multiagent.env_batches import EnvStep, agent_column, agent_row
from torchwm.multiagent.inner_env import InnerVectorEnv
from torchwm.vector.batching import InfoBatcher

GROUP_MAPS = ("all_agents", "one_group_per_agent", "by_prefix")


def resolve_group_map(group_map: Any, agents: Sequence[str]) -> dict[str, list[str]] | None:
    """``group_map`` as ``{group: [agents]}`` (None: keyed by agent), checked: every agent in one group."""
    if group_map is None:
        return None
    if group_map == "all_agents":
        return {"agents": list(agents)}
    if group_map == "one_group_per_agent":
        return {agent: [agent] for agent in agents}
    if group_map == "by_prefix":
        groups: dict[str, list[str]] = {}
        for agent in agents:
            groups.setdefault(agent.rpartition("_")[0] or agent, []).append(agent)
        return groups
    if isinstance(group_map, str) or not isinstance(group_map, Mapping):
        raise ValueError(
            f"group_map must be None, one of {list(GROUP_MAPS)} or a dict {{group: [agents]}}, "
            f"got {group_map!r}"
        )
    groups = {str(group): list(members) for group, members in group_map.items()}
    placed = [agent for members in groups.values() for agent in members]
    if sorted(placed) != sorted(agents):
        missing = [a for a in agents if a not in placed]
        extra = [a for a in placed if a not in agents or placed.count(a) > 1]
        raise ValueError(
            f"group_map must place each of possible_agents {list(agents)} in exactly one group; missing "
            f"{missing}, unknown or repeated {sorted(set(extra))}"
        )
    return groups


class ParallelVectorEnv(InnerVectorEnv):
    """N PettingZoo envs stepped at once, dicts keyed by agent (or group) of ``(N, ...)`` arrays.

    Built by `torchwm.multiagent.make_vec` (``layout="parallel"``).

    Attributes:
        possible_agents: the agents of each env.
        agents: the keys of observations and actions: ``possible_agents``, or the groups of ``group_map``.
        group_map: ``{group: [agents]}``, or None.
        num_envs, num_vector_envs: N.
    """

    def __init__(
        self,
        inner: gym.vector.VectorEnv,
        agent_spaces: AgentSpaces,
        *,
        group_map: Any = None,
        seed: int | None = None,
    ) -> None:
        agents = list(agent_spaces.agents)
        groups = resolve_group_map(group_map, agents)
        self._init_inner(inner, agent_spaces)
        self.num_envs = self.num_vector_envs
        self.group_map = groups
        self._stacked = agent_spaces.shared_observation_space is not None
        self._stacked_actions = agent_spaces.shared_action_space is not None
        self._index = {agent: k for k, agent in enumerate(agents)}
        self._single_observation: dict[str, gym.Space] = {}
        self._single_action: dict[str, gym.Space] = {}
        self._members: dict[str, list[int]] = {}
        for key, members in (groups or {a: [a] for a in agents}).items():
            obs_spaces = [agent_spaces.observation_spaces[a] for a in members]
            act_spaces = [agent_spaces.action_spaces[a] for a in members]
            same_spaces = all(s == obs_spaces[0] for s in obs_spaces) and all(
                s == act_spaces[0] for s in act_spaces
            )
            if not same_spaces:
                raise AssertionError(
                    f"group {key!r} stacks agents {members}, whose spaces differ; a group's agents must "
                    f"share observation and action spaces (pass pad_spaces=True, or another group_map)"
                )
            self._members[key] = [self._index[a] for a in members]
            if groups is None:
                self._single_observation[key], self._single_action[key] = obs_spaces[0], act_spaces[0]
            else:
                self._single_observation[key] = batch_space(obs_spaces[0], len(members))
                self._single_action[key] = batch_space(act_spaces[0], len(members))
        self.agents = list(self._members)
        self._observation = {k: batch_space(s, self.num_envs) for k, s in self._single_observation.items()}
        self._action = {k: batch_space(s, self.num_envs) for k, s in self._single_action.items()}
        if seed is not None:
            for k, space in enumerate(self._action.values()):
                space.seed(seed + k)

    # -- spaces ------------------------------------------------------------------------------------

    def observation_space(self, agent: str) -> gym.Space:
        """The batched observation space of ``agent`` (or group): ``(N, ...)`` (``(N, G, ...)``)."""
        return self._observation[self._key(agent)]

    def action_space(self, agent: str) -> gym.Space:
        """The batched action space of ``agent`` (or group)."""
        return self._action[self._key(agent)]

    def single_observation_space(self, agent: str) -> gym.Space:
        """The observation space of ``agent`` itself (a group: its agents stacked, ``(G, ...)``)."""
        return self._single_observation[self._key(agent)]

    def single_action_space(self, agent: str) -> gym.Space:
        """The action space of ``agent`` itself (a group: ``(G, ...)``)."""
        return self._single_action[self._key(agent)]

    def _key(self, agent: str) -> str:
        if agent not in self._members:
            raise KeyError(
                f"{agent!r} is none of this env's {'groups' if self.group_map else 'agents'} {self.agents}"
            )
        return agent

    # -- the API -----------------------------------------------------------------------------------

    def reset(
        self, seed: Any = None, options: dict[str, Any] | None = None, *, env_ids: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reset every env (or the envs ``env_ids``): ``(observations, infos)``, dicts by agent (group)."""
        obs, infos, ids = self._inner_reset(seed, options, env_ids)
        step = EnvStep.read(obs, infos, ids)
        return self._by_key(step.observations), self._infos(step)

    def send(self, actions: Mapping[str, Any], env_ids: Any = None) -> None:
        """Start stepping every env (or the envs ``env_ids``): ``actions`` a dict by agent (group) of arrays
        ``(N, ...)`` (``(len(env_ids), ...)``)."""
        n = self.num_envs if env_ids is None else len(self._env_id_list(env_ids))
        if not isinstance(actions, Mapping) or set(actions) != set(self.agents):
            given = sorted(actions) if isinstance(actions, Mapping) else type(actions).__name__
            missing = [a for a in self.agents if not isinstance(actions, Mapping) or a not in actions]
            raise KeyError(
                f"actions must be a dict with an action batch for each of {self.agents}; got {given}"
                + (f", missing {missing}" if missing else "")
            )
        checked = {
            key: self._checked_actions(self._single_action[key], actions[key], n) for key in self.agents
        }
        self._inner_send(self._stacked_env_actions(checked, n), env_ids)

    def recv(
        self, timeout: float | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """``(observations, rewards, terminations, truncations, infos)`` of the envs sent (all of them, or
        the first ``batch_size`` ready, ``infos["env_id"]``), dicts by agent. ``timeout``: seconds to wait
        (default: the backend's), then `EnvTimeoutError` (a ``TimeoutError``), the step still in flight."""
        step = self._inner_recv(timeout)
        return (
            self._by_key(step.observations),
            self._columns(step.rewards),
            self._columns(step.terminations),
            self._columns(step.truncations),
            self._infos(step),
        )

    def step(
        self, actions: Mapping[str, Any], env_ids: Any = None
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        self.send(actions, env_ids)
        return self.recv()

    def restore_state(self, states: Any, env_ids: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        obs, infos, ids = self._inner_restore(states, env_ids)
        step = EnvStep.read(obs, infos, ids)
        return self._by_key(step.observations), self._infos(step)

    # -- layout --------------------------------------------------------------------------------------

    def _stacked_env_actions(self, actions: dict[str, Any], n: int) -> Any:
        """Actions by key as the inner env takes them: ``(n, A, ...)`` stacked, or a dict by agent."""
        by_agent: dict[str, Any] = {}
        for key, members in self._members.items():
            for j, k in enumerate(members):
                agent = self.possible_agents[k]
                by_agent[agent] = actions[key] if self.group_map is None else agent_column(actions[key], j)
        if not self._stacked_actions:
            return by_agent
        space = self.agent_spaces.stacked_action_space()
        out = create_empty_array(space, n, fn=np.zeros)
        for k, agent in enumerate(self.possible_agents):
            _put_column(out, k, by_agent[agent])
        return out

    def _agent_values(self, batch: Any, k: int) -> Any:
        """Agent ``k``'s ``(n, ...)`` values of an observation batch (stacked or by agent)."""
        return agent_column(batch, k) if self._stacked else batch[self.possible_agents[k]]

    def _by_key(self, observations: Any) -> dict[str, Any]:
        if self.group_map is None:
            return {a: self._agent_values(observations, k) for k, a in enumerate(self.possible_agents)}
        out = {}
        for key, members in self._members.items():
            if self._stacked and members == list(range(members[0], members[0] + len(members))):
                out[key] = _columns_slice(observations, members[0], members[0] + len(members))  # a view
            else:
                out[key] = _stack_columns([self._agent_values(observations, k) for k in members])
        return out

    def _columns(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """A ``(n, A)`` array as a dict by agent of ``(n,)`` (by group of ``(n, G)``)."""
        if self.group_map is None:
            return {a: values[:, k] for k, a in enumerate(self.possible_agents)}
        return {key: values[:, members] for key, members in self._members.items()}

    def _infos(self, step: EnvStep) -> dict[str, Any]:
        n = step.env_ids.size
        infos: dict[str, Any] = dict(step.env_infos)
        if any(info is not None for info in step.agent_infos):
            for k, agent in enumerate(self.possible_agents):
                rows = [info[k] if info is not None else {} for info in step.agent_infos]
                if any(rows):
                    infos[agent] = InfoBatcher(n).batch(rows)
        infos["agent_mask"] = self._columns(step.agent_mask)
        if step.action_mask is not None:
            mask = step.action_mask
            if self.group_map is None:
                infos["action_mask"] = {a: mask[:, k] for k, a in enumerate(self.possible_agents)}
            else:
                infos["action_mask"] = {key: mask[:, members] for key, members in self._members.items()}
        if step.ended.any():
            ended = np.flatnonzero(step.ended).tolist()
            template = self._by_key(step.observations)
            final = {key: _zeros_like(value) for key, value in template.items()}
            for e in ended:
                last = step.final_observations[e]
                for key, members in self._members.items():
                    for j, k in enumerate(members):
                        row = agent_row(last, k) if self._stacked else last[self.possible_agents[k]]
                        _put_row(final[key], e, row, j, self.group_map)
            infos["final_obs"], infos["_final_obs"] = final, step.ended.copy()
            final_info: dict[str, Any] = {}
            for k, agent in enumerate(self.possible_agents):
                rows = [
                    (info[k] if info is not None else {}) if step.ended[e] else {}
                    for e, info in enumerate(step.final_agent_infos)
                ]
                if any(rows):
                    final_info[agent] = InfoBatcher(n).batch(rows)
            infos["final_info"], infos["_final_info"] = final_info, step.ended.copy()
        if self._partial(step):
            infos["env_id"] = step.env_ids.copy()
        return infos


def _put_column(batch: Any, k: int, values: Any) -> None:
    if isinstance(batch, dict):
        for key, sub in batch.items():
            _put_column(sub, k, values[key])
    elif isinstance(batch, tuple):
        for sub, part in zip(batch, values, strict=True):
            _put_column(sub, k, part)
    else:
        batch[:, k] = values


def _columns_slice(batch: Any, start: int, stop: int) -> Any:
    if isinstance(batch, dict):
        return {key: _columns_slice(value, start, stop) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_columns_slice(value, start, stop) for value in batch)
    return batch[:, start:stop]


def _stack_columns(columns: list[Any]) -> Any:
    first = columns[0]
    if isinstance(first, dict):
        return {key: _stack_columns([c[key] for c in columns]) for key in first}
    if isinstance(first, tuple):
        return tuple(_stack_columns([c[i] for c in columns]) for i in range(len(first)))
    return np.stack(columns, axis=1)


def _zeros_like(batch: Any) -> Any:
    if isinstance(batch, dict):
        return {key: _zeros_like(value) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_zeros_like(value) for value in batch)
    return np.zeros_like(batch)


def _put_row(batch: Any, e: int, row: Any, j: int, grouped: Any) -> None:
    """Env ``e``'s row (agent ``j`` of its group, when grouped) of a final-observation batch."""
    if isinstance(batch, dict):
        for key, sub in batch.items():
            _put_row(sub, e, row[key], j, grouped)
    elif isinstance(batch, tuple):
        for sub, part in zip(batch, row, strict=True):
            _put_row(sub, e, part, j, grouped)
    elif grouped is None:
        batch[e] = row
    else:
        batch[e, j] = row
