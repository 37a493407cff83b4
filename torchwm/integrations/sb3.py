"""`SB3VecEnv`: any torchwm vector env as a Stable-Baselines3 `VecEnv`.

SB3 does not take Gymnasium vector envs: its `VecEnv` has ``reset() -> obs``,
``step_async``/``step_wait`` returning ``(obs, rewards, dones, infos)`` with one info
dict per env, and resets an ended env in the same step, putting the last observation
in ``infos[i]["terminal_observation"]`` and ``"TimeLimit.truncated"`` in every info, as
its `DummyVecEnv` does. A torchwm env made with ``autoreset_mode="same_step"`` resets in
the same step too, so the adapter only reshapes what it returns: the ended envs' infos
are their final step's (``final_info``, with the ``episode`` an ``episode_statistics``
wrapper records, which SB3's logger reads), and the new episode's reset infos go to
``reset_infos``, where `DummyVecEnv` keeps them. Seeds given to `seed` and options given
to `set_options` (one dict for all, or one per env) are used by the next `reset`, as in
SB3. SB3 passes Dict and Tuple actions as one action per env: they are stacked into the
batched dict/tuple a Gymnasium vector env takes. ``indices`` of `env_method`,
`get_attr` and `set_attr` (an int, a list, negative ones too, as SB3 allows) become the
``env_ids`` of torchwm's `call`, `get_attr` and `set_attr`, which reach those envs only; as
`DummyVecEnv`, an empty list reaches none and an env named twice is reached twice.

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

import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array, iterate
from gymnasium.wrappers import RecordEpisodeStatistics

from torchwm.integrations import check_full_batch
from torchwm.spec import parse_autoreset_mode
from torchwm.vector.base import VectorEnv
from torchwm.vector.batching import get_row, infos_to_rows

try:
    from stable_baselines3.common.env_util import is_wrapped
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import VecEnv
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn
except ImportError as exc:
    from torchwm.extras import missing_extra

    raise missing_extra("sb3", "torchwm.integrations.sb3") from exc


def autoreset_mode_name(mode: Any) -> Any:
    """A vector env's autoreset mode in torchwm's spelling (``"next_step"``, the word `make_vec` takes), not
    Gymnasium's enum value (``"NextStep"``); what no spelling knows as it came."""
    try:
        return parse_autoreset_mode(mode)
    except ValueError:
        return mode


class SB3VecEnv(VecEnv):
    """A torchwm vector env (``autoreset_mode="same_step"``) as a Stable-Baselines3 `VecEnv`.

    Args:
        vec: the env, from `torchwm.make_vec` (any backend) with ``autoreset_mode="same_step"``, or
            `torchwm.multiagent.make_vec`'s agents layout (SuperSuit's ``concat_vec_envs_v1(...,
            base_class="stable_baselines3")``): SB3's envs are then its rows (agents), while seeds,
            options, ``get_attr``/``set_attr``/``env_method``/``env_is_wrapped`` and ``render`` reach the
            PettingZoo env of each row (one answer per row, one frame per PettingZoo env).
            Closing the adapter closes it.

    Raises:
        ValueError: ``vec`` resets ended envs in another mode: SB3's learners read the step that
            ends an episode and the first observation of the next one together. Or ``vec`` returns
            fewer envs per step than it has (``batch_size < num_envs``): SB3 steps every env each step.
    """

    def __init__(self, vec: VectorEnv) -> None:
        mode = vec.metadata.get("autoreset_mode")
        if mode is not gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError(
                f"SB3VecEnv needs a vector env that resets ended envs in the same step, as SB3's own do, got "
                f"one with autoreset_mode={autoreset_mode_name(mode)!r}: pass autoreset_mode='same_step' to "
                f'torchwm.make_vec (or make_vec_from_fns, or autoreset_mode = "same_step" in a config file)'
            )
        check_full_batch(vec, "SB3VecEnv")
        self.vec = vec
        # torchwm.multiagent's agents layout: SB3's envs are its rows, A per PettingZoo env, while seeds,
        # options and calls reach the PettingZoo envs (torchwm's env_ids).
        self._rows_per_env = int(getattr(vec.unwrapped, "num_agents_per_env", 1))
        self._first_reset = True
        super().__init__(vec.num_envs, vec.single_observation_space, vec.single_action_space)

    def reset(self, seed: int | None = None, options: dict | None = None) -> VecEnvObs:
        """SB3's reset (the seeds of `seed`, the options of `set_options`); ``seed`` and ``options`` are
        SuperSuit's SB3 wrapper's, the same as calling `seed` and `set_options` first."""
        if seed is not None:
            self.seed(seed)
        if options is not None:
            self.set_options(options)
        a = self._rows_per_env
        num_envs = self.num_envs // a
        given = [None if s is None else int(s) for s in self._seeds[::a]]  # one per PettingZoo env
        groups = self._option_groups()
        first_seed = getattr(self.vec.spec, "seed", None)
        if len(groups) > 1 and self._first_reset and all(s is None for s in given) and first_seed is not None:
            # The torchwm env's own first reset would use make_vec(seed=...) for every env: kept when the
            # envs are reset in groups below, where only the first group's reset would see it.
            given = [first_seed + i for i in range(num_envs)]
        if len(groups) == 1:
            options = groups[0][0]
            obs, infos = self.vec.reset(
                seed=None if all(s is None for s in given) else given, options=options or None
            )
            self.reset_infos = infos_to_rows(infos, self.num_envs)
        else:
            # DummyVecEnv resets each env with its own options; a torchwm reset gives one options dict to the
            # envs it resets, so the envs are reset in groups of equal options (env_ids), and their rows put
            # together.
            space = self.vec.single_observation_space
            rows: list[Any] = [None] * self.num_envs
            self.reset_infos = [{} for _ in range(self.num_envs)]
            for options, ids in groups:
                seeds = [given[i] for i in ids]
                group_obs, infos = self.vec.reset(
                    seed=None if all(s is None for s in seeds) else seeds,
                    options=options or None,
                    env_ids=ids,
                )
                infos.pop("env_id", None)
                row_ids = [i * a + k for i in ids for k in range(a)]
                for i, row, info in zip(
                    row_ids, iterate(space, group_obs), infos_to_rows(infos, len(row_ids)), strict=True
                ):
                    rows[i], self.reset_infos[i] = row, info
            batch: Any = create_empty_array(space, self.num_envs)
            obs = concatenate(space, rows, batch)
        self._first_reset = False
        self._reset_seeds()
        self._reset_options()
        return obs

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """SB3's ``seed``: the next reset seeds env ``i`` with ``seed + i``. In an agents layout ``i`` counts
        PettingZoo envs, as ``make_vec(seed=...)`` and SuperSuit seed them: the rows of env ``i`` all
        report ``seed + i``."""
        seeds = super().seed(seed)
        a = self._rows_per_env
        if a > 1:
            self._seeds = [int(seeds[0]) + i // a for i in range(self.num_envs)]  # type: ignore[arg-type]
        return self._seeds

    def _option_groups(self) -> list[tuple[dict, list[int]]]:
        """The envs that have the same options (`set_options`), as (options, env ids), in env order.

        In an agents layout the rows of one PettingZoo env are reset together: their options must agree
        (ValueError, before any env is reset)."""
        a = self._rows_per_env
        for i in range(0, self.num_envs, a):
            if not all(_equal(self._options[i], self._options[i + k]) for k in range(1, a)):
                raise ValueError(
                    f"rows {i}..{i + a - 1} are the agents of PettingZoo env {i // a}, reset together, so "
                    f"set_options must give them one options dict, got {self._options[i : i + a]!r:.200}"
                )
        groups: list[tuple[dict, list[int]]] = []
        for i, options in enumerate(self._options[::a]):
            for group_options, ids in groups:
                if _equal(group_options, options):
                    ids.append(i)
                    break
            else:
                groups.append((options, [i]))
        return groups

    def step_async(self, actions: Any) -> None:
        # Kept for step_wait, which SB3 calls right after: as DummyVecEnv does, and any Gymnasium vector env
        # (a wrapped one too) has step.
        space = self.vec.single_action_space
        if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) and not isinstance(actions, dict):
            # SB3 gives one action per env (actions[i], as DummyVecEnv reads them); a Gymnasium vector env
            # takes one dict/tuple of batched arrays.
            if len(actions) != self.num_envs:
                raise ValueError(
                    f"SB3VecEnv.step_async expected {self.num_envs} actions, one per env, got "
                    f"{len(actions)}: {actions!r:.200}"
                )
            batch: Any = create_empty_array(space, self.num_envs)
            actions = concatenate(space, list(actions), batch)
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminations, truncations, infos = self.vec.step(self._actions)
        dones = terminations | truncations
        final_infos = infos_to_rows(infos.get("final_info", {}), self.num_envs)
        final_obs, has_final_obs = infos.get("final_obs"), infos.get("_final_obs")
        current = infos_to_rows({k: v for k, v in infos.items() if k not in _SAME_STEP_KEYS}, self.num_envs)
        step_infos = []
        for i in range(self.num_envs):
            if dones[i]:
                if final_obs is not None and (has_final_obs is None or has_final_obs[i]):
                    terminal = final_obs[i]
                else:
                    # An env that ended without a final observation (a vector wrapper that drops it): SB3's
                    # learners read terminal_observation of every ended env (to bootstrap a truncated
                    # episode), so it gets the only observation there is, the new episode's, rather than
                    # stopping the run with a KeyError.
                    terminal = get_row(self.vec.single_observation_space, obs, i)
                # DummyVecEnv's order: the ended step's infos, its observation, and the reset's infos aside.
                info = {**final_infos[i], "terminal_observation": terminal}
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
        return self._on_envs(indices, lambda env_ids: self.vec.get_attr(attr_name, **env_ids))

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        def set_on(env_ids: dict[str, list[int]]) -> list[None]:
            count = len(env_ids.get("env_ids", range(self.num_envs // self._rows_per_env)))
            # One value per env, so that a list or tuple value is set whole, as SB3 sets it.
            self.vec.set_attr(attr_name, [value] * count, **env_ids)
            return [None] * count

        self._on_envs(indices, set_on)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        return self._on_envs(
            indices, lambda env_ids: self.vec.call(method_name, *method_args, **env_ids, **method_kwargs)
        )

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        """SB3's own test (isinstance along the wrapper chain), run where each env lives.

        Asked about SB3's ``Monitor`` itself, an env that records its episodes as ``Monitor`` does
        (``episode_statistics``) is one, as SB3's ``evaluate_policy`` and ``VecMonitor`` ask: whether
        the ``episode`` infos (return ``r``, length ``l`` at the episode's real end) are there to read.
        """
        test = _records_episodes_as_monitor if wrapper_class is Monitor else is_wrapped
        # torchwm's call takes a function as well as a method name.
        return self._on_envs(indices, lambda env_ids: self.vec.call(test, wrapper_class, **env_ids))

    def _on_envs(
        self, indices: VecEnvIndices, run: Callable[[dict[str, list[int]]], Sequence[Any]]
    ) -> list[Any]:
        """``run(env_ids)``'s answers for SB3's ``indices``, one per index, as `DummyVecEnv` gives them.

        ``run`` gets torchwm's ``env_ids`` keyword (none for every env, so that a Gymnasium vector
        wrapper's ``get_attr(name)`` takes it too). Negative indices count from the end, as in SB3; an
        index out of range is an `IndexError`, as `DummyVecEnv`'s list of envs raises, before any env is
        reached. torchwm refuses an empty ``env_ids`` and repeated ids, which `DummyVecEnv` takes (it
        loops over its envs): empty ``indices`` call nothing, and an env named k times is reached k
        times, in rounds of distinct envs, so that each env sees its calls in the order of ``indices``.
        """
        a = self._rows_per_env
        if indices is None:
            # In an agents layout each PettingZoo env answers once, for each of its rows.
            return [answer for answer in run({}) for _ in range(a)]
        # operator.index, as a list index: a float index is a TypeError, as in DummyVecEnv.
        given = [operator.index(i) for i in self._get_indices(indices)]
        outside = [i for i in given if not -self.num_envs <= i < self.num_envs]
        if outside:
            # DummyVecEnv and SubprocVecEnv index their list of envs: IndexError, before any env is reached.
            raise IndexError(
                f"env indices {outside} out of range for {self.num_envs} envs "
                f"(from {-self.num_envs} to {self.num_envs - 1}), in indices={indices!r}"
            )
        rows = [i + self.num_envs if i < 0 else i for i in given]
        rounds: list[list[int]] = []  # positions in rows, each round naming a row once
        times: dict[int, int] = {}
        for position, row in enumerate(rows):
            k = times[row] = times.get(row, -1) + 1
            if k == len(rounds):
                rounds.append([])
            rounds[k].append(position)
        answers: list[Any] = [None] * len(rows)
        for positions in rounds:
            # Rows of one PettingZoo env (an agents layout) in a round reach it once and share its answer.
            env_ids = list(dict.fromkeys(rows[p] // a for p in positions))
            by_env = dict(zip(env_ids, run({"env_ids": env_ids}), strict=True))
            for position in positions:
                answers[position] = by_env[rows[position] // a]
        return answers


def _records_episodes_as_monitor(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> bool:
    """Whether ``env`` is wrapped in ``wrapper_class`` (SB3's ``Monitor``) or records its episodes as it does.

    ``episode_statistics`` is Gymnasium's ``RecordEpisodeStatistics`` (``info["episode"]`` with ``r``,
    ``l`` and ``t`` when an episode really ends, placed on the env as made, where SB3 puts
    ``Monitor``); the fused Atari env records the same numbers itself.
    """
    if is_wrapped(env, wrapper_class) or is_wrapped(env, RecordEpisodeStatistics):
        return True
    # Not imported here (it loads cv2): the module is loaded wherever a fused env was built.
    fused = sys.modules.get("torchwm.wrappers.atari_fused")
    # The fused env has RecordEpisodeStatistics's queues when its stack records episodes.
    return (
        fused is not None
        and isinstance(env.unwrapped, fused.FusedAtariEnv)
        and hasattr(env.unwrapped, "return_queue")
    )


# The keys a same_step step adds for the envs that ended (their final step's): not the new episode's infos.
_SAME_STEP_KEYS = frozenset({"final_obs", "_final_obs", "final_info", "_final_info"})


def _equal(a: dict, b: dict) -> bool:
    """Whether two options dicts are equal (dicts holding arrays compare unequal unless they are the same)."""
    try:
        return a is b or bool(a == b)
    except (ValueError, TypeError):
        return False
