"""`TorchVectorizedEnv`: the multiprocessing wrapper for any Gym-like env factory.

It runs ``num_workers * envs_per_worker`` copies of whatever a no-argument
factory returns, on the ``shmem`` backend by default (or ``subproc``, or
``sync`` in-process), and speaks the classic batched API that rollout
harnesses expect: ``reset() -> obs`` and ``step(actions) -> (obs, rewards,
dones, infos)`` with ``dones = terminated | truncated``. Episodes reset by
themselves in the same step (``same_step`` autoreset), so the observation
returned with ``done`` is the first of the next episode and the last one is in
``infos["final_obs"]``, as in Stable-Baselines3 and Tianshou.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.building import check_single_env
from torchwm.factory import make_vec_from_fns
from torchwm.vector.base import VectorEnv
from torchwm.vector.pool import default_num_workers

BACKENDS = ("shmem", "subproc", "sync")


class TorchVectorizedEnv:
    """Copies of ``env_factory()`` across worker processes, stepped as one batch.

    Args:
        env_factory: a no-argument callable returning a `gymnasium.Env` (a module-level function, a
            lambda or a closure; it is cloudpickled to the workers).
        num_workers: worker processes (default: the cores this process may use).
        envs_per_worker: envs each worker steps; ``total_envs = num_workers * envs_per_worker``.
        backend: ``"shmem"`` (default), ``"subproc"`` or ``"sync"`` (all envs in this process).
        seed: the seed of the first reset (env ``i`` gets ``seed + i``).
        autoreset_mode: ``"same_step"`` (default, see the module docstring), ``"next_step"`` or
            ``"disabled"``.
        **backend_kwargs: more backend options (``context``, ``timeout``, ``batch_size``, ``copy``,
            ``restart_on_crash``).

    Example:
        >>> import torchwm
        >>> def env_factory():
        ...     return torchwm.make_env("CartPole-v1")
        >>> with torchwm.TorchVectorizedEnv(env_factory, num_workers=2, envs_per_worker=2) as vec_env:
        ...     obs = vec_env.reset()
        ...     obs, rewards, dones, infos = vec_env.step(vec_env.action_space.sample())
        ...     vec_env.total_envs, obs.shape, dones.dtype
        (4, (4, 4), dtype('bool'))
    """

    def __init__(
        self,
        env_factory: Callable[[], gym.Env],
        num_workers: int | None = None,
        envs_per_worker: int = 1,
        backend: str = "shmem",
        *,
        seed: int | None = None,
        autoreset_mode: str = "same_step",
        **backend_kwargs: Any,
    ) -> None:
        check_single_env(env_factory, "TorchVectorizedEnv was given")
        if not callable(env_factory):
            raise TypeError(
                f"env_factory must be a no-argument callable returning a gymnasium.Env, got {env_factory!r}"
            )
        if backend not in BACKENDS:
            raise ValueError(f"TorchVectorizedEnv runs on one of {list(BACKENDS)}, got backend={backend!r}")
        if num_workers is None:
            num_workers = default_num_workers()
        for name, value in (("num_workers", num_workers), ("envs_per_worker", envs_per_worker)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.num_workers = num_workers
        self.envs_per_worker = envs_per_worker
        self.total_envs = num_workers * envs_per_worker
        if backend != "sync":
            backend_kwargs = {
                **backend_kwargs,
                "num_workers": num_workers,
                "envs_per_worker": envs_per_worker,
            }
        # Built as make_vec_from_fns builds any list of factories, so that vec_env.spec.env_fns holds them.
        # sync, subproc and shmem are torchwm's vector envs (send, recv, call, spec).
        self.vec_env: VectorEnv = make_vec_from_fns(  # type: ignore[assignment]
            [env_factory] * self.total_envs,
            backend=backend,
            seed=seed,
            autoreset_mode=autoreset_mode,
            backend_kwargs=backend_kwargs,
        )

    @property
    def num_envs(self) -> int:
        return self.total_envs

    @property
    def observation_space(self) -> gym.Space:
        """The batched observation space (``total_envs`` rows)."""
        return self.vec_env.observation_space

    @property
    def action_space(self) -> gym.Space:
        """The batched action space: ``action_space.sample()`` gives one action per env."""
        return self.vec_env.action_space

    @property
    def single_observation_space(self) -> gym.Space:
        return self.vec_env.single_observation_space

    @property
    def single_action_space(self) -> gym.Space:
        return self.vec_env.single_action_space

    def reset(self, seed: int | list[int | None] | None = None) -> Any:
        """Reset every env; returns the batch of first observations."""
        obs, _ = self.vec_env.reset(seed=seed)
        return obs

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, dict[str, Any]]:
        """One action per env (first dimension ``total_envs``) -> ``(obs, rewards, dones, infos)``."""
        leading = _leading_dimension(actions)
        if leading != self.total_envs:
            raise ValueError(
                f"expected a batch of actions whose first dimension is total_envs={self.total_envs} "
                f"(num_workers={self.num_workers} x envs_per_worker={self.envs_per_worker}), got {leading}"
            )
        obs, rewards, terminations, truncations, infos = self.vec_env.step(actions)
        return obs, rewards, terminations | truncations, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        return self.vec_env.call(name, *args, **kwargs)

    def close(self) -> None:
        self.vec_env.close()

    def __enter__(self) -> TorchVectorizedEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"TorchVectorizedEnv(total_envs={self.total_envs}, num_workers={self.num_workers}, "
            f"envs_per_worker={self.envs_per_worker}, backend={self.vec_env.spec.backend!r})"
        )


def _leading_dimension(actions: Any) -> int | None:
    if isinstance(actions, dict):
        actions = next(iter(actions.values()), None)
    elif isinstance(actions, tuple):
        actions = actions[0] if actions else None
    shape = np.shape(actions)
    return shape[0] if shape else None
