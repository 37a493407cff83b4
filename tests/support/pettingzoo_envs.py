"""Small PettingZoo parallel envs whose agents die, join, mask actions or have spaces of their own, and
`reference_rows`: PettingZoo envs stepped by hand, the arrays `torchwm.multiagent` must give.

Every value depends on the seed, the step and the actions, so that an action given to the wrong agent,
a row out of place or a reset at the wrong time changes the arrays.
"""

from __future__ import annotations

import functools

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv


class ScriptedEnv(ParallelEnv):
    """Agents ``a_0..a_{n-1}``; agent ``a`` terminates at step ``die_at[a]``, joins at step ``join_at[a]``
    (absent at reset), every agent still there is truncated at step ``end_at``. Observation of ``a_k``:
    ``[k, step, last action, seed draw]`` (float32, ``obs_sizes[k]`` long for agents of their own sizes),
    reward ``step * (k + 1) + action``, info ``{"step": step}`` for ``a_0``. Actions
    Discrete(``action_n[k]``).
    ``masked=True``: observations are ``{"observation", "action_mask"}``, the mask allowing actions
    ``<= step % n``."""

    metadata = {"name": "scripted_v0", "render_modes": []}

    def __init__(
        self,
        num_agents=3,
        die_at=None,
        join_at=None,
        end_at=5,
        obs_sizes=None,
        action_n=None,
        masked=False,
    ):
        self.possible_agents = [f"a_{k}" for k in range(num_agents)]
        self.die_at = dict(die_at or {})
        self.join_at = dict(join_at or {})
        self.end_at = end_at
        self.obs_sizes = list(obs_sizes or [4] * num_agents)
        self.action_n = list(action_n or [3] * num_agents)
        self.masked = masked
        self.agents = []
        self.render_mode = None

    def observation_space(self, agent):
        k = self.possible_agents.index(agent)
        box = spaces.Box(-1000, 1000, (self.obs_sizes[k],), np.float32)
        if self.masked:
            mask = spaces.Box(0, 1, (self.action_n[k],), np.int8)
            return spaces.Dict({"observation": box, "action_mask": mask})
        return box

    def action_space(self, agent):
        return spaces.Discrete(self.action_n[self.possible_agents.index(agent)])

    def _obs(self, agent, action):
        k = self.possible_agents.index(agent)
        values = np.zeros(self.obs_sizes[k], np.float32)
        values[:4] = [k, self.t, action, self.draw]
        if not self.masked:
            return values
        mask = (np.arange(self.action_n[k]) <= self.t % self.action_n[k]).astype(np.int8)
        return {"observation": values, "action_mask": mask}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        elif not hasattr(self, "rng"):
            self.rng = np.random.default_rng()
        self.t = 0
        self.draw = float(self.rng.integers(1000))
        self.agents = [a for a in self.possible_agents if a not in self.join_at]
        return {a: self._obs(a, -1) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        missing = [a for a in self.agents if a not in actions]
        assert not missing and set(actions) <= set(self.agents), (sorted(actions), self.agents)
        self.t += 1
        self.draw = float(self.rng.integers(1000))
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        for agent in self.agents:
            k = self.possible_agents.index(agent)
            action = int(actions[agent])
            obs[agent] = self._obs(agent, action)
            rewards[agent] = float(self.t * (k + 1) + action)
            terms[agent] = self.die_at.get(agent) == self.t
            truncs[agent] = self.t >= self.end_at and not terms[agent]
            infos[agent] = {"step": self.t} if k == 0 else {}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        for agent, step in self.join_at.items():
            if step == self.t and self.t < self.end_at:
                self.agents.append(agent)
                obs[agent] = self._obs(agent, -1)
        return obs, rewards, terms, truncs, infos


def scripted(**kwargs):
    """A zero-argument factory of `ScriptedEnv` (picklable)."""
    return functools.partial(ScriptedEnv, **kwargs)


def _pad(values, size):
    out = np.zeros(size, np.float32)
    out[: len(values)] = values
    return out


def reference_rows(env_fns, seed, actions, *, autoreset="same_step", pad_to=None, pad_actions=None):
    """Step PettingZoo envs by hand as `torchwm.multiagent`'s ``agents`` layout with ``dead_agents="zero"``
    documents it: one dict of arrays per step (the reset first), rows env-major.

    ``actions``: per step, an int array of ``N * A`` actions. ``pad_to``: observation length of padded rows;
    ``pad_actions``: each agent's own n, a padded action ``>= n`` becoming 0 (SuperSuit's rule).
    """
    envs = [fn() for fn in env_fns]
    agents = envs[0].possible_agents
    a = len(agents)
    size = pad_to or envs[0].observation_space(agents[0]).shape[0]

    def part(obs):
        return obs["observation"] if isinstance(obs, dict) else obs

    def fresh(env, obs_by_agent, infos_by_agent):
        rows = {
            "obs": np.zeros((a, size), np.float32),
            "reward": np.zeros(a, np.float32),
            "terminated": np.zeros(a, bool),
            "truncated": np.zeros(a, bool),
            "agent_mask": np.zeros(a, bool),
            "infos": [dict(infos_by_agent.get(ag, {})) for ag in agents],
        }
        for k, agent in enumerate(agents):
            if agent in env.agents:
                rows["obs"][k] = _pad(part(obs_by_agent[agent]), size)
                rows["agent_mask"][k] = True
        return rows

    state = []
    out = []
    first = []
    for i, env in enumerate(envs):
        obs, infos = env.reset(seed=seed + i)
        rows = fresh(env, obs, infos)
        state.append({"dead": np.zeros(a, bool), "needs_reset": False})
        first.append(rows)
    out.append(_join(first, None))
    for step_actions in actions:
        per_env, finals = [], []
        for i, env in enumerate(envs):
            st = state[i]
            if autoreset == "next_step" and st["needs_reset"]:
                obs, infos = env.reset()
                per_env.append(fresh(env, obs, infos))
                finals.append(None)
                st["dead"][:] = False
                st["needs_reset"] = False
                continue
            live_before = [ag for ag in env.agents]
            acts = {}
            for k, agent in enumerate(agents):
                if agent in live_before:
                    action = int(step_actions[i * a + k])
                    if pad_actions is not None and action >= pad_actions[k]:
                        action = 0
                    acts[agent] = action
            obs, rew, term, trunc, infos = env.step(acts)
            rows = {
                "obs": np.zeros((a, size), np.float32),
                "reward": np.zeros(a, np.float32),
                "terminated": st["dead"].copy(),
                "truncated": np.zeros(a, bool),
                "agent_mask": np.zeros(a, bool),
                "infos": [dict(infos.get(ag, {})) for ag in agents],
            }
            ended = []
            for k, agent in enumerate(agents):
                if agent in live_before or agent in env.agents:
                    if agent in obs:
                        rows["obs"][k] = _pad(part(obs[agent]), size)
                if agent in live_before:
                    rows["reward"][k] = rew.get(agent, 0.0)
                    rows["terminated"][k] |= term.get(agent, False)
                    rows["truncated"][k] = trunc.get(agent, False)
                    if term.get(agent) or trunc.get(agent):
                        ended.append(k)
                rows["agent_mask"][k] = agent in env.agents
            done = not env.agents or len(ended) == len(live_before)
            if done:
                all_truncated = all(rows["truncated"][k] and not rows["terminated"][k] for k in ended)
                quiet = ~(rows["terminated"] | rows["truncated"])
                rows["truncated" if all_truncated else "terminated"][quiet] = True
                rows["agent_mask"][:] = False
            for k in ended:
                st["dead"][k] = True
            if done and autoreset == "same_step":
                final = rows
                obs, infos = env.reset()
                rows = fresh(env, obs, infos)
                rows.update(
                    reward=final["reward"], terminated=final["terminated"], truncated=final["truncated"]
                )
                finals.append(final)
                st["dead"][:] = False
            else:
                finals.append(None)
                st["needs_reset"] = done
            per_env.append(rows)
        out.append(_join(per_env, finals))
    return out


def _join(per_env, finals):
    joined = {key: np.concatenate([rows[key] for rows in per_env]) for key in per_env[0] if key != "infos"}
    joined["infos"] = [info for rows in per_env for info in rows["infos"]]
    if finals is not None:
        joined["final_obs"] = [None if f is None else f["obs"] for f in finals]
        joined["final_infos"] = [None if f is None else f["infos"] for f in finals]
    return joined
