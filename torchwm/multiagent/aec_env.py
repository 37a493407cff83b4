"""One PettingZoo turn-based (AEC) env as one `gymnasium.Env`: `AECGymEnv`.

So that every torchwm backend (``sync``, ``subproc``, ``shmem``, ``ray``) runs a turn-based env unchanged,
with its seeds, partial steps and deadlines, the AEC env becomes one Gymnasium env whose observation is a
`spaces.Dict` of fixed-shape arrays: what `AECVectorEnv.last()` and ``observe(agent)`` read for every
agent of ``possible_agents`` (``"observations"``, keyed by agent, zeros for an agent the env no longer
has, as SuperSuit gives), the index of ``agent_selection`` in ``possible_agents`` (-1 for an agent not in
it), the agents' rewards and cumulative rewards (float32 ``(A,)``), terminations and truncations (int8
``(A,)``, 1 for an agent the env no longer has). Every agent's observation travels at each step because
an env whose current agent is not the vector env's still shows that agent's observation in ``last()``.

Its action is a `spaces.Dict` keyed by agent (agents may differ in spaces); a step uses the entry of the
env's ``agent_selection`` only, or steps that agent with ``None`` when it is already terminated or
truncated (as PettingZoo's dead step wants, and SuperSuit gives). The env's ``terminated`` is True when
every agent in its ``terminations`` is terminated or truncated (or none is left), ``truncated`` instead
when not all of them were terminated: the vector env under it then resets it at its next step (autoreset
``next_step``), which is SuperSuit's order. Its reward is the sum of the agents' rewards of the step.
Agents' infos are in ``info["agent_infos"]``, keyed by agent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from torchwm.multiagent.pettingzoo_import import pettingzoo_env_types
from torchwm.vector.batching import create_batch, get_row


def check_aec_env(env: Any, source: str) -> None:
    """TypeError unless ``env`` is a PettingZoo ``AECEnv`` with ``possible_agents``; ``source`` says where
    it came from, for the message."""
    # PettingZoo is imported on first use: importing torchwm.multiagent does not need it.
    ParallelEnv, AECEnv = pettingzoo_env_types()  # noqa: N806 - the classes
    if isinstance(env, ParallelEnv):
        raise TypeError(
            f"{source} must be a PettingZoo AECEnv (turn-based), got the ParallelEnv {env!r:.200}: vectorize "
            f"a parallel env with torchwm.multiagent.make_vec(..., layout='agents' or 'parallel')"
        )
    if not isinstance(env, AECEnv):
        raise TypeError(f"{source} must be a PettingZoo AECEnv, got {type(env).__name__}: {env!r:.200}")
    if not getattr(env, "possible_agents", None):
        raise TypeError(f"{source} must have a non-empty possible_agents list, got {env!r:.200}")


def env_done(env: Any) -> bool:
    """True when every agent in the env's ``terminations`` has terminated or truncated, or none is left
    (SuperSuit's test for the reset of one env of its vector)."""
    truncations = env.truncations
    return all(terminated or truncations.get(agent, False) for agent, terminated in env.terminations.items())


def zeros_of(space: gym.Space) -> Any:
    """One zero value of ``space`` (a dict of them for a `spaces.Dict`)."""
    return get_row(space, create_batch(space, 1), 0)


class AECGymEnv(gym.Env):
    """A PettingZoo ``AECEnv`` as one Gymnasium env of fixed-shape arrays (see the module).

    ``env_fn`` makes the AEC env; ``possible_agents`` is the agent order of the vector env (its first
    env's), which this env's must equal.
    """

    def __init__(self, env_fn: Callable[[], Any], possible_agents: Sequence[Any]) -> None:
        self.aec_env = env_fn()
        check_aec_env(self.aec_env, f"the env {env_fn!r:.100} made")
        self.possible_agents = list(possible_agents)
        if list(self.aec_env.possible_agents) != self.possible_agents:
            raise ValueError(
                f"every env must have the possible_agents of the first, {self.possible_agents}, in that "
                f"order; got {list(self.aec_env.possible_agents)}"
            )
        num_agents = len(self.possible_agents)
        self.agent_spaces = {agent: self.aec_env.observation_space(agent) for agent in self.possible_agents}
        self._zero_observations = {agent: zeros_of(space) for agent, space in self.agent_spaces.items()}
        self.observation_space = spaces.Dict(
            {
                "observations": spaces.Dict(self.agent_spaces),
                "agent_selection": spaces.Box(-1, num_agents - 1, (), np.int64),
                "rewards": spaces.Box(-np.inf, np.inf, (num_agents,), np.float32),
                "cumulative_rewards": spaces.Box(-np.inf, np.inf, (num_agents,), np.float32),
                "terminations": spaces.MultiBinary(num_agents),
                "truncations": spaces.MultiBinary(num_agents),
            }
        )
        self.action_space = spaces.Dict(
            {agent: self.aec_env.action_space(agent) for agent in self.possible_agents}
        )
        self.metadata = dict(getattr(self.aec_env, "metadata", {}))
        self.render_mode = getattr(self.aec_env, "render_mode", None)
        self._agent_index = {agent: i for i, agent in enumerate(self.possible_agents)}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.aec_env.reset(seed=seed, options=options)
        return self._observation(), self._info()

    def step(self, action: dict[Any, Any]) -> tuple[Any, float, bool, bool, dict]:
        env = self.aec_env
        agent = env.agent_selection
        if env_done(env):
            # Nothing left to step: the vector env resets this env at its next step.
            return self._observation(), 0.0, *self._ended(), self._info()
        if env.terminations.get(agent, True) or env.truncations.get(agent, True):
            env.step(None)
        else:
            env.step(action[agent])
        reward = float(sum(env.rewards.values()))
        if env_done(env):
            terminated, truncated = self._ended()
        else:
            terminated = truncated = False
        return self._observation(), reward, terminated, truncated, self._info()

    def _ended(self) -> tuple[bool, bool]:
        """(terminated, truncated) of an env that is done: terminated when all its agents were."""
        terminated = all(self.aec_env.terminations.values())
        return terminated, not terminated

    def _observation(self) -> dict[str, Any]:
        env = self.aec_env
        observations = {}
        for agent in self.possible_agents:
            value = None
            if agent in env.terminations or agent in env.truncations:
                value = env.observe(agent)
            observations[agent] = self._zero_observations[agent] if value is None else value
        rewards, cumulative = env.rewards, env._cumulative_rewards
        terminations, truncations = env.terminations, env.truncations
        return {
            "observations": observations,
            "agent_selection": np.int64(self._agent_index.get(env.agent_selection, -1)),
            "rewards": np.array([rewards.get(a, 0) for a in self.possible_agents], dtype=np.float32),
            "cumulative_rewards": np.array(
                [cumulative.get(a, 0) for a in self.possible_agents], dtype=np.float32
            ),
            "terminations": np.array(
                [terminations.get(a, True) for a in self.possible_agents], dtype=np.int8
            ),
            "truncations": np.array([truncations.get(a, True) for a in self.possible_agents], dtype=np.int8),
        }

    def _info(self) -> dict[str, Any]:
        infos = self.aec_env.infos
        return {"agent_infos": {agent: dict(infos.get(agent, {})) for agent in self.possible_agents}}

    def render(self) -> Any:
        return self.aec_env.render()

    def close(self) -> None:
        self.aec_env.close()
