"""`SB3VecEnv`: any torchwm vector env as a Stable-Baselines3 `VecEnv`.

SB3 does not take Gymnasium vector envs: its `VecEnv` has ``reset() -> obs``,
``step_async``/``step_wait`` returning ``(obs, rewards, dones, infos)`` with one info
dict per env, and resets an ended env in the same step, putting the last observation
in ``infos[i]["terminal_observation"]`` and ``"TimeLimit.truncated"`` in every info, as
its `DummyVecEnv` does. A torchwm env made with ``autoreset_mode="same_step"`` resets in
the same step too, so the adapter only reshapes what it returns: the ended envs' infos
are their final step's (``final_info``, with the ``episode`` an ``episode_statistics``
wrapper records, which SB3's logger reads), and the new episode's reset infos go to
``reset_infos``, where `DummyVecEnv` keeps them. Seeds given to `seed` are used by the
next `reset`, as in SB3.

Example:
    >>> import torchwm
    >>> from torchwm.integrations.sb3 import SB3VecEnv
    >>> venv = SB3VecEnv(torchwm.make_vec("CartPole-v1", 2, autoreset_mode="same_step",
    ...                                   wrappers=["episode_statistics"]))
    >>> _ = venv.seed(0)
    >>> venv.reset().shape
    (2, 4)
    >>> venv.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.vector.base import VectorEnv

try:
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as exc:
    from torchwm.extras import missing_extra

    raise missing_extra("sb3", "torchwm.integrations.sb3") from exc


def infos_to_list(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Gymnasium's batched infos (each key's values with a ``_key`` mask) as one dict per env."""
    per_env: list[dict[str, Any]] = [{} for _ in range(num_envs)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        rows = infos_to_list(value, num_envs) if isinstance(value, dict) else value
        for i in range(num_envs):
            if mask is None or mask[i]:
                per_env[i][key] = rows[i]
    return per_env


class SB3VecEnv(VecEnv):
    """A torchwm vector env (``autoreset_mode="same_step"``) as a Stable-Baselines3 `VecEnv`.

    Args:
        vec: the env, from `torchwm.make_vec` (any backend) with ``autoreset_mode="same_step"``.
            Closing the adapter closes it.

    Raises:
        ValueError: ``vec`` resets ended envs in another mode: SB3's learners read the step that
            ends an episode and the first observation of the next one together.
    """

    def __init__(self, vec: VectorEnv) -> None:
        mode = vec.metadata.get("autoreset_mode")
        if mode is not gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError(
                f"SB3VecEnv needs a vector env that resets ended envs in the same step, as SB3's own do: make it "
                f"with autoreset_mode='same_step', got {getattr(mode, 'value', mode)!r}"
            )
        self.vec = vec
        super().__init__(vec.num_envs, vec.single_observation_space, vec.single_action_space)

    def reset(self) -> VecEnvObs:
        options = self._options[0]
        if any(o != options for o in self._options):
            raise ValueError(f"SB3VecEnv: a torchwm env resets all its envs with one options dict, got {self._options}")
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        obs, infos = self.vec.reset(seed=seeds, options=options or None)
        self.reset_infos = infos_to_list(infos, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        # Kept for step_wait, which SB3 calls right after: as DummyVecEnv does, and any Gymnasium vector env
        # (a wrapped one too) has step.
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminations, truncations, infos = self.vec.step(self._actions)
        dones = terminations | truncations
        final_infos = infos_to_list(infos.get("final_info", {}), self.num_envs)
        current = infos_to_list({k: v for k, v in infos.items() if not k.startswith(("final_", "_final_"))},
                                self.num_envs)
        step_infos = []
        for i in range(self.num_envs):
            if dones[i]:
                # DummyVecEnv's order: the ended step's infos, its observation, and the reset's infos aside.
                info = {**final_infos[i], "terminal_observation": infos["final_obs"][i]}
                self.reset_infos[i] = current[i]
            else:
                info = current[i]
            info["TimeLimit.truncated"] = bool(truncations[i] and not terminations[i])
            step_infos.append(info)
        # DummyVecEnv's reward buffer is float32.
        return obs, rewards.astype(np.float32), dones, step_infos

    def close(self) -> None:
        self.vec.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        return list(self.vec.render() or ())

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        values = self.vec.get_attr(attr_name)
        return [values[i] for i in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.vec.set_attr(attr_name, [value] * self._all(indices, f"set_attr({attr_name!r})"))

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        self._all(indices, f"env_method({method_name!r})")
        return list(self.vec.call(method_name, *method_args, **method_kwargs))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        # The envs may live in other processes: each reports its wrapper chain as Gymnasium prints it
        # (``<TimeLimit<OrderEnforcing<...>>>``), which names every wrapper class.
        chains = self.vec.call("__str__")
        return [f"<{wrapper_class.__name__}<" in chains[i] for i in self._get_indices(indices)]

    def _all(self, indices: VecEnvIndices, what: str) -> int:
        """The number of envs, if ``indices`` are all of them (in any order); a torchwm env sets attributes and
        calls methods on all its envs, and doing it to the others too could change them."""
        if sorted(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError(f"SB3VecEnv.{what} runs on every env; indices={indices!r} is a subset (use indices=None)")
        return self.num_envs
