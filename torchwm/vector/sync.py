"""The ``sync`` backend: every env in the calling process, stepped in a loop.

The reference for the other backends: it runs the same worker loop
(`EnvGroup`) as ``subproc`` and ``shmem``, without processes. Its stepper
steps the envs in `send` and `recv` returns what it computed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.building import build_envs, closed_on_failure, spec_env_fns
from torchwm.env_state import EnvState
from torchwm.errors import mark_dropped
from torchwm.hookspecs import hookimpl
from torchwm.spec import VecSpec, with_env_fn
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import create_batch
from torchwm.vector.env_group import EnvGroup
from torchwm.vector.episode_seeds import EpisodeSeedBook, SeedStream
from torchwm.vector.stepper import Stepper, check_observation_mode, resolve_spaces


class SyncStepper(Stepper):
    """The envs of a `SyncVectorEnv`, in this process: an `EnvGroup` stepped in `send_step`. Its arguments
    are `SyncVectorEnv`'s."""

    def __init__(
        self,
        spec: VecSpec,
        *,
        batch_size: int | None = None,
        timeout: float | None = None,
        env_fn: Callable[[], gym.Env] | list[Callable[[], gym.Env]] | None = None,
        observation_mode: Any = "same",
    ) -> None:
        observation_mode = check_observation_mode(observation_mode)
        spec = with_env_fn(spec, env_fn, "sync")
        super().__init__(spec, batch_size=batch_size, timeout=timeout)
        envs = build_envs(spec_env_fns(spec))
        with closed_on_failure(envs):  # spaces that differ
            self.single_observation_space, self.observation_space, self.single_action_space = resolve_spaces(
                SyncVectorEnv.__name__,
                observation_mode,
                [env.observation_space for env in envs],
                [env.action_space for env in envs],
            )
        self.metadata = dict(envs[0].metadata)
        self.render_mode = envs[0].render_mode
        n = spec.num_envs
        self.observations = create_batch(self.single_observation_space, n)
        self.rewards = np.zeros(n, dtype=np.float64)
        self.terminations = np.zeros(n, dtype=np.bool_)
        self.truncations = np.zeros(n, dtype=np.bool_)
        self.group = EnvGroup(
            envs, spec.autoreset, self.observations, self.rewards, self.terminations, self.truncations
        )
        self.episode_seeds = EpisodeSeedBook(n)

    def reset_envs(
        self,
        ids: np.ndarray,
        seeds: list[int | None],
        options: dict | None,
        streams: list[SeedStream | None] | None = None,
    ) -> list[dict]:
        return self.group.reset(ids.tolist(), seeds, options, streams)

    def send_step(self, ids: np.ndarray, actions: Any) -> None:
        ids_list = ids.tolist()
        try:
            infos = self.group.step(ids_list, actions)
        except BaseException as exc:
            # The envs stepped before the one that raised moved on, and their rows are not returned: the
            # error names the whole send, as a pool's error does.
            mark_dropped(exc, ids_list)
            raise
        self.state.arrived(ids_list, infos)

    def wait_ready(
        self, candidates: np.ndarray, count: int, timeout: float | None, *, min_ready: int | None = None
    ) -> tuple[np.ndarray, list[dict]]:
        # Every env in flight is ready (so ``min_ready`` changes nothing): served as the parallel backends
        # serve theirs, the envs sent longest ago first.
        return self.state.collect(count)

    def call(self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int]) -> list[Any]:
        return self.group.call(ids, name, args, kwargs)

    def clone_states(self, ids: np.ndarray) -> list[EnvState]:
        return self.group.clone_states(ids.tolist())

    def restore_states(self, ids: np.ndarray, states: list[EnvState]) -> list[dict]:
        return self.group.restore_states(ids.tolist(), states)

    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        self.group.set_attr(ids, name, values)

    def close(self) -> None:
        self.group.close()


class SyncVectorEnv(VectorEnv):
    """All envs in this process.

    Args:
        spec: what to build.
        copy: return copies of the observation batch (default) or the internal buffer.
        batch_size: `recv` returns ``batch_size`` of the envs in flight, in the order they were sent.
        env_fn: builds one env, or a list of one such callable per env, for a caller with factories of
            its own; it lands in ``vec.spec.env_fns``. Without it, the envs are ``spec.env_fns``
            (`torchwm.make_vec_from_fns`) or else `torchwm.factory.build_env` of ``spec``.
        observation_mode: Gymnasium's option: ``"same"`` (default), ``"different"`` or a tuple
            ``(batched space, single space)`` (see `torchwm.vector.stepper.resolve_spaces`).

    Example:
        >>> import torchwm
        >>> with torchwm.make_vec("CartPole-v1", num_envs=2, backend="sync", seed=0) as envs:
        ...     obs, infos = envs.reset()
        ...     obs.shape
        (2, 4)
    """

    _stepper: SyncStepper

    def __init__(
        self,
        spec: VecSpec,
        *,
        copy: bool = True,
        batch_size: int | None = None,
        timeout: float | None = None,
        env_fn: Callable[[], gym.Env] | list[Callable[[], gym.Env]] | None = None,
        observation_mode: Any = "same",
    ) -> None:
        stepper = SyncStepper(
            spec, batch_size=batch_size, timeout=timeout, env_fn=env_fn, observation_mode=observation_mode
        )
        super().__init__(stepper, copy=copy)

    @property
    def envs(self) -> list[gym.Env]:
        """The envs themselves (sync only), as Gymnasium's SyncVectorEnv offers."""
        return self._stepper.group.envs

    def __copy__(self) -> SyncVectorEnv:
        # A shallow copy would share the envs, and closing or dropping it would close the original's.
        raise TypeError(
            "SyncVectorEnv cannot be copied with copy.copy: the copy would share its envs (closing or "
            "dropping either would close the other's). Pass the vector env itself, or copy.deepcopy it for "
            "envs of its own"
        )


@hookimpl
def register_backends(register):
    register("sync", SyncVectorEnv, description="all envs in this process, stepped in a loop")
