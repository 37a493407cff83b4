"""`TianshouVectorEnv`: torchwm's backends as a Tianshou `BaseVectorEnv`.

Tianshou's `Collector`, `AsyncCollector`, `VectorEnvNormObs` and trainers take a vector env of
their own kind: ``reset(env_id)`` and ``step(action, id)`` on some envs, one info dict per row
(each step's with ``"env_id"``), the ended envs reset by the collector (so the torchwm env under it
runs with ``autoreset_mode="disabled"``), and Tianshou's asynchronous mode, where ``wait_num`` and
``timeout`` let `step` return the envs that finished first. The adapter is built as Tianshou's
``SubprocVectorEnv(env_fns, wait_num, timeout)`` is, with the torchwm backend as one more argument:
``wait_num`` becomes the backend's ``batch_size`` and ``timeout`` a deadline,
``recv(timeout=..., min_ready=1)`` (whatever is ready by then, at least one env). Each env is
wrapped in a thin `TianshouEnvShim`, as Tianshou's Ray worker wraps it, so that
`get_env_attr`/`set_env_attr` reach the env's ``unwrapped`` as Tianshou's workers do, and a seeded
reset seeds the env's action space too.

``env_fns`` may also return Tianshou's ``PettingZooEnv`` (a turn-based PettingZoo env for Tianshou's
``MultiAgentPolicyManager``), as Tianshou's vector envs take it. Each such env runs whole in one slot of
the torchwm backend, inside a `TianshouPettingZooShim` that turns what it returns into fixed-shape arrays
(so that they ride shared memory on ``shmem``); the vector env gives them back as Tianshou's
``DummyVectorEnv`` does: observations an object array of ``{"agent_id", "obs", "mask"}`` dicts, rewards
``(N, A)``, one per agent of ``possible_agents`` (float64 here; Tianshou stacks the env's own numbers).

Example:
    >>> import gymnasium as gym
    >>> from torchwm.integrations.tianshou import TianshouVectorEnv
    >>> venv = TianshouVectorEnv([lambda: gym.make("CartPole-v1")] * 2, backend="sync")
    >>> _ = venv.seed(0)
    >>> obs, info = venv.reset()
    >>> obs.shape, len(info)
    ((2, 4), 2)
    >>> venv.step([0, 1])[4][1]["env_id"]
    1
    >>> venv.close()
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import torchwm
from torchwm.errors import ClosedEnvironmentError
from torchwm.spaces import ARRAY_SPACES
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import get_row, infos_to_rows

try:
    import torch
    from tianshou.env.pettingzoo_env import PettingZooEnv
    from tianshou.env.venvs import GYM_RESERVED_KEYS, BaseVectorEnv
except ImportError as exc:
    from torchwm.extras import missing_extra

    raise missing_extra("tianshou", "torchwm.integrations.tianshou") from exc

__all__ = ["TianshouEnvShim", "TianshouPettingZooShim", "TianshouVectorEnv"]


# The built-in process backends, and the options that split the envs over their workers.
_ONE_ENV_PER_WORKER_BACKENDS = ("subproc", "shmem")
_SPLIT_OPTIONS = frozenset({"num_workers", "envs_per_worker", "inline"})

# The built-in backends that take Gymnasium's observation_mode option.
_DIFFERING_SPACES_BACKENDS = ("sync", "subproc", "shmem")


class TianshouArgumentError(ValueError, AssertionError):
    """A bad ``wait_num``, ``timeout`` or action count: Tianshou asserts (AssertionError), torchwm refuses
    with ValueError; this is both."""


class TianshouClosedError(ClosedEnvironmentError, AssertionError):
    """Used after `close`: Tianshou's AssertionError, and torchwm's `ClosedEnvironmentError`."""


class TianshouEnvShim(gym.Wrapper):
    """What Tianshou's env workers do around an env, inside the env's worker.

    `get_env_attr` and `set_env_attr` are those of Tianshou's workers: attributes are set on the env's
    ``unwrapped``; they are read from ``unwrapped`` too (as `DummyEnvWorker` reads them), except
    Gymnasium's own attributes (spaces, ``metadata``, ``spec``, ...), read from the env as made, whose
    observations and actions the vector env carries. A reset with a seed seeds the action space too,
    as Tianshou's workers do.
    """

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:
            self.env.action_space.seed(seed)
        return self.env.reset(seed=seed, options=options)

    def tianshou_get_env_attr(self, key: str) -> Any:
        return getattr(self.env if key in GYM_RESERVED_KEYS else self.env.unwrapped, key)

    def tianshou_set_env_attr(self, key: str, value: Any) -> None:
        setattr(self.env.unwrapped, key, value)

    def tianshou_possible_agents(self) -> None:
        """None: a single-agent env (a `TianshouPettingZooShim` answers its agents)."""
        return None


class TianshouPettingZooShim(gym.Env):
    """Tianshou's ``PettingZooEnv`` as one ``gymnasium.Env`` of fixed-shape arrays, inside the env's worker.

    ``PettingZooEnv`` returns ``{"agent_id": name, "obs": array, "mask": [bool, ...]}`` observations and a
    list of every agent's reward; a torchwm vector env batches arrays of a fixed space and one reward per
    env. So the shim's observation is a `spaces.Dict`: ``"agent_id"`` (the current agent's index in
    ``possible_agents``), ``"obs"``, ``"mask"`` (the legal actions, when the action space is ``Discrete``)
    and ``"rewards"`` (float64 ``(A,)``, what ``PettingZooEnv.step`` returned; zeros after a reset, which
    returns none); `TianshouVectorEnv` turns them back into Tianshou's dicts and an ``(N, A)`` reward array.
    Its own reward is 0.0, unused. Attributes are read and set on the ``PettingZooEnv`` (its
    ``unwrapped`` is itself), as Tianshou's workers do.
    """

    def __init__(self, env: PettingZooEnv) -> None:
        self.env = env
        self.possible_agents = list(env.agents)  # PettingZooEnv.agents is its env's possible_agents
        self._agent_index = {agent: i for i, agent in enumerate(self.possible_agents)}
        space = env.observation_space
        # PettingZooEnv gives the "observation" part of a masked env's observation, the mask apart.
        self._masked = isinstance(space, spaces.Dict) and "action_mask" in space.spaces
        obs_space = space["observation"] if self._masked else space
        self._discrete = isinstance(env.action_space, spaces.Discrete)
        fields: dict[str, gym.Space] = {
            "agent_id": spaces.Discrete(len(self.possible_agents)),
            "obs": obs_space,
            "rewards": spaces.Box(-np.inf, np.inf, (len(self.possible_agents),), np.float64),
        }
        if self._discrete:
            fields["mask"] = spaces.MultiBinary(int(env.action_space.n))
        self.observation_space = spaces.Dict(fields)
        self.action_space = env.action_space
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = getattr(env.env, "render_mode", None)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:
            self.env.action_space.seed(seed)
        # Only what was given: PettingZooEnv passes its arguments on to the AEC env's reset.
        kwargs = {k: v for k, v in (("seed", seed), ("options", options)) if v is not None}
        observation, info = self.env.reset(**kwargs)
        return self._observation(observation, None), dict(info)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        observation, rewards, terminated, truncated, info = self.env.step(action)
        return self._observation(observation, rewards), 0.0, bool(terminated), bool(truncated), dict(info)

    def render(self, **kwargs: Any) -> Any:
        return self.env.render(**kwargs)

    def close(self) -> None:
        self.env.close()

    def tianshou_get_env_attr(self, key: str) -> Any:
        return getattr(self.env.unwrapped, key)

    def tianshou_set_env_attr(self, key: str, value: Any) -> None:
        setattr(self.env.unwrapped, key, value)

    def tianshou_possible_agents(self) -> list[Any]:
        """The agents whose indices ``"agent_id"`` holds and whose rewards ``"rewards"`` holds, in order."""
        return self.possible_agents

    def _observation(self, observation: dict[str, Any], rewards: list[Any] | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "agent_id": self._agent_index[observation["agent_id"]],
            "obs": observation["obs"],
            "rewards": np.zeros(len(self.possible_agents))
            if rewards is None
            else np.asarray(rewards, np.float64),
        }
        if self._discrete:
            out["mask"] = np.asarray(observation["mask"], dtype=np.int8)
        return out


def _shimmed(env_fn: Callable[[], Any]) -> gym.Env:
    env = env_fn()
    if isinstance(env, PettingZooEnv):
        return TianshouPettingZooShim(env)
    if not isinstance(env, gym.Env):
        raise TypeError(
            f"env_fns must return a gymnasium.Env or Tianshou's PettingZooEnv (tianshou.env.pettingzoo_env."
            f"PettingZooEnv), got {type(env).__module__}.{type(env).__qualname__}"
        )
    return TianshouEnvShim(env)


def _stack(rows: list[Any]) -> np.ndarray:
    """Tianshou's batching of observations: stacked, or an object array when they do not stack."""
    try:
        return np.stack(rows)
    except ValueError:  # different len(obs)
        return np.array(rows, dtype=object)


class TianshouVectorEnv(BaseVectorEnv):
    """Tianshou's ``SubprocVectorEnv(env_fns, wait_num, timeout)`` on any torchwm backend.

    Args:
        env_fns: ``env_fns[i]()`` makes env ``i`` (a ``gymnasium.Env``, or Tianshou's ``PettingZooEnv``:
            then every env must be one), as in Tianshou.
        backend: the torchwm backend: ``"sync"``, ``"subproc"``, ``"shmem"``, or a plugin's.
        wait_num: Tianshou's: in asynchronous simulation `step` returns as soon as ``wait_num`` envs
            have finished (the backend's ``batch_size``). ``None`` (or 0): every env stepped.
        timeout: Tianshou's: `step` returns the envs ready ``timeout`` seconds after it began, at
            least one (the backend's own ``timeout`` still bounds how long an env may take).
        backend_kwargs: the backend's options (``num_workers``, ``context``, ``timeout``, ...). In
            asynchronous simulation (``wait_num`` or ``timeout`` given) on ``subproc`` and ``shmem``,
            each env has its own worker unless ``num_workers``, ``envs_per_worker`` or ``inline`` say
            otherwise, as ``SubprocVectorEnv`` runs one process per env: envs on one worker step one
            after another and come back together. On ``sync``, ``subproc`` and ``shmem``,
            ``observation_mode`` defaults to ``"different"``: as in Tianshou, the envs' observation
            spaces may differ in their bounds.

    Raises:
        ValueError: ``wait_num`` not in ``[1, len(env_fns)]`` or ``timeout <= 0`` (also an
            ``AssertionError``, Tianshou's type), or ``batch_size`` in ``backend_kwargs`` (pass
            ``wait_num``); raised before any worker starts.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        backend: str = "sync",
        wait_num: int | None = None,
        timeout: float | None = None,
        backend_kwargs: dict[str, Any] | None = None,
    ) -> None:
        # BaseVectorEnv.__init__ is not called: it makes one Tianshou EnvWorker per env, where the
        # torchwm backend is the workers. The attributes it sets are set here, with its checks.
        n = len(env_fns)
        self._env_fns = env_fns
        self.env_num = n
        self.wait_num = wait_num or n
        if not 1 <= self.wait_num <= n:
            raise TianshouArgumentError(f"wait_num should be in [1, {n}], but got {wait_num}")
        if timeout is not None and not timeout > 0:
            raise TianshouArgumentError(f"timeout is {timeout}, it should be positive if provided!")
        self.timeout = timeout
        self.is_async = self.wait_num != n or timeout is not None
        if backend_kwargs is not None and not isinstance(backend_kwargs, dict):
            raise TypeError(f"backend_kwargs must be a dict, got {backend_kwargs!r}")
        options = dict(backend_kwargs or {})
        if "batch_size" in options:
            raise ValueError(
                f"give Tianshou's wait_num, not backend_kwargs['batch_size'] "
                f"(got batch_size={options['batch_size']!r}): it is the backend's batch_size"
            )
        if self.wait_num != n:
            options["batch_size"] = self.wait_num
        if self.is_async and backend in _ONE_ENV_PER_WORKER_BACKENDS and not _SPLIT_OPTIONS & set(options):
            # Tianshou's layout, one process per env: a worker steps its envs one after another and
            # returns them together, so that wait_num and timeout would see whole workers.
            options["num_workers"] = n
        if backend in _DIFFERING_SPACES_BACKENDS:
            # Tianshou does not compare the envs' spaces; its own test envs differ in their bounds.
            options.setdefault("observation_mode", "different")
        # Envs step in the order Tianshou sends them; which of them are stepping (waiting_id) and which
        # may be stepped or reset (ready_id), as in BaseVectorEnv.
        self.waiting_id: list[int] = []
        self.ready_id = list(range(n))
        self.is_closed = False
        self.vec: VectorEnv = torchwm.make_vec_from_fns(  # type: ignore[assignment]
            [functools.partial(_shimmed, fn) for fn in env_fns],
            backend=backend,
            autoreset_mode="disabled",  # Tianshou's collectors reset the ended envs themselves
            backend_kwargs=options,
        )
        # Tianshou's PettingZooEnv envs: the agents their observations and rewards are laid out by.
        try:
            self.possible_agents: list[Any] | None = self.vec.call("tianshou_possible_agents", env_ids=[0])[0]
        except BaseException:
            self.vec.close()
            raise

    def _assert_is_not_closed(self) -> None:
        if self.is_closed:
            raise TianshouClosedError(f"Methods of {type(self).__name__} cannot be called after close.")

    def get_env_attr(self, key: str, id: int | list[int] | np.ndarray | None = None) -> list[Any]:
        """Attribute ``key`` of the envs ``id`` (all by default), one value each, in the order of ``id``."""
        self._assert_is_not_closed()
        ids = self._wrap_id(id)
        if self.is_async:
            self._assert_id(ids)
        return list(self.vec.call("tianshou_get_env_attr", key, env_ids=ids))

    def set_env_attr(self, key: str, value: Any, id: int | list[int] | np.ndarray | None = None) -> None:
        """Set attribute ``key`` of the envs ``id`` (all by default) to ``value``, on their ``unwrapped``."""
        self._assert_is_not_closed()
        ids = self._wrap_id(id)
        if self.is_async:
            self._assert_id(ids)
        self.vec.call("tianshou_set_env_attr", key, value, env_ids=ids)

    def reset(
        self, env_id: int | list[int] | np.ndarray | None = None, **kwargs: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Reset the envs ``env_id`` (all by default): their observations and an array of their info dicts.

        ``kwargs`` go to each env's ``reset``, as in Tianshou: ``seed=s`` seeds every env reset with
        ``s`` (and its action space); ``options``.
        """
        self._assert_is_not_closed()
        ids = self._wrap_id(env_id)
        if self.is_async:
            self._assert_id(ids)
        unknown = set(kwargs) - {"seed", "options"}
        if unknown:
            raise TypeError(
                f"reset() got unexpected keyword arguments {sorted(unknown)}: "
                "Gymnasium envs take seed and options"
            )
        if isinstance(self.vec.single_observation_space, spaces.Tuple):
            raise TypeError(
                "Tuple observation space is not supported. ",
                "Please change it to array or dict space",
            )
        seed = kwargs.get("seed")
        seeds = None if seed is None else [seed] * len(ids)
        try:
            obs, infos = self.vec.reset(seed=seeds, options=kwargs.get("options"), env_ids=ids)
        except BaseException:
            if self.is_async:
                self._follow_in_flight()
            raise
        infos = {k: v for k, v in infos.items() if k not in ("env_id", "_env_id")}
        return self._observations(obs, len(ids)), _object_array(infos_to_rows(infos, len(ids)))

    def step(
        self,
        action: np.ndarray | torch.Tensor | None,
        id: int | list[int] | np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step the envs ``id`` (all by default) with ``action`` (one row each), as Tianshou's `step`.

        In asynchronous simulation the result has the envs that finished (``info[i]["env_id"]`` says
        which), and ``action=None`` collects the envs still stepping without sending any.
        """
        self._assert_is_not_closed()
        ids = self._wrap_id(id)
        if not self.is_async:
            if action is None:
                raise ValueError("action must be not-None for non-async")
            result = self.vec.step(self._actions(action, ids), env_ids=ids)
        else:
            try:
                if action is not None:
                    self._assert_id(ids)
                    self.vec.send(self._actions(action, ids), env_ids=ids)
                    sent = [int(i) for i in ids]
                    self.waiting_id.extend(sent)
                    self.ready_id = [x for x in self.ready_id if x not in sent]
                if self.timeout is None:
                    result = self.vec.recv()
                else:
                    result = self.vec.recv(timeout=self.timeout, min_ready=1)
            except BaseException:
                self._follow_in_flight()
                raise
        obs, rewards, terminations, truncations, infos = result
        if self.possible_agents is not None:
            rewards = obs["rewards"].copy()  # (N, A): every agent's, as PettingZooEnv returns them
        done_ids = [int(i) for i in infos.get("env_id", ids)]
        if self.is_async:
            for i in done_ids:
                self.waiting_id.remove(i)
            self.ready_id.extend(done_ids)
        infos = {k: v for k, v in infos.items() if k not in ("env_id", "_env_id")}
        rows = infos_to_rows(infos, len(done_ids))
        for row, i in zip(rows, done_ids, strict=True):
            row["env_id"] = i
        return self._observations(obs, len(done_ids)), rewards, terminations, truncations, _object_array(rows)

    def seed(self, seed: int | list[int] | None = None) -> list[list[int] | None]:
        """Seed every env and its action space: ``seed=s`` gives env ``i`` the seed ``s + i``, a list one
        each.

        As Tianshou's workers seed a Gymnasium env, this resets the envs with those seeds.
        """
        self._assert_is_not_closed()
        if seed is None:
            seeds: list[int | None] = [None] * self.env_num
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.env_num)]
        else:
            seeds = list(seed)
        self.vec.reset(seed=seeds)
        if self.possible_agents is not None:
            return [None] * self.env_num  # DummyEnvWorker's answer: what PettingZooEnv.seed returns
        return [[s] for s in seeds]  # type: ignore[list-item]  # DummyEnvWorker's answer: [seed] (or [None])

    def render(self, **kwargs: Any) -> list[Any]:
        """Every env's ``render(**kwargs)``."""
        self._assert_is_not_closed()
        if self.is_async and len(self.waiting_id) > 0:
            raise RuntimeError(
                f"Environments {self.waiting_id} are still stepping, cannot render them now.",
            )
        return list(self.vec.call("render", **kwargs))

    def close(self) -> None:
        """Close every env and the backend's workers; a second call does nothing."""
        if self.is_closed:
            return
        self.vec.close()
        self.is_closed = True

    def _follow_in_flight(self) -> None:
        """After a failed call: ``waiting_id`` and ``ready_id`` as torchwm has the envs in flight.

        An env error (or a timeout, an interrupt) may end the steps of other envs too: the backend
        abandons them or delivers them later, as its fault table says. Tianshou's lists must say the same,
        or its checks refuse every env it believes stepping while torchwm has nothing in flight.
        """
        flying = self.vec.in_flight_ids
        in_flight = np.zeros(self.env_num, dtype=bool)
        in_flight[flying] = True
        waiting = [i for i in self.waiting_id if in_flight[i]]
        waiting += [i for i in flying if i not in waiting]
        ready = [i for i in self.ready_id if not in_flight[i]]
        ready += [i for i in self.waiting_id if not in_flight[i] and i not in ready]
        ready += [i for i in range(self.env_num) if not in_flight[i] and i not in ready]
        self.waiting_id, self.ready_id = waiting, ready

    def _actions(self, action: Any, ids: Any) -> Any:
        if isinstance(action, torch.Tensor):
            action = action.detach().cpu().numpy()
        elif not isinstance(action, (np.ndarray, dict, tuple)):
            action = np.asarray(action)
        if len(action) != len(ids):
            raise TianshouArgumentError(
                f"expected {len(ids)} actions, one per env of id={list(ids)}, got {len(action)}"
            )
        return action

    def _observations(self, obs: Any, num_rows: int) -> np.ndarray:
        """torchwm's batch of observations as Tianshou batches them: `np.stack` of the envs' observations
        (an array of dicts for a ``Dict`` space, an object array for values that do not stack)."""
        if self.possible_agents is not None:
            return self._pettingzoo_observations(obs, num_rows)
        space = self.vec.single_observation_space
        if isinstance(space, ARRAY_SPACES) and isinstance(obs, np.ndarray):
            return obs
        return _stack([get_row(space, obs, i) for i in range(num_rows)])

    def _pettingzoo_observations(self, obs: dict[str, Any], num_rows: int) -> np.ndarray:
        """The shims' arrays as the dicts ``PettingZooEnv`` returns, in an object array (Tianshou's
        ``np.stack`` of dicts): ``agent_id`` the agent's name, ``mask`` a list of ``np.bool_``."""
        agents = self.possible_agents
        assert agents is not None
        space = self.vec.single_observation_space["obs"]  # type: ignore[index]
        rows = []
        for i in range(num_rows):
            row: dict[str, Any] = {
                "agent_id": agents[int(obs["agent_id"][i])],
                "obs": get_row(space, obs["obs"], i),
            }
            if "mask" in obs:
                row["mask"] = list(obs["mask"][i] == 1)
            rows.append(row)
        return _object_array(rows)


def _object_array(rows: list[dict[Any, Any]]) -> np.ndarray:
    array = np.empty(len(rows), dtype=object)
    array[:] = rows
    return array
