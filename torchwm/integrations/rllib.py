"""`register_rllib_env`: RLlib's env runners (new API stack) sampling from a torchwm vector env.

RLlib's `SingleAgentEnvRunner` builds its envs with ``gym.make_vec(name, num_envs,
vectorization_mode=config.gym_env_vectorize_mode)``. With ``gym_env_vectorize_mode="vector_entry_point"``
and a name registered with ``ray.tune.register_env``, it calls the registered creator once with
``env_config | {"num_envs": n}`` and takes the vector env it returns as it is, so the creator can
return a torchwm env on any backend. Two things stand in the way of returning ``make_vec``'s result
directly. ``gym.make_vec`` writes the registration's `EnvSpec` to ``env.unwrapped.spec``, and a torchwm
env's ``spec`` is its `VecSpec`, read-only: `RLlibVectorEnv` wraps the env, is its own ``unwrapped``
and keeps the spec Gymnasium writes (the torchwm env and its `VecSpec` are ``.env`` and
``.env.spec``). And the runner expects Gymnasium's default autoreset mode, ``next_step``: it starts a
new episode with the observation of the step after the one that ended an episode, and drops that
step's reward. ``same_step`` would put the next episode's first observation at the end of the
finished one, so any other mode is refused.

Example:
    >>> from ray.rllib.algorithms.ppo import PPOConfig  # doctest: +SKIP
    >>> from torchwm.integrations.rllib import register_rllib_env
    >>> register_rllib_env("torchwm-cartpole", "CartPole-v1", backend="shmem")  # doctest: +SKIP
    >>> config = PPOConfig().environment("torchwm-cartpole").env_runners(  # doctest: +SKIP
    ...     num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode, VectorWrapper
from gymnasium.vector import VectorEnv as GymVectorEnv

import torchwm
from torchwm.integrations import check_full_batch, full_batch_error
from torchwm.vector.base import VectorEnv


class RLlibVectorEnv(VectorWrapper):
    """A torchwm vector env as RLlib's env runner builds it through ``gym.make_vec``.

    Steps, resets, spaces and metadata are the torchwm env's; ``unwrapped`` is this wrapper, so that
    the `EnvSpec` Gymnasium writes to ``unwrapped.spec`` lands here and not on the torchwm env.

    Args:
        env: a torchwm vector env in autoreset mode ``next_step``.

    Raises:
        TypeError: ``env`` is not a torchwm vector env.
        ValueError: its autoreset mode is not ``next_step``, or it returns fewer envs per step than
            it has (``batch_size < num_envs``): RLlib's env runner steps every env each step.
    """

    def __init__(self, env: GymVectorEnv) -> None:
        if not isinstance(env, VectorEnv):
            raise TypeError(f"expected a torchwm vector env (torchwm.make_vec), got {type(env).__name__}")
        mode = env.metadata.get("autoreset_mode")
        if mode is not AutoresetMode.NEXT_STEP:
            raise ValueError(
                "RLlib's env runner expects autoreset_mode 'next_step' (it starts the next episode on the "
                f"step after one ends); the env has {getattr(mode, 'name', str(mode)).lower()!r}"
            )
        check_full_batch(env, "RLlib's env runner")
        super().__init__(env)
        self._registration_spec: EnvSpec | None = None

    @property
    def unwrapped(self) -> RLlibVectorEnv:  # type: ignore[override]
        """This wrapper: ``gym.make_vec`` sets ``unwrapped.spec``, which a torchwm env keeps read-only."""
        return self

    @property
    def spec(self) -> EnvSpec | None:
        """The `EnvSpec` ``gym.make_vec`` registered this env under (``env.spec`` is torchwm's `VecSpec`)."""
        return self._registration_spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self._registration_spec = value

    def __enter__(self) -> RLlibVectorEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def register_rllib_env(name: str, id: str, **make_vec_kwargs: Any) -> None:
    """Register ``name`` with Ray Tune's env registry as torchwm vector envs of ``id``.

    RLlib configured with ``.environment(name)`` and ``.env_runners(gym_env_vectorize_mode=
    "vector_entry_point", num_envs_per_env_runner=n)`` then builds, in each env runner,
    ``torchwm.make_vec(id, n, **make_vec_kwargs)`` updated by the entries of RLlib's ``env_config``
    (keyword arguments of `torchwm.make_vec`: ``backend``, ``wrappers``, ``backend_kwargs``, env
    keyword arguments). Seeds come from RLlib: ``.debugging(seed=s)`` seeds each runner's first reset.

    Args:
        name: the name RLlib's config refers to.
        id: the env id, as `torchwm.make_vec` takes it.
        **make_vec_kwargs: keyword arguments of `torchwm.make_vec` (not ``num_envs``, which RLlib sets,
            nor ``autoreset_mode``, which must stay ``next_step``).

    Raises:
        TypeError: ``num_envs`` or ``autoreset_mode`` among the keyword arguments.
        ImportError: Ray Tune's packages are missing (the message gives the install line).
    """
    for fixed in ("num_envs", "autoreset_mode"):
        if fixed in make_vec_kwargs:
            raise TypeError(
                f"register_rllib_env() got {fixed}={make_vec_kwargs[fixed]!r}: RLlib sets num_envs "
                "(num_envs_per_env_runner) and its env runner needs autoreset_mode 'next_step'"
            )
    try:
        from ray.tune.registry import register_env
    except ImportError as exc:
        from torchwm.extras import missing_extra

        raise missing_extra("rllib", "torchwm.integrations.rllib") from exc

    def make(env_config: Mapping[str, Any]) -> RLlibVectorEnv:
        options = {**make_vec_kwargs, **env_config}
        num_envs = options.pop("num_envs", 1)
        batch_size = (options.get("backend_kwargs") or {}).get("batch_size")
        if isinstance(batch_size, int) and batch_size < num_envs:  # refused before any worker starts
            raise ValueError(full_batch_error("RLlib's env runner", batch_size, num_envs))
        vec = torchwm.make_vec(id, num_envs, **options)
        try:
            return RLlibVectorEnv(vec)
        except BaseException:
            vec.close()
            raise

    register_env(name, make)


__all__ = ["RLlibVectorEnv", "register_rllib_env"]
