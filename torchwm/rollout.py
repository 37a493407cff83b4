"""One rollout loop: step a vector env with a policy and hand each result's rows, with their env ids, to the
caller, who says which envs ended an episode and when to stop (`rollout`).

``torchwm.evaluate``, ``torchwm run`` and ``torchwm record`` step through it and keep only what they do with
the rows. The whole batch steps with ``step``; with ``batch_size < num_envs`` (results of some envs only,
``infos["env_id"]``) the envs of each result are sent again at once, EnvPool's way (what ``ale-native``'s
asynchronous mode requires), and the policy sees their rows only. Under ``autoreset_mode="disabled"`` the
envs the caller says ended are reset here before they step again (``reset_mask`` for the whole batch,
``reset(env_ids=)`` for a partial one). Envs still in flight are collected on the way out, whether the
caller stopped or anything (the policy, the env, the caller) raised, so that the env can be reset and
stepped afterwards; after an error within a deadline, as the error is what the caller must see.

Over the ``agents`` layout of `torchwm.multiagent` (rows are the agents of N PettingZoo envs, env-major)
the unit is the PettingZoo env: env ids name those, one per env, and the policy sees all its agents' rows.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from torchwm.vector.batching import take_rows

# Seconds to collect the envs still in flight after an error, for an env that has no timeout of its own.
IN_FLIGHT_DEADLINE = 60.0


@dataclasses.dataclass(frozen=True)
class Result:
    """One step's result: the rows of envs ``env_ids`` (all envs in order for a whole batch; over the
    ``agents`` layout one id per PettingZoo env, whose agents' rows follow one another)."""

    env_ids: np.ndarray
    obs: Any
    rewards: Any
    terminations: Any
    truncations: Any
    infos: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Reset:
    """A reset of envs ``env_ids``: ``rows`` is the row of each (one per env) in ``infos``; ``first`` for the
    reset that starts the rollout (it may return some envs only: ale-native's asynchronous mode)."""

    env_ids: np.ndarray
    rows: np.ndarray
    infos: dict[str, Any]
    first: bool


def rollout(
    envs: Any,
    act: Callable[[Any, np.ndarray], Any],
    on_result: Callable[[Result], Iterable[int]],
    stop: Callable[[], bool],
    *,
    seed: int | None = None,
    on_reset: Callable[[Reset], None] | None = None,
) -> None:
    """Reset ``envs`` with ``seed``, then step them until ``stop()`` is true.

    Args:
        envs: a vector env (any torchwm backend, a Gymnasium vector env, or one wrapped).
        act: ``act(obs, env_ids) -> actions``: the actions of the rows of envs ``env_ids``.
        on_result: takes each `Result` and returns the envs whose episode ended on it (reset here before
            they step again under ``autoreset_mode="disabled"``; ignored in the other modes).
        stop: asked before each step and before a reset of ended envs; true ends the rollout.
        seed: the seed of the first reset (Gymnasium's rule: env ``i`` gets ``seed + i``).
        on_reset: takes each `Reset` (the first, and each of ended envs under ``disabled``).
    """
    rows_per_env = agents_per_env(envs) or 1
    whole = batch_size_of(envs) >= envs.num_envs // rows_per_env
    loop = _step_whole if whole else _step_partial
    try:
        loop(envs, act, on_result, stop, seed, on_reset or (lambda reset: None), rows_per_env)
    except BaseException:
        _collect_after_error(envs)
        raise
    if not whole:
        _collect_in_flight(envs)


def _step_whole(
    envs: Any,
    act: Callable[[Any, np.ndarray], Any],
    on_result: Callable[[Result], Iterable[int]],
    stop: Callable[[], bool],
    seed: int | None,
    on_reset: Callable[[Reset], None],
    rows_per_env: int,
) -> None:
    """Every env steps at each step, so the policy always sees the whole batch in env order."""
    disabled = _autoreset_mode(envs) is AutoresetMode.DISABLED
    all_ids = np.arange(envs.num_envs // rows_per_env)
    obs, infos = envs.reset(seed=seed)
    on_reset(Reset(all_ids, all_ids, infos, first=True))
    while not stop():
        obs, rewards, terminations, truncations, infos = envs.step(act(obs, all_ids))
        ended = np.asarray(list(on_result(Result(all_ids, obs, rewards, terminations, truncations, infos))))
        if disabled and ended.size and not stop():
            mask = np.isin(all_ids, ended)
            # Over the agents layout the mask is over rows: all of an ended env's rows.
            obs, infos = envs.reset(options={"reset_mask": np.repeat(mask, rows_per_env)})
            ended = all_ids[mask]
            on_reset(Reset(ended, ended, infos, first=False))


def _step_partial(
    envs: Any,
    act: Callable[[Any, np.ndarray], Any],
    on_result: Callable[[Result], Iterable[int]],
    stop: Callable[[], bool],
    seed: int | None,
    on_reset: Callable[[Reset], None],
    rows_per_env: int,
) -> None:
    """``batch_size < num_envs``: the envs of each result are sent again at once; the policy sees their
    rows."""
    disabled = _autoreset_mode(envs) is AutoresetMode.DISABLED
    obs, infos = envs.reset(seed=seed)
    # A reset returns every env, except in an EnvPool-style asynchronous mode (ale-native's): the first
    # batch_size envs ready, with their env_id.
    ids = _env_ids(infos, rows_per_env) if "env_id" in infos else np.arange(envs.num_envs // rows_per_env)
    on_reset(Reset(ids, np.arange(ids.size), infos, first=True))
    while not stop():
        envs.send(act(obs, ids), env_ids=ids)
        obs, rewards, terminations, truncations, infos = envs.recv()
        ids = _env_ids(infos, rows_per_env)
        ended = np.asarray(list(on_result(Result(ids, obs, rewards, terminations, truncations, infos))))
        if disabled and ended.size and not stop():
            # Envs that ended must be reset before they step again; the others go on at once.
            is_ended = np.isin(ids, ended)
            going_on = np.flatnonzero(~is_ended)
            if going_on.size:
                rows = (going_on[:, None] * rows_per_env + np.arange(rows_per_env)).reshape(-1)
                envs.send(
                    act(take_rows(envs.single_observation_space, obs, rows), ids[going_on]), ids[going_on]
                )
            ids = ids[is_ended]
            obs, infos = envs.reset(env_ids=ids)
            on_reset(Reset(ids, np.arange(ids.size), infos, first=False))


def _collect_in_flight(envs: Any) -> None:
    """Receive the envs still stepping when the rollout stopped; their results are no one's. Each ``recv``
    collects at least one env: the envs in flight are collected within ``num_envs`` calls."""
    for _ in range(envs.num_envs):
        try:
            envs.recv()
        except gym.error.NoAsyncCallError:  # nothing in flight (any more)
            return


def _collect_after_error(envs: Any) -> None:
    """Receive what is still in flight after an error, within a deadline (the env's ``timeout`` where it has
    one, else `IN_FLIGHT_DEADLINE`), so that the env can be reset afterwards; gives up quietly, as the
    caller raises the error that brought it here. Each ``recv`` collects at least one env, or raises that
    env's error (which collects it too): the envs in flight are collected within ``num_envs`` calls."""
    recv = getattr(envs, "recv", None)
    if recv is None:  # a vector env without send/recv keeps nothing in flight between calls
        return
    timeout = getattr(envs, "timeout", None)
    deadline = time.monotonic() + (IN_FLIGHT_DEADLINE if timeout is None else timeout)
    try:
        takes_timeout = "timeout" in inspect.signature(recv).parameters
    except (TypeError, ValueError):
        takes_timeout = False
    for _ in range(envs.num_envs):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        try:
            recv(timeout=remaining) if takes_timeout else recv()
        except gym.error.NoAsyncCallError:  # nothing in flight (any more)
            return
        except TimeoutError:
            return
        except Exception:  # noqa: BLE001 - one env's error (it is collected), or a lost env: go on trying
            continue


def policy_actions(envs: Any, spec: Any, policy: Any) -> Callable[[Any, np.ndarray], Any]:
    """``act(obs, env_ids)`` for `torchwm.rollout`: the user's ``policy(obs, action_space)``, or a random
    sample. The whole batch gets the env's own action space; under ``batch_size < num_envs`` the rows of a
    result get an action space of as many rows, seeded with the spec's seed."""
    whole = batch_size_of(envs) >= spec.num_envs
    rows_per_env = agents_per_env(envs) or 1  # over the agents layout, a row per agent of each env
    spaces: dict[int, Any] = {}

    def act(obs: Any, env_ids: np.ndarray) -> Any:
        count = len(env_ids) * rows_per_env
        if whole:
            space = envs.action_space
        else:
            if count not in spaces:
                spaces[count] = batch_space(envs.single_action_space, count)
                spaces[count].seed(spec.seed)
            space = spaces[count]
        return policy(obs, space) if policy else space.sample()

    return act


def agents_per_env(envs: Any) -> int | None:
    """A for the ``agents`` layout of `torchwm.multiagent` (rows are the agents of envs), else None."""
    base = getattr(envs, "unwrapped", envs)
    agents = getattr(base, "num_agents_per_env", None)
    if isinstance(agents, int) and isinstance(getattr(base, "num_vector_envs", None), int):
        return agents
    return None


def batch_size_of(envs: Any) -> int:
    """How many envs a result holds: the env's ``batch_size`` (on it or on the env it wraps), else all."""
    size = getattr(envs, "batch_size", None) or getattr(getattr(envs, "unwrapped", envs), "batch_size", None)
    return int(size) if size else envs.num_envs // (agents_per_env(envs) or 1)


def _autoreset_mode(envs: Any) -> AutoresetMode:
    metadata = getattr(envs, "metadata", None) or {}
    return AutoresetMode(metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))


def _env_ids(infos: dict[str, Any], rows_per_env: int) -> np.ndarray:
    """The envs of a partial result: ``infos["env_id"]`` (over the agents layout, one per env, not per row);
    a torch tensor too (`torchwm.to_torch`)."""
    ids = infos["env_id"]
    if hasattr(ids, "detach") and hasattr(ids, "cpu"):
        ids = ids.detach().cpu().numpy()
    return np.asarray(ids, dtype=np.int64)[::rows_per_env]
