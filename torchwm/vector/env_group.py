"""The worker loop: the envs one worker steps, with autoreset done where they run.

Every Python backend steps its envs through an `EnvGroup`: `sync` holds one
in the calling process, `subproc` and `shmem` hold one in each worker. So the
three autoreset modes, seeding and the order of calls are the same code on
every backend, and the same seed gives the same arrays. Results go straight
into the batch rows the group was given (plain arrays for `sync` and
`subproc`, shared memory for `shmem`); only infos come back as a list.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.vector.batching import ARRAY_SPACES, get_row, put_rows


class EnvGroup:
    """Several envs stepped in a loop, writing into preallocated batch rows.

    Args:
        envs: the envs, already built.
        autoreset_mode: what happens after an episode ends (Gymnasium's meaning).
        observations: the batch rows for these envs (``len(envs)`` rows).
        rewards, terminations, truncations: arrays of ``len(envs)``.
    """

    def __init__(
        self,
        envs: Sequence[gym.Env],
        autoreset_mode: AutoresetMode,
        observations: Any,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
    ) -> None:
        self.envs = list(envs)
        self.autoreset_mode = autoreset_mode
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.observations = observations
        self.rewards = rewards
        self.terminations = terminations
        self.truncations = truncations
        self.needs_reset = [False] * len(self.envs)
        self._all_local = list(range(len(self.envs)))
        self._array_obs = isinstance(self.observation_space, ARRAY_SPACES)
        self._array_actions = isinstance(self.action_space, ARRAY_SPACES)

    def _write_obs(self, i: int, obs: Any) -> None:
        if self._array_obs:
            self.observations[i] = obs
        else:
            put_rows(self.observation_space, self.observations, i, obs)

    def reset(self, local_ids: Sequence[int], seeds: Sequence[int | None], options: dict[str, Any] | None) -> list[dict]:
        infos = []
        for i, seed in zip(local_ids, seeds, strict=True):
            obs, info = self.envs[i].reset(seed=seed, options=options)
            self._write_obs(i, obs)
            self.rewards[i] = 0.0
            self.terminations[i] = False
            self.truncations[i] = False
            self.needs_reset[i] = False
            infos.append(info)
        return infos

    def step(self, local_ids: Sequence[int], actions: Any) -> list[dict]:
        """Step envs ``local_ids``; ``actions`` holds one row per id, in that order."""
        infos = []
        rewards: list[SupportsFloat] = []
        terminations, truncations = [], []
        next_step = self.autoreset_mode is AutoresetMode.NEXT_STEP
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        for row, i in enumerate(local_ids):
            env = self.envs[i]
            reward: SupportsFloat
            if next_step and self.needs_reset[i]:
                obs, info = env.reset()
                reward, terminated, truncated = 0.0, False, False
            else:
                action = actions[row] if self._array_actions else get_row(self.action_space, actions, row)
                obs, reward, terminated, truncated, info = env.step(action)
                if same_step and (terminated or truncated):
                    # A copy: the env may reuse its observation buffer on the reset below.
                    final = {"final_obs": copy.deepcopy(obs), "final_info": info}
                    obs, reset_info = env.reset()
                    info = {**final, **reset_info}
            self._write_obs(i, obs)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            self.needs_reset[i] = terminated or truncated
            infos.append(info)
        # Written once for all envs: three numpy writes per env cost as much as a cheap env's step.
        rows = slice(None) if local_ids == self._all_local else list(local_ids)
        if not self._write_flags(rows, rewards, terminations, truncations):
            # A value that does not fit (a reward that is no number, say): env by env, as Gymnasium
            # writes them, so that an error comes from the env that returned it, with ``i`` naming it
            # (worker.failing_env reads it).
            for row, i in enumerate(local_ids):
                self.rewards[i] = rewards[row]
                self.terminations[i] = terminations[row]
                self.truncations[i] = truncations[row]
        return infos

    def _write_flags(self, rows: Any, rewards: list, terminations: list, truncations: list) -> bool:
        """Rewards and flags of ``rows`` in one write each; False (nothing raised) if a value does not fit."""
        try:
            self.rewards[rows] = rewards
            self.terminations[rows] = terminations
            self.truncations[rows] = truncations
        except (TypeError, ValueError):
            return False
        return True

    def call(self, local_ids: Sequence[int], name: str, args: tuple, kwargs: dict) -> list[Any]:
        results = []
        for i in local_ids:
            attr = self.envs[i].get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return results

    def set_attr(self, local_ids: Sequence[int], name: str, values: Sequence[Any]) -> None:
        for i, value in zip(local_ids, values, strict=True):
            self.envs[i].set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()


def env_fns_of(env_fn: Any, num_envs: int, backend: str) -> list[Callable[[], gym.Env]]:
    """One factory per env: ``env_fn`` is one callable for every env, or a list of ``num_envs`` callables."""
    fns = list(env_fn) if isinstance(env_fn, (list, tuple)) else [env_fn] * num_envs
    if len(fns) != num_envs or not all(callable(fn) for fn in fns):
        raise TypeError(
            f"{backend}: env_fn must be a callable returning a gymnasium.Env, or a list of {num_envs} such "
            f"callables (one per env), got {env_fn!r:.200}"
        )
    return fns
