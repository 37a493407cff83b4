"""`InnerVectorEnv`: what both multi-agent layouts do with the torchwm vector env that runs their envs.

Both `AgentsVectorEnv` and `ParallelVectorEnv` hold a torchwm vector env of N rows, one per PettingZoo
env (each an `AgentsEnv`), on any backend. This base class forwards to it what is the same in both
layouts: resets and steps by env (``env_ids`` name PettingZoo envs, whose agents move together),
``send``/``recv`` (with ``recv(timeout=)`` and ``in_flight_ids``), ``call``/``get_attr``/``set_attr``
(one value per env), ``render``, saving and restoring envs, closing, and the context manager; the
layouts only lay the arrays out.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.multiagent.agent_spaces import AgentSpaces
from torchwm.multiagent.env_batches import EnvStep


class InnerVectorEnv:
    """The torchwm vector env under a multi-agent layout, and the calls forwarded to it."""

    # A torchwm vector env (or another Gymnasium one): typed loosely, as its partial calls are torchwm's.
    inner: Any
    agent_spaces: AgentSpaces
    spec: Any
    closed: bool = True
    _stepped: Any = None

    def _init_inner(self, inner: gym.vector.VectorEnv, agent_spaces: AgentSpaces) -> None:
        self.inner = inner
        # The inner vector env's `VecSpec` (its ``env_fns`` build the `AgentsEnv` envs).
        self.spec = getattr(inner, "spec", None)
        self.agent_spaces = agent_spaces
        self.possible_agents = list(agent_spaces.agents)
        self.num_agents_per_env = agent_spaces.num_agents
        self.num_vector_envs = inner.num_envs
        self.autoreset_mode = inner.metadata.get("autoreset_mode")
        self.metadata = dict(inner.metadata)
        self.render_mode = getattr(inner, "render_mode", None)
        self._all_env_ids = np.arange(inner.num_envs)
        self.closed = False

    @property
    def batch_size(self) -> int:
        """How many envs (not agents) `recv` returns at most."""
        return getattr(self.inner, "batch_size", self.num_vector_envs)

    # -- forwarded by env ----------------------------------------------------------------------

    def _env_id_list(self, env_ids: Any) -> list[int]:
        ids = np.asarray(env_ids).reshape(-1)
        if ids.dtype.kind not in "iu" or ((ids < 0) | (ids >= self.num_vector_envs)).any():
            raise ValueError(
                f"env_ids name PettingZoo envs: ints in [0, {self.num_vector_envs}), got {env_ids!r}"
            )
        return ids.tolist()

    def _inner_reset(
        self, seed: Any, options: dict[str, Any] | None, env_ids: Any
    ) -> tuple[dict[str, Any], dict[str, Any], np.ndarray]:
        if env_ids is None:
            obs, infos = self.inner.reset(seed=seed, options=options)
            return obs, infos, self._all_env_ids
        obs, infos = self.inner.reset(seed=seed, options=options, env_ids=env_ids)
        return obs, infos, np.asarray(infos.pop("env_id"))

    def _inner_send(self, actions: Any, env_ids: Any) -> None:
        send = getattr(self.inner, "send", None)
        if send is None:  # a Gymnasium vector env of another kind: stepped whole
            if env_ids is not None:
                raise TypeError(
                    f"{type(self.inner).__name__} steps all its envs at once; env_ids= needs send()"
                )
            self._stepped = self.inner.step(actions)
            return
        send(actions, env_ids)

    @property
    def in_flight_ids(self) -> list[int]:
        """The envs (not agents) with a step in flight: sent, not yet returned by ``recv``, in env order."""
        return list(getattr(self.inner, "in_flight_ids", []))

    def _inner_recv(self, timeout: float | None) -> EnvStep:
        stepped = self._stepped
        if stepped is not None:
            self._stepped = None
            obs, _, _, _, infos = stepped
        elif timeout is None:
            obs, _, _, _, infos = self.inner.recv()
        else:
            # A step past the deadline raises the inner env's EnvTimeoutError and stays in flight.
            obs, _, _, _, infos = self.inner.recv(timeout=timeout)
        ids = np.asarray(infos.pop("env_id")) if "env_id" in infos else self._all_env_ids
        return EnvStep.read(obs, infos, ids)

    def _partial(self, step: EnvStep) -> bool:
        return step.env_ids is not self._all_env_ids

    def _inner_restore(self, states: Any, env_ids: Any) -> tuple[dict[str, Any], dict[str, Any], np.ndarray]:
        obs, infos = self.inner.restore_state(states, env_ids=env_ids)
        ids = self._all_env_ids if env_ids is None else np.asarray(self._env_id_list(env_ids))
        infos.pop("env_id", None)
        return obs, infos, ids

    def clone_state(self, env_ids: Any = None) -> tuple[Any, ...]:
        """The states of every env (or of ``env_ids``): whole PettingZoo envs, all agents, where the env
        can be copied (the inner vector env's ``clone_state``)."""
        return self.inner.clone_state(env_ids=env_ids)

    def call(self, name: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on each env's `AgentsEnv` (its PettingZoo env is ``.par_env``): one value per env."""
        return self.inner.call(name, *args, **kwargs)

    def get_attr(self, name: str, env_ids: Any = None) -> tuple[Any, ...]:
        """Attribute ``name`` of each env's `AgentsEnv`: one value per env."""
        if env_ids is None:
            return self.inner.get_attr(name)
        return self.inner.get_attr(name, env_ids=env_ids)

    def set_attr(self, name: str, values: Any, env_ids: Any = None) -> None:
        """Set attribute ``name`` of each env's `AgentsEnv`: one value for all, or one per env."""
        if env_ids is None:
            self.inner.set_attr(name, values)
        else:
            self.inner.set_attr(name, values, env_ids=env_ids)

    def render(self) -> Any:
        """Each env's frame (``render_mode`` is the PettingZoo env's): one per env."""
        return self.inner.render()

    def close(self, **kwargs: Any) -> None:
        """Close the inner vector env and every PettingZoo env; safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.inner.close(**kwargs)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.num_vector_envs} envs x {self.num_agents_per_env} agents, "
            f"inner={self.inner!r})"
        )

    # -- input checks ----------------------------------------------------------------------------

    def _checked_actions(self, space: gym.Space, actions: Any, rows: int) -> Any:
        """``actions`` of ``rows`` rows of ``space`` as arrays; ValueError naming the expected shape."""
        if isinstance(space, gym.spaces.Dict):
            if not isinstance(actions, dict) or set(actions) != set(space.spaces):
                got = sorted(actions) if isinstance(actions, dict) else type(actions).__name__
                raise KeyError(f"actions must be a dict with keys {sorted(space.spaces)}, got {got}")
            return {key: self._checked_actions(sub, actions[key], rows) for key, sub in space.spaces.items()}
        if isinstance(space, gym.spaces.Tuple):
            return tuple(
                self._checked_actions(sub, part, rows)
                for sub, part in zip(space.spaces, actions, strict=True)
            )
        array = np.asarray(actions)
        expected = (rows, *(space.shape or ()))
        if array.shape != expected:
            raise ValueError(
                f"actions must have shape {expected} ({rows} rows of {space}), got shape {array.shape}"
            )
        if space.dtype is not None and not np.can_cast(array.dtype, space.dtype, casting="same_kind"):
            raise ValueError(f"actions must be of dtype {space.dtype} (or cast to it), got {array.dtype}")
        return array
