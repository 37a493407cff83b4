"""One PettingZoo parallel env as one `gymnasium.Env`: `AgentsEnv`.

So that every torchwm backend (``sync``, ``subproc``, ``shmem``, ``ray``) runs a PettingZoo env unchanged,
with its seeds, autoreset modes, partial steps and restarts, the env and all its agents become one
Gymnasium env whose observation is a `spaces.Dict` of fixed-shape arrays (`AgentSpaces`): the agents'
observations (``"obs"``, stacked ``(A, ...)`` when they share a space, else keyed by agent), their
rewards (float32 ``(A,)``), ``terminated``, ``truncated``, ``agent_mask`` (the agent is alive and its
next action is used) and, where the env has them or padding makes them, the ``action_mask`` (int8). So
everything per agent travels in the vector env's batch (shared memory on ``shmem``), and the vector envs
of `torchwm.multiagent` read it back as rows or dicts.

The env's own ``terminated`` is True when every agent that was alive at the step's start ended
(terminated or truncated) or its ``agents`` list is empty (``truncated`` instead when those last agents
were all truncated): the vector env's `EnvGroup` then resets it, all its agents together, in whichever
autoreset mode. Its reward is the sum of the agents'. Agents' infos are in ``info["agent_infos"]`` (one
dict per agent, in ``possible_agents`` order) when any is not empty.

Agents that leave before their env ends: ``dead_agents="error"`` raises ``AssertionError`` (as
SuperSuit's ``pettingzoo_env_to_vec_env_v1`` does); ``"zero"`` (SuperSuit's black death) gives their rows
zero observations, reward 0, ``terminated`` True and ``agent_mask`` False until the env resets, and
ignores their actions. Agents that join later are zero rows with ``agent_mask`` False until they appear.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.multiagent.agent_spaces import AgentSpaces, same_space
from torchwm.multiagent.env_copy import env_bytes, env_from_bytes

DEAD_AGENTS = ("error", "zero")


class AgentsEnv(gym.Env):
    """A PettingZoo ``ParallelEnv`` as one Gymnasium env of fixed-shape arrays (see the module).

    Args:
        env_fn: a no-argument callable that returns the PettingZoo ``ParallelEnv`` (built here, where the
            env lives: in a worker on a process backend).
        dead_agents: ``"error"`` or ``"zero"`` (see the module).
        pad_spaces: pad observations and actions to one space (`AgentSpaces`).
        agent_spaces: the layout `torchwm.multiagent.make_vec` read from its probe env, used where this
            env's agents and spaces are the same (so that the envs of a process share their spaces); None
            reads this env's own.
    """

    def __init__(
        self,
        env_fn: Callable[[], Any],
        *,
        dead_agents: str = "error",
        pad_spaces: bool = False,
        agent_spaces: AgentSpaces | None = None,
    ) -> None:
        if dead_agents not in DEAD_AGENTS:
            raise ValueError(f"dead_agents must be one of {list(DEAD_AGENTS)}, got {dead_agents!r}")
        self.par_env = env_fn()
        self.dead_agents = dead_agents
        agents = list(self.par_env.possible_agents)
        observation_spaces = {a: self.par_env.observation_space(a) for a in agents}
        action_spaces = {a: self.par_env.action_space(a) for a in agents}
        if agent_spaces is not None and _has_spaces(agent_spaces, agents, observation_spaces, action_spaces):
            self.agent_spaces = agent_spaces
        else:
            self.agent_spaces = AgentSpaces.read(
                agents, observation_spaces, action_spaces, pad_spaces=pad_spaces
            )
        self.possible_agents = self.agent_spaces.agents
        self.observation_space = self.agent_spaces.env_observation_space()
        self.action_space = self.agent_spaces.stacked_action_space()
        self._stacked_obs = self.agent_spaces.shared_observation_space is not None
        self._stacked_actions = self.agent_spaces.shared_action_space is not None
        self.metadata = dict(getattr(self.par_env, "metadata", {}) or {})
        self.render_mode = getattr(self.par_env, "render_mode", None)
        n = len(self.possible_agents)
        self._live = np.zeros(n, dtype=np.bool_)  # alive: its next action is used
        self._dead = np.zeros(n, dtype=np.bool_)  # left before the env ended

    # -- the Gymnasium API -------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        observations, infos = self.par_env.reset(seed=seed, options=options)
        live = set(self.par_env.agents)
        if self.dead_agents == "error" and live != set(self.possible_agents):
            missing = [a for a in self.possible_agents if a not in live]
            raise AssertionError(
                f"after reset, agents {missing} of possible_agents are not in the env's agents; with "
                f'dead_agents="error" every agent must be alive while its env runs: pass dead_agents="zero" '
                f"to give absent agents zero rows with agent_mask False"
            )
        self._live = np.array([a in live for a in self.possible_agents], dtype=np.bool_)
        self._dead[:] = False
        out = self._empty_observation()
        self._write_observations(out, observations, self._live)
        return out, self._info(infos)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        live_before = self._live
        actions = {
            agent: self.agent_spaces.env_action(agent, self._action_of(action, k, agent))
            for k, agent in enumerate(self.possible_agents)
            if live_before[k]
        }
        observations, rewards, terminations, truncations, infos = self.par_env.step(actions)
        agents = self.possible_agents
        still_there = set(self.par_env.agents)
        terminated = np.array([bool(terminations.get(a, False)) for a in agents], dtype=np.bool_)
        truncated = np.array([bool(truncations.get(a, False)) for a in agents], dtype=np.bool_)
        # An agent gone from the env's list without a flag has left all the same.
        gone = live_before & ~np.array([a in still_there for a in agents]) & ~terminated & ~truncated
        terminated |= gone
        ended = live_before & (terminated | truncated)
        env_done = not still_there or bool(ended[live_before].all())
        live_after = np.array([a in still_there for a in agents], dtype=np.bool_) & ~(terminated | truncated)
        joined = live_after & ~live_before
        if self.dead_agents == "error" and not env_done and (ended.any() or joined.any()):
            which = [a for a, e in zip(agents, ended) if e] or [a for a, j in zip(agents, joined) if j]
            verb = "ended" if ended.any() else "joined"
            raise AssertionError(
                f'agents {which} {verb} while their env goes on; with dead_agents="error" an env\'s agents '
                f'must all end together: pass dead_agents="zero" to give agents that left zero rows '
                f"(reward 0, terminated True, agent_mask False) until their env resets"
            )
        out = self._empty_observation()
        self._write_observations(out, observations, live_before | joined)
        reward = out["reward"]
        for k, agent in enumerate(agents):
            if live_before[k] and agent in rewards:
                reward[k] = rewards[agent]
        env_terminated = env_done and not bool(truncated[ended].all() and not terminated[ended].any())
        env_truncated = env_done and not env_terminated
        # Rows that left earlier stay terminated; at the env's end every row ends with it.
        out["terminated"][:] = terminated | self._dead
        out["truncated"][:] = truncated & ~self._dead
        if env_done:
            quiet = ~(out["terminated"] | out["truncated"])
            out["terminated" if env_terminated else "truncated"][quiet] = True
            live_after[:] = False
        self._dead |= ended
        self._dead &= ~live_after
        self._live = live_after
        out["agent_mask"][:] = live_after
        return out, float(reward.sum()), env_terminated, env_truncated, self._info(infos)

    def render(self) -> Any:
        return self.par_env.render()

    # -- saved states (`torchwm.plugin_api.StatefulLayer`) -----------------------------------------

    def get_torchwm_state(self) -> dict[str, Any]:
        """The whole PettingZoo env (every wrapper, the raw env, its RNG) as bytes, and which agents are
        alive or dead: `torchwm.multiagent.env_copy`. TypeError for an env that cannot be pickled."""
        return {"par_env": env_bytes(self.par_env), "live": self._live.copy(), "dead": self._dead.copy()}

    def set_torchwm_state(self, state: dict[str, Any]) -> None:
        # A new copy each time: the state may be restored again, into this env or another.
        self.par_env = env_from_bytes(state["par_env"])
        self._live = np.array(state["live"], dtype=np.bool_)
        self._dead = np.array(state["dead"], dtype=np.bool_)

    @staticmethod
    def check_torchwm_state(state: Any) -> None:
        """TypeError for a value `get_torchwm_state` could not have returned."""
        if not isinstance(state, dict) or set(state) != {"par_env", "live", "dead"}:
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise TypeError(f"an AgentsEnv state is a dict with keys ['dead', 'live', 'par_env'], got {got}")
        if not isinstance(state["par_env"], bytes):
            raise TypeError(
                f"an AgentsEnv state holds its PettingZoo env as bytes, got {type(state['par_env']).__name__}"
            )

    def close(self) -> None:
        self.par_env.close()

    # -- helpers -----------------------------------------------------------------------------------

    def _empty_observation(self) -> dict[str, Any]:
        out = _zeros(self.observation_space)
        if self.agent_spaces.padded_masks is not None:
            for k, agent in enumerate(self.possible_agents):
                out["action_mask"][k] = self.agent_spaces.padded_masks[agent]
        return out

    def _write_observations(self, out: dict[str, Any], observations: dict, rows: np.ndarray) -> None:
        """Each agent of ``rows`` whose observation the env gave: its observation (and action mask) row;
        every other row stays zero (its action mask: its own actions')."""
        spaces_ = self.agent_spaces
        for k, agent in enumerate(self.possible_agents):
            if not rows[k] or agent not in observations:
                continue
            observation = observations[agent]
            row = spaces_.observation_row(agent, observation)
            if self._stacked_obs:
                _put(out["obs"], k, row)
            else:
                out["obs"][agent] = _copied(row)
            if spaces_.masked:
                out["action_mask"][k] = spaces_.mask_row(agent, observation)
        out["agent_mask"][:] = rows

    def _action_of(self, action: Any, k: int, agent: str) -> Any:
        if self._stacked_actions:
            return _row(action, k)
        if not isinstance(action, dict) or agent not in action:
            raise KeyError(
                f"the action of one env must be a dict with an action for each agent; no {agent!r}"
            )
        return action[agent]

    def _info(self, infos: dict) -> dict[str, Any]:
        per_agent = [dict(infos.get(agent, {}) or {}) for agent in self.possible_agents]
        return {"agent_infos": per_agent} if any(per_agent) else {}


def _has_spaces(
    agent_spaces: AgentSpaces,
    agents: list[str],
    observation_spaces: dict[str, spaces.Space],
    action_spaces: dict[str, spaces.Space],
) -> bool:
    """Whether ``agent_spaces`` was read from agents ``agents`` with these spaces."""
    return (
        tuple(agents) == agent_spaces.agents
        and all(same_space(observation_spaces[a], agent_spaces.env_observation_spaces[a]) for a in agents)
        and all(same_space(action_spaces[a], agent_spaces.env_action_spaces[a]) for a in agents)
    )


def _zeros(space: spaces.Space) -> Any:
    """A zero value of ``space`` (nested dicts and tuples of arrays), the value of a row nothing wrote."""
    if isinstance(space, spaces.Dict):
        return {key: _zeros(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_zeros(sub) for sub in space.spaces)
    return np.zeros(space.shape or (), dtype=space.dtype)


def _row(batch: Any, k: int) -> Any:
    """Row ``k`` of a stacked batch (a nested dict or tuple of arrays, as `batch_space` lays it out)."""
    if isinstance(batch, dict):
        return {key: _row(value, k) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(_row(value, k) for value in batch)
    return batch[k]


def _put(batch: Any, k: int, value: Any) -> None:
    if isinstance(batch, dict):
        for key, sub in batch.items():
            _put(sub, k, value[key])
    elif isinstance(batch, tuple):
        for sub, item in zip(batch, value, strict=True):
            _put(sub, k, item)
    else:
        batch[k] = value


def _copied(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copied(sub) for key, sub in value.items()}
    if isinstance(value, tuple):
        return tuple(_copied(sub) for sub in value)
    return np.array(value, copy=True)
