"""Evaluate a policy over exactly ``n_episodes`` episodes of a vector env, without bias: `evaluate`.

Each env's share of the episodes is fixed before the first step, as Stable-Baselines3's
``evaluate_policy`` fixes it (env ``i`` runs ``(n_episodes + i) // num_envs`` of them, SB3 issue #402):
counting the first ``n_episodes`` episodes to end would over-weight the envs whose episodes are short.
Episodes an env ends beyond its share are not counted. It works on any Gymnasium vector env and on every
torchwm backend, in each autoreset mode: under ``next_step`` the reset step after an episode end is not
counted (its reward is 0 and it is no step of either episode), under ``disabled`` the ended envs are reset
before they step again. It steps through `torchwm.rollout`, as ``torchwm run`` and ``torchwm record`` do:
with ``batch_size < num_envs`` (results of some envs only, ``infos["env_id"]``) EnvPool's way, the envs of
each result sent again at once, the policy seeing their rows only, and the envs still in flight collected
at the end or after an error.

Over the ``agents`` layout of `torchwm.multiagent` (rows are the agents of N PettingZoo envs, env-major),
the unit is the PettingZoo env: its episode is one episode, ended when all its rows end (as the layout
ends them together), the quotas are over the N envs, and each episode's return per agent is kept
(``agent_returns``), its ``returns`` being their sum; the policy sees every agent's row.

``torchwm.evaluate(envs, policy, n_episodes)`` is the way in (this module's `evaluate`, imported by the
package on first use); the result is an `EvaluationResult`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.rollout import Reset, Result, agents_per_env, rollout
from torchwm.spec import check_seed
from torchwm.vector.episode_seeds import EPISODE_SEED

# The info key of the rows whose worker was restarted (torchwm's process backends, ``restart_on_crash``).
WORKER_RESTARTED = "worker_restarted"


@dataclasses.dataclass(frozen=True, eq=False)
class EvaluationResult:
    """The episodes `evaluate` counted, in the order they ended.

    Attributes:
        returns: each episode's sum of rewards (float64), as the env returned them (after the stack's
            reward wrappers, such as ``clip_reward``); over the ``agents`` layout, the sum over its agents.
        lengths: each episode's number of steps (int64), the reset step of ``next_step`` not counted.
        env_ids: the env each episode ran in (int64); over the ``agents`` layout, the PettingZoo env.
        seeds: the seed each episode started from, where it is known: the seed its reset reported in
            ``infos["episode_seed"]`` (every episode of a torchwm env made with ``autoreset_seeds=True``);
            else ``seed + i`` for the first episode of env ``i`` when `evaluate` was given ``seed=``; None
            for the others (an autoreset draws no seed of its own).
        cut_episodes: how many episodes of the envs' shares a worker restart cut (``restart_on_crash``,
            ``infos["worker_restarted"]``): not counted, as the env did not end them; their envs ran others
            in their place.
        agent_returns: over the ``agents`` layout of `torchwm.multiagent`, each episode's return per
            agent, float64 ``(n_episodes, A)``, columns in ``envs.possible_agents`` order (an agent that
            died early keeps what it earned); None for single-agent envs.
    """

    returns: np.ndarray
    lengths: np.ndarray
    env_ids: np.ndarray
    seeds: tuple[int | None, ...]
    cut_episodes: int = 0
    agent_returns: np.ndarray | None = None

    @property
    def mean(self) -> float:
        """The mean return."""
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        """The standard deviation of the returns (NumPy's, ``ddof=0``, as SB3's ``evaluate_policy``)."""
        return float(np.std(self.returns))

    def __len__(self) -> int:
        return len(self.returns)

    def __str__(self) -> str:
        n = len(self.returns)
        cut = f" ({self.cut_episodes} more cut by a worker restart, not counted)" if self.cut_episodes else ""
        return (
            f"{n} episode{'s' if n != 1 else ''}: return {self.mean:.2f} ± {self.std:.2f}, "
            f"length {np.mean(self.lengths):.1f} ± {np.std(self.lengths):.1f}{cut}"
        )


def evaluate(
    envs: Any,
    policy: Callable[..., Any],
    n_episodes: int,
    *,
    seed: int | None = None,
    deterministic: bool | None = None,
    progress: bool = False,
) -> EvaluationResult:
    """Run ``policy(obs) -> actions`` on ``envs`` until exactly ``n_episodes`` episodes were counted.

    Args:
        envs: a vector env (any torchwm backend, a Gymnasium vector env, or one wrapped, as by
            ``torchwm.to_torch``). It is reset first and left as the last step left it.
        policy: takes the observations of a batch (all envs, or the rows of a partial result) and
            returns their actions: a NumPy array, a torch tensor (moved to the host) or anything the
            env's ``step`` takes. An SB3 model: ``lambda obs: model.predict(obs, deterministic=True)[0]``.
        n_episodes: how many episodes to count (an int >= 1); env ``i`` runs
            ``(n_episodes + i) // num_envs`` of them, as SB3's ``evaluate_policy`` (over the ``agents``
            layout: PettingZoo env ``i`` of ``num_vector_envs``).
        seed: the seed of the first reset (env ``i`` gets ``seed + i``, Gymnasium's rule); None: the
            env's own (``make_vec(seed=...)`` for a torchwm env never reset).
        deterministic: passed to the policy as ``policy(obs, deterministic=...)`` when given; the
            policy must then take that keyword. None (default): the policy is called with ``obs`` only.
            Over the ``agents`` layout, ``obs`` holds every agent's row of the envs stepped, and the
            policy gives one action per row.
        progress: show a tqdm progress bar of the episodes counted.

    Returns:
        An `EvaluationResult`: ``returns``, ``lengths``, ``env_ids``, ``seeds``, ``mean``, ``std``.

    Example:
        >>> import numpy as np, torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, seed=0)
        >>> result = torchwm.evaluate(envs, lambda obs: np.zeros(len(obs), dtype=np.int64), n_episodes=6)
        >>> result.env_ids.tolist().count(3), len(result.returns)
        (2, 6)
        >>> envs.close()
    """
    rows = _check_envs(envs)
    agents = agents_per_env(envs)
    num_envs = rows // (agents or 1)
    n_episodes = _check_count(n_episodes)
    act = _check_policy(policy, deterministic, envs.single_action_space)
    if seed is not None:
        seed = check_seed(seed)
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True or False, got {progress!r}")
    mode = AutoresetMode(envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    tally = _Tally(num_envs, agents, n_episodes, seed, mode, progress)
    try:
        # Every env steps until the quotas are met, as in SB3 (envs past their quota too: their episodes
        # are not counted).
        rollout(
            envs,
            lambda obs, env_ids: act(obs),
            tally.add,
            lambda: tally.done,
            seed=seed,
            on_reset=tally.started,
        )
    finally:
        tally.close()
    return tally.result()


class _Tally:
    """Each env's running episode, its seed and quota, and the episodes counted so far."""

    def __init__(
        self,
        num_envs: int,
        agents: int | None,
        n_episodes: int,
        seed: int | None,
        mode: AutoresetMode,
        progress: bool,
    ) -> None:
        self.mode = mode
        self.per_agent = agents is not None  # the agents layout: returns kept per agent
        self.agents = agents or 1  # rows per env
        self.targets = np.array([(n_episodes + i) // num_envs for i in range(num_envs)], dtype=np.int64)
        self.ended = np.zeros(num_envs, dtype=np.int64)  # episodes each env ended, counted or not
        self.running_return = np.zeros((num_envs, self.agents), dtype=np.float64)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        # next_step: the env's next result is the reset step after its episode's end.
        self.resetting = np.zeros(num_envs, dtype=np.bool_)
        # The seed of each env's running episode, where known: Gymnasium's seed + i for the first, until the
        # first reset's infos say otherwise.
        self.seeds: list[int | None] = [None if seed is None else seed + i for i in range(num_envs)]
        self.cut_episodes = 0
        self.episodes: list[tuple[np.ndarray, int, int, int | None]] = []
        self.bar: Any = None
        if progress:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=n_episodes, unit="episode", desc="evaluate")

    @property
    def done(self) -> bool:
        return bool((self.ended >= self.targets).all())

    def started(self, reset: Reset) -> None:
        """A reset: its envs' episodes' seeds, as the reset reported them (``episode_seed``); else, for the
        first reset, the seed already known, and None for the others (a reset without a seed draws none of
        its own). The envs a first reset did not return (an EnvPool-style asynchronous mode, ale-native's)
        have their reset as their first result, which is no step."""
        # An env's keys are on each of its agents' rows: its first row's.
        drawn = _info_column(reset.infos, EPISODE_SEED, reset.rows * self.agents)
        for i, seed in zip(reset.env_ids.tolist(), drawn, strict=True):
            if seed is not None or not reset.first:
                self.seeds[i] = seed
        if reset.first:
            self.resetting[np.setdiff1d(np.arange(self.targets.size), reset.env_ids)] = True

    def add(self, result: Result) -> list[int]:
        """The results of envs ``result.env_ids`` (one row each, or A: its agents'); returns the envs whose
        episode ended, or was cut."""
        a, ids, infos = self.agents, result.env_ids, result.infos
        rewards = np.asarray(_to_numpy(result.rewards), dtype=np.float64).reshape(len(ids), a)
        # An env's episode ends when all its rows end (the agents layout ends them together; a dead
        # agent's row ends earlier).
        row_ends = np.asarray(_to_numpy(result.terminations), dtype=np.bool_) | np.asarray(
            _to_numpy(result.truncations), dtype=np.bool_
        )
        ends = np.asarray(np.asarray(row_ends).reshape(len(ids), a).all(axis=1))
        first_rows = np.arange(len(ids)) * a
        restarted = _info_column(infos, WORKER_RESTARTED, first_rows)
        drawn = _info_column(infos, EPISODE_SEED, first_rows)
        ended = []
        for row, i in enumerate(ids.tolist()):
            if restarted[row]:
                # A worker restart cut the env's episode: this row's action never ran, and the env did not end
                # the episode, so it is not counted (SB3 counts what its Monitor reports, episodes the env
                # ended); the env runs another in its place. An env waiting for its next_step reset step has
                # no episode to cut. The row reports an end as an ended env's does, and is handled as one:
                # reset under disabled, its reset step next under next_step.
                if not self.resetting[i] and self.ended[i] < self.targets[i]:
                    self.cut_episodes += 1
                self._next_episode(i, drawn[row])
                ended.append(i)
                continue
            if self.resetting[i]:
                self.resetting[i] = False
                if drawn[row] is not None:  # the autoreset's seed, or the first reset of an asynchronous env
                    self.seeds[i] = drawn[row]
                continue
            self.running_return[i] += rewards[row]
            self.running_length[i] += 1
            if ends[row]:
                if self.ended[i] < self.targets[i]:
                    self.episodes.append(
                        (self.running_return[i].copy(), int(self.running_length[i]), i, self.seeds[i])
                    )
                    if self.bar is not None:
                        self.bar.update(1)
                self.ended[i] += 1
                # same_step: this row's infos are the next episode's reset's, its seed among them.
                self._next_episode(i, drawn[row])
                ended.append(i)
        return ended

    def _next_episode(self, i: int, seed: int | None) -> None:
        self.running_return[i], self.running_length[i] = 0.0, 0
        self.resetting[i] = self.mode is AutoresetMode.NEXT_STEP
        self.seeds[i] = seed

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def result(self) -> EvaluationResult:
        returns, lengths, env_ids, seeds = zip(*self.episodes, strict=True) if self.episodes else ((),) * 4
        per_agent = np.array(returns, dtype=np.float64).reshape(len(self.episodes), self.agents)
        return EvaluationResult(
            returns=per_agent.sum(axis=1),
            lengths=np.array(lengths, dtype=np.int64),
            env_ids=np.array(env_ids, dtype=np.int64),
            seeds=tuple(seeds),
            cut_episodes=self.cut_episodes,
            agent_returns=per_agent if self.per_agent else None,
        )


def _info_column(infos: Mapping[str, Any], key: str, rows: np.ndarray) -> list[Any]:
    """The values of info ``key`` in ``rows``; None where a row has none (its ``_key`` mask) or the infos
    lack the key."""
    values = infos.get(key)
    if values is None:
        return [None] * len(rows)
    values = np.asarray(_to_numpy(values))
    mask = infos.get(f"_{key}")
    present = None if mask is None else np.asarray(_to_numpy(mask), dtype=np.bool_)
    # .item(): NumPy scalars as Python's (an object array's values already are).
    return [
        (values[row].item() if hasattr(values[row], "item") else values[row])
        if present is None or present[row]
        else None
        for row in rows.tolist()
    ]


def _check_envs(envs: Any) -> int:
    if not isinstance(envs, gym.vector.VectorEnv) and hasattr(envs, "possible_agents"):
        raise TypeError(
            f"envs must be a vector env of rows; {type(envs).__name__} gives dicts by agent: evaluate the "
            f'agents layout, torchwm.multiagent.make_vec(..., layout="agents"), whose result has '
            f"per-agent returns"
        )
    if not isinstance(envs, gym.vector.VectorEnv):
        hint = (
            "; for one gymnasium.Env, use torchwm.make_vec(id, num_envs=...) or "
            "gymnasium.vector.SyncVectorEnv([lambda: env])"
            if isinstance(envs, gym.Env)
            else ""
        )
        raise TypeError(
            f"envs must be a vector env (a gymnasium.vector.VectorEnv, as every torchwm backend is), "
            f"got {type(envs).__name__}{hint}"
        )
    return int(envs.num_envs)


def _check_count(n_episodes: Any) -> int:
    if isinstance(n_episodes, (bool, np.bool_)) or not isinstance(n_episodes, (int, np.integer)):
        raise TypeError(f"n_episodes must be an int >= 1, got {n_episodes!r} ({type(n_episodes).__name__})")
    if n_episodes < 1:
        raise ValueError(f"n_episodes must be an int >= 1, got {n_episodes}")
    return int(n_episodes)


def _check_policy(policy: Any, deterministic: bool | None, space: gym.Space) -> Callable[[Any], Any]:
    """The call of the policy `evaluate` makes: ``policy(obs)`` or ``policy(obs, deterministic=...)``,
    its actions as NumPy arrays."""
    if not callable(policy):
        hint = (
            ": for an SB3 model, pass lambda obs: model.predict(obs, deterministic=True)[0]"
            if hasattr(policy, "predict")
            else ""
        )
        raise TypeError(
            f"policy must be callable as policy(obs) -> actions, got {type(policy).__name__}{hint}"
        )
    if deterministic is None:
        return lambda obs: _actions(policy(obs), space)
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be True, False or None, got {deterministic!r}")
    try:
        parameters = inspect.signature(policy).parameters.values()
    except (TypeError, ValueError):  # no signature to read (some builtins): the call will tell
        parameters = None
    if parameters is not None and not any(
        p.name == "deterministic"
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        or p.kind is p.VAR_KEYWORD
        for p in parameters
    ):
        raise TypeError(
            f"deterministic={deterministic} is passed as policy(obs, deterministic=...), and policy "
            f"{getattr(policy, '__name__', type(policy).__name__)} takes no keyword 'deterministic'; "
            f"give the policy that keyword, or leave deterministic=None"
        )
    return lambda obs: _actions(policy(obs, deterministic=deterministic), space)


def _actions(actions: Any, space: gym.Space) -> Any:
    if isinstance(actions, tuple) and not isinstance(space, gym.spaces.Tuple):
        raise TypeError(
            f"policy returned a tuple of {len(actions)} values where actions for {space} were expected; "
            f"an SB3 model's predict returns (actions, states): use lambda obs: model.predict(obs)[0]"
        )
    return _to_numpy(actions)


def _to_numpy(value: Any) -> Any:
    """Tensors (in dicts and tuples too) as NumPy arrays on the host; other values unchanged. Without
    importing torch: `evaluate` does not need it."""
    if hasattr(value, "detach") and hasattr(value, "cpu") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    if isinstance(value, Mapping):
        return {key: _to_numpy(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_to_numpy(item) for item in value)
    return value
