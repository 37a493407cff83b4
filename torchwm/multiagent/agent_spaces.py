"""The spaces of a PettingZoo env's agents, as the arrays one env of a vector env carries: `AgentSpaces`.

A PettingZoo env gives each agent its own observation and action space. To go through a torchwm vector
env (on ``shmem``: through shared memory) an env's agents must fit in fixed-shape arrays: `AgentSpaces`
reads the agents' spaces, splits ``{"observation", "action_mask"}`` observations into their two parts,
pads them when asked (``pad_spaces=True``: SuperSuit's ``pad_observations_v0`` and
``pad_action_space_v0``, with the same bounds and the same treatment of padded actions), and says how the
agents' observations and actions are stacked: one ``(A, ...)`` array when every agent has the same space,
a `spaces.Dict` keyed by agent otherwise. `torchwm.multiagent.agents_env` builds its env's spaces from it;
the vector envs of `torchwm.multiagent` read their per-agent spaces from it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

# Spaces whose values are fixed-shape arrays (possibly nested in Dict/Tuple): what shared memory holds.
_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def is_masked_observation_space(space: spaces.Space) -> bool:
    """Whether ``space`` is PettingZoo's ``{"observation": ..., "action_mask": ...}`` (tic-tac-toe's)."""
    return isinstance(space, spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}


def check_fixed_shape(space: spaces.Space, what: str) -> None:
    """ValueError unless every value of ``space`` is a fixed-shape array (Box, Discrete, MultiDiscrete,
    MultiBinary, or a Dict/Tuple of them): the only values a vector env's batch holds."""
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            check_fixed_shape(sub, f"{what}[{key!r}]")
    elif isinstance(space, spaces.Tuple):
        for k, sub in enumerate(space.spaces):
            check_fixed_shape(sub, f"{what}[{k}]")
    elif not isinstance(space, _ARRAY_SPACES):
        raise ValueError(
            f"{what} is {space}: torchwm.multiagent carries agents' values in fixed-shape arrays, so every "
            f"space must be a Box, Discrete, MultiDiscrete or MultiBinary (or a Dict/Tuple of them)"
        )


def batched(space: spaces.Space, n: int) -> spaces.Space:
    """Gymnasium's ``batch_space(space, n)``, built from scalar bounds where a Box's bounds are uniform:
    Gymnasium checks every element of array bounds, which for image observations of many agents (20
    pistonball agents of 457x120x3) takes far longer than the envs' own construction."""
    if isinstance(space, spaces.Box) and space.low.size:
        low, high = space.low.flat[0], space.high.flat[0]
        if (space.low == low).all() and (space.high == high).all():
            return spaces.Box(low, high, (n, *space.shape), dtype=space.dtype)  # type: ignore[arg-type]
    return batch_space(space, n)


def same_space(a: spaces.Space, b: spaces.Space) -> bool:
    """``a == b``, with Boxes of equal bounds found equal without Gymnasium's elementwise ``allclose``."""
    if a is b:
        return True
    if isinstance(a, spaces.Box) and isinstance(b, spaces.Box) and a.shape == b.shape and a.dtype == b.dtype:
        if np.array_equal(a.low, b.low) and np.array_equal(a.high, b.high):
            return True
    return bool(a == b)


def _pad_to(array: np.ndarray, shape: tuple[int, ...], value: Any) -> np.ndarray:
    """``array`` zero- (or ``value``-) padded at the end of each axis to ``shape``, as SuperSuit pads."""
    if array.shape == shape:
        return array
    return np.pad(array, [(0, new - old) for new, old in zip(shape, array.shape)], constant_values=value)


def _padded_space(agent_spaces: dict[str, spaces.Space], what: str) -> spaces.Space:
    """The one space that holds each of ``agent_spaces`` (SuperSuit's ``homogenize_spaces``): Boxes of one
    rank and dtype padded to the largest shape (bounds padded as SuperSuit pads them), Discretes to the
    largest ``n``."""
    found = list(agent_spaces.values())
    first = found[0]
    if all(isinstance(s, spaces.Discrete) and s.start == 0 for s in found):
        return spaces.Discrete(max(int(s.n) for s in found))  # type: ignore[attr-defined]
    if all(isinstance(s, spaces.Box) for s in found):
        boxes: list[spaces.Box] = found  # type: ignore[assignment]
        if len({len(b.shape) for b in boxes}) == 1 and len({b.dtype for b in boxes}) == 1:
            shape = tuple(int(d) for d in np.max([b.shape for b in boxes], axis=0))
            low = np.min([_pad_to(b.low, shape, np.minimum(0, np.min(b.low))) for b in boxes], axis=0)
            high = np.max([_pad_to(b.high, shape, np.maximum(1e-5, np.max(b.high))) for b in boxes], axis=0)
            return spaces.Box(low=low, high=high, dtype=first.dtype)  # type: ignore[arg-type]
    described = ", ".join(f"{agent}: {space}" for agent, space in agent_spaces.items())
    raise ValueError(
        f"pad_spaces=True pads Box {what} spaces of one rank and dtype, or Discrete ones (starting at 0), as "
        f"SuperSuit's pad_observations_v0/pad_action_space_v0 do; the agents' {what} spaces are {described}"
    )


@dataclass(frozen=True)
class AgentSpaces:
    """How the agents of one PettingZoo env are carried in arrays.

    Attributes:
        agents: ``possible_agents``, in order (A agents): row ``k`` of every per-agent array is ``agents[k]``.
        observation_spaces: each agent's observation as the vector env gives it: the ``"observation"``
            part of a masked observation, padded with ``pad_spaces``.
        action_spaces: each agent's action space as the vector env takes it (padded with ``pad_spaces``).
        env_action_spaces: each agent's action space as its env has it.
        masked: the env's observations are ``{"observation", "action_mask"}`` dicts.
        mask_size: the length of ``action_mask`` rows; None when there is no action mask (neither the env
            gives one, nor padding masks padded Discrete actions).
        padded_masks: each agent's mask of the actions its own space has (ones then zeros), used where the
            env gives none; None without ``mask_size``.
    """

    agents: tuple[str, ...]
    observation_spaces: dict[str, spaces.Space]
    action_spaces: dict[str, spaces.Space]
    env_observation_spaces: dict[str, spaces.Space]
    env_action_spaces: dict[str, spaces.Space]
    masked: bool
    mask_size: int | None
    padded_masks: dict[str, np.ndarray] | None

    @classmethod
    def read(
        cls,
        agents: Sequence[str],
        observation_spaces: dict[str, spaces.Space],
        action_spaces: dict[str, spaces.Space],
        *,
        pad_spaces: bool = False,
    ) -> AgentSpaces:
        """The layout of agents with these spaces (each agent's own, as its env gives them)."""
        agents = tuple(agents)
        if not agents:
            raise ValueError("the PettingZoo env has no possible_agents: there is nothing to vectorize")
        masked_by_agent = [is_masked_observation_space(observation_spaces[a]) for a in agents]
        if any(masked_by_agent) and not all(masked_by_agent):
            raise ValueError(
                "some agents' observations are {'observation', 'action_mask'} dicts and others are not; "
                "torchwm.multiagent needs one kind for all agents of an env"
            )
        masked = all(masked_by_agent)
        observation_parts = {
            a: observation_spaces[a]["observation"] if masked else observation_spaces[a]  # type: ignore[index]
            for a in agents
        }
        for agent in agents:
            check_fixed_shape(observation_parts[agent], f"the observation space of agent {agent!r}")
            check_fixed_shape(action_spaces[agent], f"the action space of agent {agent!r}")
        own_actions = {a: action_spaces[a] for a in agents}
        actions = dict(own_actions)
        if pad_spaces and len({repr(s) for s in observation_parts.values()}) > 1:
            padded = _padded_space(observation_parts, "observation")
            observation_parts = dict.fromkeys(agents, padded)
        actions_padded = pad_spaces and len({repr(s) for s in actions.values()}) > 1
        if actions_padded:
            actions = dict.fromkeys(agents, _padded_space(actions, "action"))
        mask_size: int | None = None
        padded_masks: dict[str, np.ndarray] | None = None
        if masked:
            mask_size = max(int(np.prod(observation_spaces[a]["action_mask"].shape)) for a in agents)  # type: ignore[index]
        first_action = actions[agents[0]]
        if actions_padded and isinstance(first_action, spaces.Discrete):
            # Padded Discrete actions: the mask says which of the shared n each agent's own space has.
            mask_size = max(mask_size or 0, int(first_action.n))
        if mask_size is not None:
            padded_masks = {}
            for agent in agents:
                own = own_actions[agent]
                mask = np.zeros(mask_size, dtype=np.int8)
                mask[: int(own.n) if isinstance(own, spaces.Discrete) else mask_size] = 1
                padded_masks[agent] = mask
        return cls(
            agents=agents,
            observation_spaces=observation_parts,
            action_spaces=actions,
            env_observation_spaces=dict(observation_spaces),
            env_action_spaces=own_actions,
            masked=masked,
            mask_size=mask_size,
            padded_masks=padded_masks,
        )

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    # Cached (the dataclass is frozen: its spaces never change): comparing large spaces is not free.
    @functools.cached_property
    def shared_observation_space(self) -> spaces.Space | None:
        """The agents' one observation space, or None when they differ."""
        return _shared(self.observation_spaces, self.agents)

    @functools.cached_property
    def shared_action_space(self) -> spaces.Space | None:
        """The agents' one action space, or None when they differ."""
        return _shared(self.action_spaces, self.agents)

    def stacked_observation_space(self) -> spaces.Space:
        """The agents' observations of one env: ``(A, ...)`` when they share a space, else a Dict by agent.

        One object per `AgentSpaces`, so that the envs built from one (`AgentsEnv`'s ``agent_spaces``) share
        their spaces and a vector env's check that they are equal is quick."""
        return self._stacked_observation_space

    @functools.cached_property
    def _stacked_observation_space(self) -> spaces.Space:
        shared = self.shared_observation_space
        if shared is not None:
            return batched(shared, self.num_agents)
        return spaces.Dict({a: self.observation_spaces[a] for a in self.agents})

    def stacked_action_space(self) -> spaces.Space:
        """The agents' actions of one env: ``(A, ...)`` when they share a space, else a Dict by agent (one
        object per `AgentSpaces`)."""
        return self._stacked_action_space

    @functools.cached_property
    def _stacked_action_space(self) -> spaces.Space:
        shared = self.shared_action_space
        if shared is not None:
            return batched(shared, self.num_agents)
        return spaces.Dict({a: self.action_spaces[a] for a in self.agents})

    def env_observation_space(self) -> spaces.Dict:
        """The observation space of one `AgentsEnv`: every per-agent value a step gives, in arrays (one
        object per `AgentSpaces`)."""
        return self._env_observation_space

    @functools.cached_property
    def _env_observation_space(self) -> spaces.Dict:
        a = self.num_agents
        flags = spaces.Box(0, 1, (a,), dtype=np.bool_)  # type: ignore[arg-type]
        fields: dict[str, spaces.Space] = {
            "obs": self.stacked_observation_space(),
            "reward": spaces.Box(-np.inf, np.inf, (a,), dtype=np.float32),
            "terminated": flags,
            "truncated": flags,
            "agent_mask": flags,
        }
        if self.mask_size is not None:
            fields["action_mask"] = spaces.Box(0, 1, (a, self.mask_size), dtype=np.int8)
        return spaces.Dict(fields)

    def observation_row(self, agent: str, observation: Any) -> Any:
        """Agent ``agent``'s observation as its row holds it: the ``"observation"`` part, padded."""
        if self.masked:
            observation = observation["observation"]
        space = self.observation_spaces[agent]
        if isinstance(space, spaces.Box) and space.shape != self.env_observation_spaces_part(agent).shape:
            return _pad_to(np.asarray(observation), space.shape, 0)
        return observation

    def env_observation_spaces_part(self, agent: str) -> spaces.Space:
        """Agent ``agent``'s own observation space (its ``"observation"`` part, for masked envs)."""
        space = self.env_observation_spaces[agent]
        return space["observation"] if self.masked else space  # type: ignore[index]

    def mask_row(self, agent: str, observation: Any) -> np.ndarray:
        """Agent ``agent``'s action mask (int8, ``mask_size``): the env's, zero-padded, else its own
        actions' mask."""
        assert self.padded_masks is not None
        if not self.masked or observation is None:
            return self.padded_masks[agent]
        mask = np.asarray(observation["action_mask"], dtype=np.int8).reshape(-1)
        return _pad_to(mask, (self.mask_size,), 0)  # type: ignore[arg-type]

    def env_action(self, agent: str, action: Any) -> Any:
        """An action of the padded space as agent ``agent``'s env takes it (SuperSuit's
        ``dehomogenize_actions``: a padded Discrete action is action 0, a Box action is cut to shape)."""
        own = self.env_action_spaces[agent]
        if own is self.action_spaces[agent]:
            return action
        if isinstance(own, spaces.Discrete):
            return action if int(action) < int(own.n) else own.dtype.type(0)  # type: ignore[union-attr]
        if isinstance(own, spaces.Box):
            return np.asarray(action)[tuple(slice(0, d) for d in own.shape)]
        return action


def _shared(by_agent: dict[str, spaces.Space], agents: tuple[str, ...]) -> spaces.Space | None:
    first = by_agent[agents[0]]
    return first if all(same_space(by_agent[a], first) for a in agents[1:]) else None
