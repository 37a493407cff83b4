"""Turn-based (AEC) PettingZoo envs, vectorized: `AECVectorEnv`, `make_aec_vec`.

`AECVectorEnv` has SuperSuit's ``VectorAECEnv`` API (``reset``, ``agent_selection``, ``agent_iter``,
``last``, ``observe``, ``step``) over an ordinary torchwm vector env of `AECGymEnv` (one AEC env each), on
any backend. The vector env has one current agent, ``agent_selection``: a step acts for it in every env
whose own current agent it is; the other envs pass (their action rows are ignored, ``passes`` is True)
and keep their state. After a step the next agent of ``possible_agents`` that is current in at least one
env is selected, as SuperSuit selects it. An env whose agents are all done is reset by the next step,
while the others go on: the inner vector env runs in autoreset mode ``next_step`` and is stepped for the
envs that act or must reset only (``step(actions, env_ids=...)``), so its seeded autoresets
(``autoreset_seeds=True``) are this env's too.

What each env's adapter returns is kept here per env, and ``last()`` and ``observe()`` read it without
reaching the workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import gymnasium as gym
import numpy as np

from torchwm.errors import ClosedEnvironmentError
from torchwm.factory import make_vec_from_fns
from torchwm.multiagent.aec_env import AECGymEnv, check_aec_env
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import (
    InfoBatcher,
    check_actions,
    create_batch,
    infos_to_rows,
    put_rows,
    take_rows,
)

INFO_FORMATS = ("gymnasium", "list")


class AECVectorEnv:
    """``num_envs`` turn-based PettingZoo envs stepped together, with SuperSuit's ``VectorAECEnv`` API.

    Made by `make_aec_vec` (and SuperSuit's `vectorize_aec_env_v0`, `torchwm.integrations.supersuit`).
    ``vector_env`` is the torchwm vector env of `AECGymEnv` under it (its ``call``, ``get_attr`` and
    ``spec`` reach the envs).

    Example:
        >>> from pettingzoo.classic import tictactoe_v3
        >>> from torchwm.multiagent.aec import make_aec_vec
        >>> envs = make_aec_vec([tictactoe_v3.env] * 2, seed=0)
        >>> envs.reset()
        >>> envs.agent_selection
        'player_1'
        >>> obs, rewards, *_ = envs.last()
        >>> obs["observation"].shape, rewards.tolist()
        ((2, 3, 3, 2), [0.0, 0.0])
        >>> envs.close()
    """

    def __init__(
        self,
        vector_env: VectorEnv,
        possible_agents: Sequence[Any],
        observation_spaces: dict[Any, gym.Space],
        action_spaces: dict[Any, gym.Space],
        info_format: str = "gymnasium",
    ) -> None:
        self.vector_env = vector_env
        self.num_envs = vector_env.num_envs
        self.possible_agents = list(possible_agents)
        self.max_num_agents = len(self.possible_agents)
        self.info_format = info_format
        self.metadata = dict(getattr(vector_env, "metadata", {}))
        self._observation_spaces = dict(observation_spaces)
        self._action_spaces = dict(action_spaces)
        self._agent_index = {agent: i for i, agent in enumerate(self.possible_agents)}
        n, num_agents = self.num_envs, self.max_num_agents
        self._observations = {
            agent: create_batch(space, n) for agent, space in self._observation_spaces.items()
        }
        # Never used by an env (a step reads its own agent's entry only), but the inner action is a Dict.
        self._unused_actions = {agent: create_batch(space, n) for agent, space in self._action_spaces.items()}
        self._selection = np.full(n, -1, dtype=np.int64)  # each env's agent_selection, as an index
        self._rewards = np.zeros((n, num_agents), dtype=np.float32)
        self._cumulative_rewards = np.zeros((n, num_agents), dtype=np.float32)
        self._terminations = np.ones((n, num_agents), dtype=bool)
        self._truncations = np.ones((n, num_agents), dtype=bool)
        self._env_terminations = np.zeros(n, dtype=bool)
        self._env_truncations = np.zeros(n, dtype=bool)
        self._agent_infos: list[dict[Any, dict]] = [{} for _ in range(n)]
        # The env's own infos (``episode_seed``) of the latest reset or step, for the envs it reached.
        self._env_infos: list[dict[str, Any]] = [{} for _ in range(n)]
        self._info_batcher = InfoBatcher(n)
        self.agent_selection: Any = None
        self._is_iterating = False
        self._closed = False

    # SuperSuit's per-agent dicts of arrays over envs, as they are after the latest step.
    @property
    def rewards(self) -> dict[Any, np.ndarray]:
        return self._by_agent(self._rewards)

    @property
    def terminations(self) -> dict[Any, np.ndarray]:
        return self._by_agent(self._terminations)

    @property
    def truncations(self) -> dict[Any, np.ndarray]:
        return self._by_agent(self._truncations)

    @property
    def infos(self) -> dict[Any, list[dict]]:
        return {agent: self._infos_list(agent) for agent in self.possible_agents}

    @property
    def env_terminations(self) -> np.ndarray:
        """True for the envs whose agents have all terminated: the next step resets them."""
        return self._env_terminations.copy()

    @property
    def env_truncations(self) -> np.ndarray:
        """True for the envs whose agents are all done, not all terminated: the next step resets them."""
        return self._env_truncations.copy()

    def observation_space(self, agent: Any) -> gym.Space:
        """The agent's own observation space (one env's, as SuperSuit gives it)."""
        return self._observation_spaces[self._known(agent)]

    def action_space(self, agent: Any) -> gym.Space:
        """The agent's own action space: a step takes ``num_envs`` rows of it."""
        return self._action_spaces[self._known(agent)]

    def reset(
        self, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> None:
        """Reset every env (env ``i`` with ``seed + i``, as SuperSuit and Gymnasium seed), then select the
        first agent of ``possible_agents`` that is current in some env."""
        self._check_open()
        observations, infos = self.vector_env.reset(seed=seed, options=options)
        self._store(np.arange(self.num_envs), observations, infos)
        self._env_terminations[:] = False
        self._env_truncations[:] = False
        self._select_from(0)

    def step(self, actions: Any, observe: bool = True) -> None:
        """Act for ``agent_selection`` in the envs where it is current (one row per env: the rows of the
        other envs are ignored), reset the envs that were done, then select the next agent.

        ``observe`` is SuperSuit's and changes nothing: the observations always come back.
        """
        self._check_open()
        if self.agent_selection is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        agent = self.agent_selection
        batch = check_actions(self._action_spaces[agent], actions, self.num_envs, check_range=False)
        index = self._agent_index[agent]
        env_ids = np.flatnonzero((self._selection == index) | self._env_terminations | self._env_truncations)
        inner_actions = {
            name: take_rows(space, batch if name == agent else self._unused_actions[name], env_ids)
            for name, space in self._action_spaces.items()
        }
        observations, _, terminations, truncations, infos = self.vector_env.step(
            inner_actions, env_ids=env_ids
        )
        self._store(env_ids, observations, infos)
        self._env_terminations[env_ids] = terminations
        self._env_truncations[env_ids] = truncations
        self._select_from(index + 1)

    def last(self, observe: bool = True) -> tuple[Any, ...]:
        """``(observations, rewards, agent_terminations, agent_truncations, env_terminations,
        env_truncations, passes, infos)`` of ``agent_selection`` in every env, as SuperSuit gives them.

        ``rewards`` are the agent's cumulative rewards since its last action (PettingZoo's ``last()``);
        ``passes`` is True for the envs whose current agent is another one (the next step leaves them as
        they are). ``infos``: with ``info_format="gymnasium"`` a dict of arrays over envs with Gymnasium's
        ``_key`` masks (and the agent's ``action_mask`` as int8 where its observations carry one), with
        ``"list"`` one dict per env.
        """
        self._check_open()
        if self.agent_selection is None:
            raise gym.error.ResetNeeded("call reset() before last()")
        agent = self.agent_selection
        index = self._agent_index[agent]
        return (
            self.observe(agent) if observe else None,
            self._cumulative_rewards[:, index].copy(),
            self._terminations[:, index].copy(),
            self._truncations[:, index].copy(),
            self._env_terminations.copy(),
            self._env_truncations.copy(),
            self._selection != index,
            self._infos_list(agent) if self.info_format == "list" else self._infos_batched(agent),
        )

    def observe(self, agent: Any) -> Any:
        """The agent's observation in every env, ``(num_envs, ...)`` (a dict of such arrays for a
        ``Dict`` space); zeros in the envs that no longer have the agent."""
        self._check_open()
        agent = self._known(agent)
        return take_rows(self._observation_spaces[agent], self._observations[agent], None)

    def agent_iter(self, max_iter: int = 2**63) -> AECIterable:
        """``agent_selection`` before each of ``max_iter`` steps. Unlike PettingZoo's, it does not stop
        when an env is done: that env resets and the others go on."""
        return AECIterable(self, max_iter)

    def close(self) -> None:
        """Close the envs and release every worker; a second call does nothing."""
        if not self._closed:
            self._closed = True
            self.vector_env.close()

    def __enter__(self) -> AECVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AECVectorEnv({self.vector_env!r}, possible_agents={self.possible_agents})"

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedEnvironmentError("this AECVectorEnv is closed")

    def _known(self, agent: Any) -> Any:
        if agent not in self._agent_index:
            raise KeyError(f"unknown agent {agent!r}: expected one of possible_agents {self.possible_agents}")
        return agent

    def _by_agent(self, columns: np.ndarray) -> dict[Any, np.ndarray]:
        return {agent: columns[:, i].copy() for i, agent in enumerate(self.possible_agents)}

    def _store(self, env_ids: np.ndarray, observations: dict[str, Any], infos: dict[str, Any]) -> None:
        """Keep the rows of the envs ``env_ids`` that the inner vector env returned."""
        for agent, space in self._observation_spaces.items():
            put_rows(space, self._observations[agent], env_ids, observations["observations"][agent])
        self._selection[env_ids] = observations["agent_selection"]
        self._rewards[env_ids] = observations["rewards"]
        self._cumulative_rewards[env_ids] = observations["cumulative_rewards"]
        self._terminations[env_ids] = observations["terminations"].astype(bool)
        self._truncations[env_ids] = observations["truncations"].astype(bool)
        self._env_infos = [{} for _ in range(self.num_envs)]
        for env_id, row in zip(env_ids.tolist(), infos_to_rows(infos, len(env_ids)), strict=True):
            self._agent_infos[env_id] = row.pop("agent_infos", {})
            row.pop("env_id", None)
            self._env_infos[env_id] = row

    def _select_from(self, start: int) -> None:
        """Select the first agent from position ``start`` on (cyclically) that is current in some env."""
        for offset in range(self.max_num_agents):
            index = (start + offset) % self.max_num_agents
            if np.any(self._selection == index):
                self.agent_selection = self.possible_agents[index]
                return
        raise RuntimeError(
            f"no env has an agent of possible_agents {self.possible_agents} as its agent_selection "
            f"(each env's index: {self._selection.tolist()})"
        )

    def _infos_list(self, agent: Any) -> list[dict]:
        return [{**self._agent_infos[i].get(agent, {}), **self._env_infos[i]} for i in range(self.num_envs)]

    def _infos_batched(self, agent: Any) -> dict[str, Any]:
        infos = self._info_batcher.batch(self._infos_list(agent))
        space = self._observation_spaces[agent]
        if (
            isinstance(space, gym.spaces.Dict)
            and "action_mask" in space.spaces
            and "action_mask" not in infos
        ):
            infos["action_mask"] = self._observations[agent]["action_mask"].astype(np.int8)
            infos["_action_mask"] = np.ones(self.num_envs, dtype=bool)
        return infos


class AECIterable:
    """What `AECVectorEnv.agent_iter` returns: iterable once per ``for`` loop, as SuperSuit's."""

    def __init__(self, env: AECVectorEnv, max_iter: int) -> None:
        self.env = env
        self.max_iter = max_iter

    def __iter__(self) -> Iterator[Any]:
        self.env._is_iterating = True
        for _ in range(self.max_iter):
            yield self.env.agent_selection


class AECEnvFactory:
    """A picklable zero-argument factory of `AECGymEnv` over ``env_fn``, named after it in the spec."""

    def __init__(self, env_fn: Callable[[], Any], possible_agents: Sequence[Any]) -> None:
        self.env_fn = env_fn
        self.possible_agents = tuple(possible_agents)
        self.__qualname__ = f"AECGymEnv({getattr(env_fn, '__qualname__', type(env_fn).__name__)})"

    def __call__(self) -> AECGymEnv:
        return AECGymEnv(self.env_fn, self.possible_agents)


def make_aec_vec(
    env_fns: Sequence[Callable[[], Any]],
    *,
    backend: str = "sync",
    seed: int | None = None,
    autoreset_seeds: bool = False,
    backend_kwargs: dict[str, Any] | None = None,
    info_format: str = "gymnasium",
) -> AECVectorEnv:
    """An `AECVectorEnv` of the turn-based PettingZoo envs ``env_fns`` make (zero-argument, picklable
    callables each returning an ``AECEnv``), each env on one worker of ``backend`` (``sync``,
    ``subproc``, ``shmem``, ``ray``).

    The first factory is called once here, to check what it makes and read its ``possible_agents`` and
    spaces, before any worker starts. ``seed`` is the seed of the first reset; ``autoreset_seeds=True``
    starts every episode of every env from a seed of its own, reported as ``"episode_seed"`` in the
    infos of the step that resets it (see torchwm's seeded autoresets). ``info_format``: ``"gymnasium"``
    (dicts of arrays with ``_key`` masks) or ``"list"`` (one dict per env, as SuperSuit gives).

    Example:
        >>> from pettingzoo.classic import connect_four_v3
        >>> from torchwm.multiagent.aec import make_aec_vec
        >>> with make_aec_vec([connect_four_v3.env] * 3, backend="sync", seed=0) as envs:
        ...     envs.reset()
        ...     envs.step([3, 3, 3])
        ...     envs.agent_selection
        'player_1'
    """
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Sequence) or not env_fns:
        raise TypeError(
            f"env_fns must be a non-empty list of callables that each return a PettingZoo AECEnv, got "
            f"{env_fns!r:.200}"
        )
    for i, env_fn in enumerate(env_fns):
        if not callable(env_fn):
            raise TypeError(
                f"env_fns must be callables that each return a PettingZoo AECEnv, got {env_fn!r:.200} at {i}"
            )
    if info_format not in INFO_FORMATS:
        raise ValueError(f"info_format must be one of {INFO_FORMATS}, got {info_format!r}")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a registered backend name (a str), got {backend!r}")
    first = env_fns[0]()
    try:
        check_aec_env(first, f"the env {env_fns[0]!r:.100} made")
        possible_agents = list(first.possible_agents)
        observation_spaces = {agent: first.observation_space(agent) for agent in possible_agents}
        action_spaces = {agent: first.action_space(agent) for agent in possible_agents}
    finally:
        if hasattr(first, "close"):
            first.close()
    return _make(
        env_fns,
        possible_agents,
        observation_spaces,
        action_spaces,
        backend,
        seed,
        autoreset_seeds,
        backend_kwargs,
        info_format,
    )


def _make(
    env_fns: Sequence[Callable[[], Any]],
    possible_agents: list[Any],
    observation_spaces: dict[Any, gym.Space],
    action_spaces: dict[Any, gym.Space],
    backend: str,
    seed: int | None,
    autoreset_seeds: bool,
    backend_kwargs: dict[str, Any] | None,
    info_format: str,
) -> AECVectorEnv:
    vector_env = make_vec_from_fns(
        [AECEnvFactory(env_fn, possible_agents) for env_fn in env_fns],
        backend=backend,
        seed=seed,
        autoreset_mode="next_step",
        backend_kwargs=backend_kwargs,
        autoreset_seeds=autoreset_seeds,
    )
    # Every backend that runs factories builds a torchwm VectorEnv (env_ids, partial steps).
    return AECVectorEnv(
        cast(VectorEnv, vector_env), possible_agents, observation_spaces, action_spaces, info_format
    )
