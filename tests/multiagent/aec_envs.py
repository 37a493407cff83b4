"""What the tests of `torchwm.multiagent.aec` compare with: PettingZoo AEC envs stepped by hand, and a small
AEC env whose agents die at random turns.

`ByHand` steps ``n`` PettingZoo envs one by one with SuperSuit 3.11's rules (its
``supersuit/aec_vector/vector_env.py``, ``SyncAECVectorEnv``): the vector's agent is the next one of
``possible_agents`` that is current in some env; an env whose current agent is another one passes; an
env whose agents are all done is reset by the next step instead of stepped; a dead agent steps with
None. Where SuperSuit's env flags stay zero, it reports an env whose agents are all done as terminated
(all of them terminated) or truncated (not all of them).

`RelayEnv`: three agents take turns; each lives a random number of its turns (drawn from the env's
``np_random`` at reset, so that a seed decides the episode), then terminates and is removed by its dead
step; every agent left is truncated at ``max_turns``.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from pettingzoo import AECEnv


def zeros_like_space(space):
    if isinstance(space, spaces.Dict):
        return {key: zeros_like_space(sub) for key, sub in space.spaces.items()}
    return np.zeros(space.shape, dtype=space.dtype)


def all_done(env) -> bool:
    return all(term or env.truncations.get(agent, False) for agent, term in env.terminations.items())


class ByHand:
    """``n`` envs of ``env_fn`` stepped by hand (see the module). ``episode_seed(i, k)`` is the seed of env
    ``i``'s ``k``-th autoreset (None: reset without a seed)."""

    def __init__(self, env_fn, n, seed, episode_seed=None):
        self.envs = [env_fn() for _ in range(n)]
        for i, env in enumerate(self.envs):
            env.reset(seed=seed + i)
        self.agents = list(self.envs[0].possible_agents)
        self.episode_seed = episode_seed
        self.autoresets = [0] * n
        self.agent_selection = self._find(0)

    def _find(self, start):
        for offset in range(len(self.agents)):
            agent = self.agents[(start + offset) % len(self.agents)]
            if any(env.agent_selection == agent for env in self.envs):
                return agent
        raise AssertionError("no env selects any agent")

    def observe(self, agent):
        values = []
        for env in self.envs:
            present = agent in env.terminations or agent in env.truncations
            values.append(env.observe(agent) if present else zeros_like_space(env.observation_space(agent)))
        if isinstance(values[0], dict):
            return {key: np.stack([value[key] for value in values]) for key in values[0]}
        return np.stack(values)

    def last(self):
        agent = self.agent_selection
        done = np.array([all_done(env) for env in self.envs])
        every_agent_terminated = np.array([all(env.terminations.values()) for env in self.envs])
        return (
            self.observe(agent),
            np.array([env._cumulative_rewards.get(agent, 0) for env in self.envs], dtype=np.float32),
            np.array([env.terminations.get(agent, True) for env in self.envs]),
            np.array([env.truncations.get(agent, True) for env in self.envs]),
            done & every_agent_terminated,
            done & ~every_agent_terminated,
            np.array([env.agent_selection != agent for env in self.envs]),
            [env.infos.get(agent, {}) for env in self.envs],
        )

    def rewards(self):
        return {a: np.array([env.rewards.get(a, 0) for env in self.envs], np.float32) for a in self.agents}

    def step(self, actions):
        agent = self.agent_selection
        for i, env in enumerate(self.envs):
            if all_done(env):
                seed = None if self.episode_seed is None else self.episode_seed(i, self.autoresets[i])
                self.autoresets[i] += 1
                env.reset(seed=seed)
            elif env.agent_selection == agent:
                dead = env.terminations.get(agent, True) or env.truncations.get(agent, True)
                env.step(None if dead else actions[i])
        self.agent_selection = self._find(self.agents.index(agent) + 1)


class RelayEnv(AECEnv):
    """Three agents in turn, each for a random number of turns (see the module)."""

    metadata = {"name": "relay_v0", "is_parallelizable": False, "render_modes": []}

    def __init__(self, max_turns: int = 10) -> None:
        super().__init__()
        self.possible_agents = ["a_0", "a_1", "a_2"]
        self.max_turns = max_turns
        self.np_random, _ = seeding.np_random(None)

    def observation_space(self, agent):
        return spaces.Box(-1000, 1000, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.np_random, _ = seeding.np_random(seed)
        self.agents = list(self.possible_agents)
        self.lives = {agent: int(self.np_random.integers(1, 5)) for agent in self.agents}
        self.turn = 0
        self.rewards = {agent: 0.0 for agent in self.agents}
        self._cumulative_rewards = {agent: 0.0 for agent in self.agents}
        self.terminations = {agent: False for agent in self.agents}
        self.truncations = {agent: False for agent in self.agents}
        self.infos = {agent: {"lives": self.lives[agent]} for agent in self.agents}
        self.agent_selection = self.agents[0]
        self._skip_agent_selection = None

    def observe(self, agent):
        return np.array([self.turn, self.lives[agent], self.possible_agents.index(agent)], dtype=np.float32)

    def step(self, action):
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}
        self.rewards[agent] = float(action) - 1.0 + 0.5 * self.turn
        self.turn += 1
        self.lives[agent] -= 1
        self.terminations[agent] = self.lives[agent] <= 0
        if self.turn >= self.max_turns:
            self.truncations = {a: True for a in self.agents}
        self.infos[agent] = {"lives": self.lives[agent], "turn": self.turn}
        self._accumulate_rewards()
        self.agent_selection = self.agents[(self.agents.index(agent) + 1) % len(self.agents)]
        self._deads_step_first()
