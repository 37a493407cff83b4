"""SuperSuit's vector calls, one rename away: `pettingzoo_env_to_vec_env_v1`, `concat_vec_envs_v1`,
`vectorize_aec_env_v0`.

A SuperSuit user changes ``import supersuit as ss`` to ``import torchwm.integrations.supersuit as ss`` (or
the names' import) and nothing else: these are thin over `torchwm.multiagent.make_vec` (the ``agents``
layout, agents as rows, ``autoreset_mode="same_step"``), and the objects they return expose what SuperSuit
3.11's ``MarkovVectorEnv`` and ``ConcatVecEnv`` expose: ``num_envs`` rows (agents of every env),
``observation_space`` and ``action_space`` of *one* agent (SuperSuit's meaning, not Gymnasium 1.x's batched
one; ``single_observation_space`` and ``single_action_space`` are the same spaces), ``reset(seed, options)
-> (obs, [info per row])``, ``step(actions) -> (obs, rewards, terminations, truncations, [info per row])``
(an ended env's rows carry ``terminal_observation``), ``step_async``/``step_wait``, ``render()`` (the first
env's frame), ``env_is_wrapped`` (one answer per row), ``close``, and ``par_env`` for the one-env vector
env. ``concat_vec_envs_v1(..., base_class="stable_baselines3")`` gives `torchwm.integrations.sb3.SB3VecEnv`
over the agents layout. ``vectorize_aec_env_v0`` (turn-based envs) is `torchwm.multiagent.aec`'s, under its
SuperSuit name here too.

An integration, as the other peers' are: it stands on `torchwm.multiagent` and on
`torchwm.integrations.sb3`, and nothing under it imports it.

Where torchwm differs: flags are bool (SuperSuit's are uint8, the same values), the envs run on any
backend (``num_cpus > 1`` is ``shmem``; ``backend=`` picks another), and a Gymnasium 1.x vector env of the
same envs is `torchwm.multiagent.make_vec` itself.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from torchwm.multiagent.aec import AECVectorEnv, check_aec_env
from torchwm.multiagent.agents_vector import AgentsVectorEnv
from torchwm.multiagent.make import make_vec
from torchwm.multiagent.pettingzoo_import import pettingzoo_env_types

__all__ = [
    "SuperSuitVecEnv",
    "concat_vec_envs_v1",
    "pettingzoo_env_to_vec_env_v1",
    "vectorize_aec_env_v0",
]

BASE_CLASSES = ("gymnasium", "stable_baselines3")


class SuperSuitVecEnv(gym.vector.VectorEnv):
    """SuperSuit's ``MarkovVectorEnv`` (one env) or ``ConcatVecEnv`` (several) over an `AgentsVectorEnv`.

    Made by `pettingzoo_env_to_vec_env_v1` and `concat_vec_envs_v1` (see the module).

    Attributes:
        agents_env: the `AgentsVectorEnv` (``info_format="list"``) that runs the envs.
        observation_space, action_space: one agent's spaces, as SuperSuit gives them.
    """

    def __init__(self, agents_env: AgentsVectorEnv, parallel_env: Any, metadata: dict[str, Any]) -> None:
        self.agents_env = agents_env
        # The env given to pettingzoo_env_to_vec_env_v1, untouched: concat_vec_envs_v1 copies it.
        self._parallel_env = parallel_env
        self.num_envs = agents_env.num_envs
        self.single_observation_space = agents_env.single_observation_space
        self.single_action_space = agents_env.single_action_space
        self.observation_space = agents_env.single_observation_space
        self.action_space = agents_env.single_action_space
        self.possible_agents = agents_env.possible_agents
        self.num_agents_per_env = agents_env.num_agents_per_env
        self.num_vector_envs = agents_env.num_vector_envs
        self.metadata = {**metadata, "autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self.render_mode = agents_env.render_mode
        self.closed = False

    @property
    def par_env(self) -> Any:
        """The PettingZoo env of the one-env vector env (a copy of the one given), as it is now."""
        if self.num_vector_envs != 1:
            raise AttributeError(
                f"par_env is the PettingZoo env of pettingzoo_env_to_vec_env_v1's one-env vector env; this "
                f"one runs {self.num_vector_envs} envs: use get_attr('par_env')"
            )
        return self.agents_env.get_attr("par_env")[0]

    # SuperSuit's infos are a list of one dict per row, not Gymnasium's dict of arrays.
    def reset(  # type: ignore[override]
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, list[dict]]:
        """Reset every env (env ``i`` with ``seed + i``, as SuperSuit seeds them)."""
        return self.agents_env.reset(seed=seed, options=options)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:  # type: ignore[override]
        """Step every env with ``actions``, one row per agent (a batch, or a list of ``num_envs`` actions
        as SuperSuit takes them)."""
        return self.agents_env.step(self._batched(actions))

    def step_async(self, actions: Any) -> None:
        self._actions = self._batched(actions)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        return self.agents_env.step(self._actions)

    def render(self) -> Any:
        """The first env's frame, as SuperSuit renders."""
        return self.agents_env.render()[0]

    def env_is_wrapped(self, wrapper_class: type) -> list[bool]:
        """Whether each row's PettingZoo env is wrapped in ``wrapper_class`` (one answer per row)."""
        per_env = self.agents_env.call(_pettingzoo_env_is_wrapped, wrapper_class)
        return [bool(answer) for answer in per_env for _ in range(self.num_agents_per_env)]

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Attribute ``name`` of each env's `AgentsEnv` (its PettingZoo env is ``par_env``): one per env."""
        return self.agents_env.get_attr(name)

    def close_extras(self, **kwargs: Any) -> None:
        self.agents_env.close(**kwargs)

    def _batched(self, actions: Any) -> Any:
        if isinstance(actions, list):
            # SuperSuit's callers give a list of one action per row.
            if len(actions) != self.num_envs:
                raise ValueError(
                    f"expected {self.num_envs} actions, one per row (agent), got a list of {len(actions)}"
                )
            space = self.single_action_space
            out: Any = create_empty_array(space, self.num_envs)
            return concatenate(space, actions, out)
        return actions


def _pettingzoo_env_is_wrapped(agents_env: Any, wrapper_class: type) -> bool:
    """Whether the PettingZoo env of ``agents_env`` (an `AgentsEnv`) or a wrapper under it is a
    ``wrapper_class`` (PettingZoo's wrappers hold their env in ``env``, its parallel conversion in
    ``aec_env``)."""
    env = agents_env.par_env
    seen = set()
    while env is not None and id(env) not in seen:
        if isinstance(env, wrapper_class):
            return True
        seen.add(id(env))
        env = getattr(env, "env", None) or getattr(env, "aec_env", None)
    return False


def pettingzoo_env_to_vec_env_v1(parallel_env: Any) -> SuperSuitVecEnv:
    """SuperSuit's ``pettingzoo_env_to_vec_env_v1``: one PettingZoo ``ParallelEnv`` as a vector env whose
    rows are its agents (``num_envs`` is the number of agents), on ``sync`` in this process.

    The env is copied (cloudpickle), as SuperSuit's `concat_vec_envs_v1` copies it; ``par_env`` is the
    copy being stepped. Agents must share their spaces and stay alive until their env ends (else
    ``AssertionError``, as in SuperSuit; SuperSuit's ``black_death_v3`` wrapper, or
    `torchwm.multiagent.make_vec`'s ``dead_agents="zero"``, allow agent death).

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> from torchwm.multiagent import pettingzoo_env_to_vec_env_v1
        >>> env = pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env())
        >>> obs, infos = env.reset(seed=0)
        >>> env.num_envs, obs.shape, env.observation_space.shape, len(infos)
        (3, (3, 18), (18,), 3)
        >>> env.close()
    """
    _check_parallel_env(parallel_env)
    agents_env = make_vec(parallel_env, 1, info_format="list", autoreset_mode="same_step")
    return SuperSuitVecEnv(agents_env, parallel_env, dict(getattr(parallel_env, "metadata", {}) or {}))


def concat_vec_envs_v1(
    vec_env: SuperSuitVecEnv,
    num_vec_envs: int,
    num_cpus: int = 0,
    base_class: str = "gymnasium",
    backend: str | None = None,
) -> Any:
    """SuperSuit's ``concat_vec_envs_v1``: ``num_vec_envs`` copies of the env of ``vec_env`` (from
    `pettingzoo_env_to_vec_env_v1`), their agents' rows one after the other.

    ``num_cpus <= 1`` runs them on ``sync``, more on ``shmem`` with ``num_workers=num_cpus`` (at most one
    per env); ``backend=`` picks another backend. ``base_class="gymnasium"`` gives a `SuperSuitVecEnv`,
    ``"stable_baselines3"`` a `torchwm.integrations.sb3.SB3VecEnv` (whose ``seed``, ``env_is_wrapped``,
    ``render`` and SB3's ``VecVideoRecorder`` work).

    Example:
        >>> from mpe2 import simple_spread_v3
        >>> import torchwm.integrations.supersuit as ss
        >>> env = ss.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env())
        >>> envs = ss.concat_vec_envs_v1(env, 4, num_cpus=0)
        >>> obs, infos = envs.reset(seed=0)
        >>> envs.num_envs, obs.shape
        (12, (12, 18))
        >>> envs.close()
    """
    if not isinstance(vec_env, SuperSuitVecEnv):
        hint = ""
        if isinstance(vec_env, gym.Env):
            hint = "; for single-agent Gymnasium envs use torchwm.make_vec_from_fns"
        raise TypeError(
            f"concat_vec_envs_v1 takes the vector env pettingzoo_env_to_vec_env_v1 returns, got "
            f"{type(vec_env).__module__}.{type(vec_env).__qualname__}{hint}"
        )
    if base_class not in BASE_CLASSES:
        raise ValueError(f"base_class must be one of {list(BASE_CLASSES)}, got {base_class!r}")
    backend, backend_kwargs = _backend_of("num_vec_envs", num_vec_envs, num_cpus, backend)
    stable_baselines3 = base_class == "stable_baselines3"
    if stable_baselines3:
        from torchwm.integrations.sb3 import SB3VecEnv  # needs the sb3 extra, imported only when asked

    agents_env = make_vec(
        vec_env._parallel_env,
        int(num_vec_envs),
        backend=backend,
        backend_kwargs=backend_kwargs,
        autoreset_mode="same_step",
        info_format="gymnasium" if stable_baselines3 else "list",
    )
    if stable_baselines3:
        try:
            return SB3VecEnv(agents_env)
        except BaseException:
            agents_env.close()
            raise
    return SuperSuitVecEnv(agents_env, vec_env._parallel_env, dict(vec_env.metadata))


def _check_parallel_env(parallel_env: Any) -> None:
    parallel_type, _ = pettingzoo_env_types()
    if not isinstance(parallel_env, parallel_type):
        # SuperSuit asserts it.
        raise AssertionError(
            f"pettingzoo_env_to_vec_env_v1 takes a PettingZoo ParallelEnv (pistonball_v6.parallel_env(), or "
            f"an AEC env converted with pettingzoo.utils.conversions.aec_to_parallel), got "
            f"{type(parallel_env).__module__}.{type(parallel_env).__qualname__}"
        )


def _backend_of(count_name: str, count: Any, num_cpus: Any, backend: Any) -> tuple[str, dict[str, Any]]:
    """SuperSuit's ``num_cpus`` as a torchwm backend and its options: ``num_cpus <= 1`` is ``sync``, more is
    ``shmem`` with ``num_workers=num_cpus`` (at most one per env); a ``backend`` given wins. ``count`` (the
    number of envs, named ``count_name`` in errors) and ``num_cpus`` are checked as SuperSuit's ints."""
    for name, value, least in ((count_name, count, 1), ("num_cpus", num_cpus, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int >= {least}, got {value!r}")
        if value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend must be a registered backend name (a str) or None, got {backend!r}")
    backend_kwargs: dict[str, Any] = {}
    if backend is None:
        backend = "sync" if num_cpus <= 1 else "shmem"
    if num_cpus > 1 and backend != "sync":
        backend_kwargs["num_workers"] = min(int(num_cpus), int(count))
    return backend, backend_kwargs


def vectorize_aec_env_v0(
    aec_env: Any, num_envs: int, num_cpus: int = 0, backend: str | None = None
) -> AECVectorEnv:
    """SuperSuit's ``vectorize_aec_env_v0``: ``num_envs`` copies of the AEC env instance ``aec_env`` (an
    `AECVectorEnv`, `torchwm.multiagent.make_vec`'s ``layout="aec"``), on the backend ``num_cpus`` gives
    as for `concat_vec_envs_v1`. Infos are SuperSuit's lists of one dict per env."""
    check_aec_env(aec_env, "vectorize_aec_env_v0's aec_env")
    backend, backend_kwargs = _backend_of("num_envs", num_envs, num_cpus, backend)
    return make_vec(
        aec_env,
        int(num_envs),
        layout="aec",
        backend=backend,
        backend_kwargs=backend_kwargs,
        info_format="list",
    )
