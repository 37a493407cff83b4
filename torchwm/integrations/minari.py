"""`VectorDataCollector`: record a vector env's episodes to a Minari dataset, as `minari.DataCollector`
records one env's.

Minari's `DataCollector` wraps one `gym.Env`; this wrapper takes any vector env (every torchwm backend,
every autoreset mode, ``batch_size`` partial steps, Gymnasium's own vector envs) and keeps one episode
buffer per env. Each recorded episode is one env's whole episode: ``observations`` (T+1 rows, the first
the reset's, the last the final observation), ``actions``, ``rewards``, ``terminations`` and
``truncations`` (T rows), and with ``record_infos=True`` the infos (T+1). Episodes are stored in the
order they end. An episode that does not end, cut by a `reset` or `restore_state`, or still running at
`create_dataset`, is left out (Minari's single-env collector keeps such an episode, marked truncated:
in a vector env every `create_dataset` would cut ``num_envs`` of them, with truncations the env never
gave); an episode running at `create_dataset` that ends later goes to the next dataset.

Each episode's seed is in its metadata (``dataset.storage.get_episode_metadata([i])``'s ``"seed"``): as
Minari's collector gives every episode a seed, this one turns on the vector env's seeded autoresets
(``envs.autoreset_seeds = True``, ``infos["episode_seed"]``), so every episode from its first reset on
has the seed that replays it. A vector env that cannot seed autoresets (``ale-native``, ``envpool``,
Gymnasium's own) is recorded with a warning: only each env's first episode has a seed there.
Rewards are stored with the dtype Minari's collector gives them, ``np.asarray`` of the env's own (Python
ints: int64), not the vector env's float64: the collector learns the env's reward type from one step of
one env of the stack, built apart (`_env_reward_dtype`), so that Minari's own episodes of the env add to
the dataset. Frames are stored lossless (``jpeg_encoding=False``, where Minari's default JPEG-encodes
uint8 images), the torchwm `VecSpec` goes to the dataset's metadata (``"torchwm_spec"``), and
`make_vec_from_dataset` builds the same stack again. Arrays are built here with NumPy (Minari's
``EpisodeBuffer.add_step_data`` needs jax) and written through `minari.create_dataset_from_buffers`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import mmap
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec
from gymnasium.vector import AutoresetMode

from torchwm.errors import UnsupportedStackError
from torchwm.spec import VecSpec
from torchwm.vector.base import VectorEnv as TorchwmVectorEnv
from torchwm.vector.batching import ARRAY_SPACES, get_row, infos_to_rows

try:
    import h5py  # noqa: F401  (Minari's default storage; its own error names another install)
    import minari
    from minari.data_collector import EpisodeBuffer
    from minari.data_collector.callbacks import EpisodeMetadataCallback, StepDataCallback
    from minari.storage.datasets_root_dir import get_dataset_path
    from minari.utils import RandomPolicy, get_average_reference_score
except ImportError as exc:
    from torchwm.extras import missing_extra

    raise missing_extra("minari", "torchwm.integrations.minari") from exc

__all__ = ["VectorDataCollector", "dataset_spec", "make_vec_from_dataset", "recorded_env"]

SPEC_KEY = "torchwm_spec"
# Keys of a step's infos that are the vector env's, not the env's own.
_VECTOR_INFO_KEYS = ("env_id", "final_obs", "final_info", "episode_seed")


def _new_array(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An empty array in memory new to the process, its pages mapped in one call (``MAP_POPULATE``): a
    frame written page by page into new memory pays a page fault per page, about twice as much on a
    virtual machine (docs/performance.md, "Recording episodes")."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if nbytes < (1 << 20) or not populate:
        return np.empty(shape, dtype)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    return np.frombuffer(memory, dtype=dtype).reshape(shape)


class _Rows:
    """One space's rows of one env's episodes, appended a row at a time: a growing array for an array
    space (one copy per row, no allocation per step), else a list of copies. Each env keeps one for all
    its episodes (`clear` starts the next): memory touched once is written again, where a new array per
    episode costs a page fault for every page of every frame, several times a frame's copy.
    """

    __slots__ = ("array", "items", "n", "space")

    def __init__(self, space: gym.Space, capacity: int = 64) -> None:
        self.space = space
        self.n = 0
        self.array: np.ndarray | None = None
        self.items: list[Any] = []
        if isinstance(space, ARRAY_SPACES):
            self.array = _new_array((capacity, *(space.shape or ())), space.dtype)

    def append(self, value: Any) -> None:
        array = self.array
        if array is None:
            self.items.append(copy.deepcopy(value))
            return
        if self.n == len(array):
            grown = _new_array((2 * len(array), *array.shape[1:]), array.dtype)
            grown[: self.n] = array
            self.array = array = grown
        array[self.n] = value
        self.n += 1

    def stacked(self) -> Any:
        if self.array is not None:
            kept = _new_array(self.array[: self.n].shape, self.array.dtype)
            kept[...] = self.array[: self.n]
            return kept
        return _stack(self.space, self.items)

    def clear(self) -> None:
        self.n = 0
        self.items = []


def _stack(space: gym.Space, rows: list[Any]) -> Any:
    """Rows of ``space`` as Minari stores them: a dict (tuple) of arrays for a Dict (Tuple) space."""
    if isinstance(space, spaces.Dict):
        return {key: _stack(sub, [row[key] for row in rows]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_stack(sub, [row[i] for row in rows]) for i, sub in enumerate(space.spaces))
    if isinstance(space, ARRAY_SPACES):
        return np.stack([np.asarray(row, dtype=space.dtype) for row in rows])
    return list(rows)


def _stack_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """A list of one episode's infos as Minari stores them: for each key every info has, its values
    stacked (nested dicts likewise)."""
    keys = [k for k in infos[0] if all(k in info for info in infos[1:])]
    out: dict[str, Any] = {}
    for key in keys:
        values = [info[key] for info in infos]
        if all(isinstance(v, dict) for v in values):
            out[key] = _stack_infos(values)
        elif not any(isinstance(v, dict) for v in values):
            try:
                out[key] = np.stack([np.asarray(v) for v in values])
            except ValueError:  # rows of different shapes: not an array Minari can store
                continue
    return out


class _Episode:
    """One env's episode while it runs."""

    __slots__ = (
        "actions",
        "info_keys",
        "infos",
        "observations",
        "options",
        "rewards",
        "seed",
        "terminations",
        "truncations",
    )

    def __init__(
        self, rows: tuple[_Rows, _Rows], first_obs: Any, seed: Any, info: Any, options: Any = None
    ) -> None:
        self.seed = None if seed is None else int(seed)
        self.options = options  # the reset's options (an autoreset has none), kept as Minari keeps them
        self.observations, self.actions = rows  # the env's own, cleared for this episode
        self.observations.clear()
        self.actions.clear()
        self.observations.append(first_obs)
        self.rewards: list[Any] = []  # the env's own type (`_env_reward`)
        self.terminations: list[bool] = []
        self.truncations: list[bool] = []
        self.infos: list[dict[str, Any]] | None = None if info is None else [info]
        self.info_keys = None if info is None else _info_keys(info)  # every step's infos must have them


class VectorDataCollector(gym.vector.VectorWrapper):
    """A vector env that records each env's episodes for a Minari dataset, as `minari.DataCollector`
    records one env's.

    It passes `reset`, `step`, `send`, `recv` (and every other attribute) through to ``envs`` and
    returns what ``envs`` returns.

    Args:
        envs: the vector env, any backend and autoreset mode. Its seeded autoresets are turned on
            (``envs.autoreset_seeds = True``, from its next reset), so that every episode has the seed that
            replays it, whatever options it was made with; one that cannot seed them is recorded with a
            `UserWarning` (only each env's first episode has a seed).
        record_infos: store each step's infos, as Minari's ``record_infos``: an episode's infos must keep
            the same keys (`step` raises `ValueError` otherwise, as Minari's collector does).
        observation_space, action_space, data_format: as `minari.DataCollector`'s (default: the envs'
            single spaces, Minari's default format).
        jpeg_encoding: JPEG-encode image observations (lossy): off by default, unlike Minari's.
        step_data_callback: as Minari's, a `minari.StepDataCallback` subclass: one instance per env, called
            with that env's reset rows (``action=None``) and step rows, whose returned step data is what is
            recorded (a changed observation or action, in ``observation_space``/``action_space``, or a
            forced ``truncated``: the next episode then goes on from that step without a reset, as
            Minari's collector records it). Its ``env`` argument is the vector env.
        episode_metadata_callback: as Minari's, a class whose instance maps an episode (a dict of arrays)
            to its metadata; its ``env_id`` is added.
        max_episodes: keep the first ``max_episodes`` episodes to end, and no more (None: all).
        reward_dtype: the type of the env's rewards (a vector env gives float64 whatever its envs give),
            stored as Minari's collector stores them, ``np.asarray`` of the env's own: ints as int64,
            ``np.float32`` as float32. None: learned from one step of one env of the stack built apart,
            float64 where there is none to build (a vector env that is not torchwm's, or a wrapped one).

    Example:
        >>> import torchwm
        >>> from torchwm.integrations.minari import VectorDataCollector
        >>> envs = VectorDataCollector(torchwm.make_vec("CartPole-v1", 2, seed=0))
        >>> _ = envs.reset()
        >>> while envs.num_episodes < 3:
        ...     _ = envs.step(envs.action_space.sample())
        >>> envs.num_episodes
        3
        >>> envs.close()
    """

    def __init__(
        self,
        envs: gym.vector.VectorEnv,
        record_infos: bool = False,
        observation_space: gym.Space | None = None,
        action_space: gym.Space | None = None,
        data_format: str | None = None,
        *,
        jpeg_encoding: bool = False,
        step_data_callback: type = StepDataCallback,
        episode_metadata_callback: type = EpisodeMetadataCallback,
        max_episodes: int | None = None,
        reward_dtype: Any = None,
    ) -> None:
        if max_episodes is not None and (isinstance(max_episodes, bool) or int(max_episodes) < 1):
            raise ValueError(f"max_episodes must be an int >= 1 or None, got {max_episodes!r}")
        if reward_dtype is not None and np.dtype(reward_dtype).kind not in "biuf":
            raise TypeError(f"reward_dtype must be a bool, int or float dtype, got {reward_dtype!r}")
        super().__init__(envs)
        self._vec: Any = envs  # torchwm's methods too (send, recv, restore_state, env_ids)
        self._reward_of = _env_reward(
            _env_reward_dtype(envs) if reward_dtype is None else np.dtype(reward_dtype)
        )
        _seed_every_episode(envs)
        self._record_infos = bool(record_infos)
        self._obs_space = observation_space or envs.single_observation_space
        self._act_space = action_space or envs.single_action_space
        self._data_format = data_format
        self._jpeg_encoding = jpeg_encoding
        self._episode_metadata_callback = episode_metadata_callback()
        self._max_episodes = max_episodes
        n = envs.num_envs
        self._mode = envs.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        self._episodes: list[_Episode | None] = [None] * n
        self._needs_reset = [False] * n  # next_step: the env's next row is its reset step
        self._actions: list[Any] = [None] * n  # the action sent to each env, for the row that returns it
        self._finished: list[tuple[int, EpisodeBuffer]] = []
        self._rows = [(_Rows(self._obs_space), _Rows(self._act_space)) for _ in range(n)]
        # Minari's default callback returns the step as it came: not called, so that a step costs no call
        # per env.
        self._step_callbacks = (
            None if step_data_callback is StepDataCallback else [step_data_callback() for _ in range(n)]
        )
        self._needs_infos = self._record_infos or self._step_callbacks is not None
        self._pending_reset: tuple[Any, Any] | None = None

    # -- what is recorded ----------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        """Episodes recorded (ended) and not yet written to a dataset."""
        return len(self._finished)

    @property
    def spec(self) -> Any:  # type: ignore[override]
        return self._vec.spec

    def __enter__(self) -> VectorDataCollector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the vector env ------------------------------------------------------------------------------

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, dict[str, Any]]:
        given = self._pending_first_seed() if seed is None else seed
        obs, infos = self._vec.reset(seed=seed, options=options, **kwargs)
        self._record_reset(obs, infos, given, options)
        return obs, infos

    def reset_async(self, seed: Any = None, options: dict[str, Any] | None = None) -> None:
        self._vec.reset_async(seed=seed, options=options)
        self._pending_reset = (self._pending_first_seed() if seed is None else seed, options)

    def reset_wait(self, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, infos = self._vec.reset_wait(*args, **kwargs)
        seed, options = self._pending_reset or (None, None)
        self._pending_reset = None
        self._record_reset(obs, infos, seed, options)
        return obs, infos

    def step(self, actions: Any, env_ids: Any = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self._record_send(actions, env_ids)
        try:
            result = self._vec.step(actions) if env_ids is None else self._vec.step(actions, env_ids)
        except BaseException as exc:
            self._drop_lost_steps(exc)
            raise
        self._record_step(*result)
        return result

    def send(self, actions: Any, env_ids: Any = None) -> None:
        try:
            self._vec.send(actions, env_ids)
        except BaseException as exc:
            self._drop_lost_steps(exc)
            raise
        self._record_send(actions, env_ids)

    def recv(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        try:
            result = self._vec.recv(*args, **kwargs)
        except BaseException as exc:
            self._drop_lost_steps(exc)
            raise
        self._record_step(*result)
        return result

    def step_async(self, actions: Any) -> None:
        self.send(actions)

    def step_wait(self, *args: Any, **kwargs: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self.recv(*args, **kwargs)

    def restore_state(self, states: Any, env_ids: Any = None) -> tuple[Any, dict[str, Any]]:
        """``envs.restore_state``: the restored envs' episodes are no longer one env's from its seed, so
        they are left out; the next episode of each is recorded again."""
        result = self._vec.restore_state(states, env_ids)
        for i in self._ids(env_ids):
            self._episodes[i] = None
            self._needs_reset[i] = False
        return result

    # -- recording -----------------------------------------------------------------------------------

    def _drop_lost_steps(self, exc: BaseException) -> None:
        """A step, send or recv raised: the episodes of the envs whose step results it dropped have a step
        the rows never showed, so they are left out (as an episode cut by `reset`); each env's next
        episode is recorded again. A torchwm vector env names those envs (``exc.dropped_env_ids``); an
        error of it that names none dropped nothing (a refused call, a timeout whose envs stay in
        flight; after a Ctrl-C the envs in flight must be reset, which cuts their episodes). Another
        vector env's error may have dropped any env's results: every running episode is left out."""
        if isinstance(exc, TimeoutError):
            return  # the envs stay in flight: recv() again collects their results
        dropped = getattr(exc, "dropped_env_ids", None)
        if dropped is None:
            if isinstance(self._vec.unwrapped, TorchwmVectorEnv):
                return
            dropped = range(self.num_envs)
        for i in dropped:
            self._episodes[i] = None
            self._needs_reset[i] = False

    def _ids(self, env_ids: Any) -> list[int]:
        if env_ids is None:
            return list(range(self.num_envs))
        return np.atleast_1d(np.asarray(env_ids, dtype=np.int64)).tolist()

    def _record_send(self, actions: Any, env_ids: Any) -> None:
        space = self._vec.single_action_space  # the actions sent (a step data callback may map them)
        if isinstance(space, ARRAY_SPACES):
            actions = np.array(actions, dtype=space.dtype)  # a copy: the caller may reuse its array
        for k, i in enumerate(self._ids(env_ids)):
            self._actions[i] = get_row(space, actions, k)

    def _pending_first_seed(self) -> Any:
        """The seed a torchwm env's first reset takes from ``make_vec(seed=...)`` when given none (None
        once that reset is done)."""
        return getattr(self._vec.unwrapped, "_first_reset_seed", None)

    @staticmethod
    def _reset_seeds(seed: Any, ids: list[int], masked: bool) -> list[int | None]:
        """The seed each env of ``ids`` was reset with, by Gymnasium's rule (``seed + i``, or a list)."""
        if seed is None:
            return [None] * len(ids)
        if isinstance(seed, (list, tuple, np.ndarray)):
            seeds = list(seed)
            return [seeds[i] for i in ids] if masked else seeds
        return [int(seed) + i for i in ids]

    def _record_reset(self, obs: Any, infos: dict[str, Any], seed: Any, options: Any) -> None:
        mask = options.get("reset_mask") if isinstance(options, dict) else None
        if "env_id" in infos:  # rows of these envs, in this order
            ids = np.asarray(infos["env_id"]).tolist()
            rows = list(range(len(ids)))
            seeds = self._reset_seeds(seed, ids, False)
        elif mask is not None:
            ids = np.flatnonzero(mask).tolist()
            rows = ids
            seeds = self._reset_seeds(seed, ids, True)
        else:
            ids = rows = list(range(self.num_envs))
            seeds = self._reset_seeds(seed, ids, False)
        drawn = infos.get("episode_seed")
        drawn_mask = infos.get("_episode_seed")
        info_rows = (
            infos_to_rows(infos, len(ids) if "env_id" in infos else self.num_envs)
            if self._needs_infos
            else None
        )
        space = self._vec.single_observation_space
        # The options an episode was reset with, for its metadata (the vector env's own reset_mask is not).
        episode_options = {k: v for k, v in options.items() if k != "reset_mask"} if options else None
        for i, row, given in zip(ids, rows, seeds, strict=True):
            if drawn is not None and (drawn_mask is None or drawn_mask[row]):
                given = drawn[row]
            # An episode cut by this reset did not end: left out.
            info_row = None if info_rows is None else info_rows[row]
            self._start(i, get_row(space, obs, row), given, info_row, episode_options)
            self._needs_reset[i] = False

    def _start(self, i: int, obs: Any, seed: Any, info: dict[str, Any] | None, options: Any = None) -> None:
        """Env ``i``'s next episode starts with this reset row (the step data callback's view of it)."""
        info = None if info is None else _env_info(info)
        if self._step_callbacks is not None:
            data = self._step_callbacks[i](env=self._vec, obs=obs, info=info or {})
            obs, info = data["observation"], data["info"]
        self._episodes[i] = _Episode(self._rows[i], obs, seed, info if self._record_infos else None, options)

    def _record_step(
        self, obs: Any, rewards: Any, terminations: Any, truncations: Any, infos: dict[str, Any]
    ) -> None:
        if "env_id" in infos:
            ids = np.asarray(infos["env_id"]).tolist()
        else:
            ids = range(len(rewards))
        n_rows = len(ids)
        space = self._vec.single_observation_space
        array_obs = isinstance(space, ARRAY_SPACES)
        same_step = self._mode is AutoresetMode.SAME_STEP
        next_step = self._mode is AutoresetMode.NEXT_STEP
        rewards_list = np.asarray(rewards).tolist()
        if self._reward_of is not None:
            rewards_list = [self._reward_of(reward) for reward in rewards_list]
        terminations_list = np.asarray(terminations).tolist()
        truncations_list = np.asarray(truncations).tolist()
        info_rows = infos_to_rows(infos, n_rows) if self._needs_infos else None
        drawn = infos.get("episode_seed")
        drawn_mask = infos.get("_episode_seed")
        restarted = infos.get("worker_restarted")
        restarted_mask = infos.get("_worker_restarted")
        callbacks = self._step_callbacks
        changed: list[tuple[int, dict[str, Any], dict[str, Any]]] = []  # (env, first info, step info)
        for row, i in enumerate(ids):
            obs_row = obs[row] if array_obs else get_row(space, obs, row)
            if restarted is not None and restarted[row] and (restarted_mask is None or restarted_mask[row]):
                # A worker restart ended this env's episode: its row is no transition the env made (the
                # action was not applied, the observation is the new episode's), so the episode is left
                # out, as one cut by reset. The rows after it are those of an ended env.
                terminations_list[row], truncations_list[row] = False, True
                self._episodes[i] = None
                self._needs_reset[i] = False
            if self._needs_reset[i]:  # next_step: this row is the reset step of the next episode
                self._needs_reset[i] = False
                seed = drawn[row] if drawn is not None and (drawn_mask is None or drawn_mask[row]) else None
                self._start(i, obs_row, seed, None if info_rows is None else info_rows[row])
                continue
            episode = self._episodes[i]
            terminated, truncated = terminations_list[row], truncations_list[row]
            ended = terminated or truncated  # the env's own end: it resets
            recorded_end = False  # the end of the recorded episode (a step data callback may move it)
            if episode is not None:
                last_obs = get_row(space, infos["final_obs"], row) if ended and same_step else obs_row
                step_info = None
                if info_rows is not None:
                    step_info = info_rows[row]
                    if ended and same_step:
                        step_info = step_info.get("final_info", {})
                    step_info = _env_info(step_info)
                action, reward, step_terminated, step_truncated = (
                    self._actions[i],
                    rewards_list[row],
                    terminated,
                    truncated,
                )
                if callbacks is not None:
                    data = callbacks[i](
                        env=self._vec,
                        obs=last_obs,
                        info=step_info or {},
                        action=action,
                        rew=reward,
                        terminated=terminated,
                        truncated=truncated,
                    )
                    last_obs, action, reward = data["observation"], data["action"], data["reward"]
                    step_terminated, step_truncated = bool(data["terminated"]), bool(data["truncated"])
                    step_info = data["info"]
                if episode.infos is not None and _info_keys(step_info or {}) != episode.info_keys:
                    # Minari cannot store an episode whose info keys change (its collector raises): the
                    # episode is left out, the other rows recorded, and the error raised after them.
                    changed.append((i, episode.infos[0], step_info or {}))
                    self._episodes[i] = None
                else:
                    episode.actions.append(action)
                    episode.rewards.append(reward)
                    episode.terminations.append(step_terminated)
                    episode.truncations.append(step_truncated)
                    episode.observations.append(last_obs)
                    if episode.infos is not None and step_info is not None:
                        episode.infos.append(step_info)
                    recorded_end = step_terminated or step_truncated
                    if recorded_end:
                        self._finish(i, episode)
                        if not ended:
                            # The callback ended the episode, not the env: the next one goes on from here,
                            # without a reset (and without a seed), as Minari's collector records it.
                            infos_kept = None if episode.infos is None else step_info
                            self._episodes[i] = _Episode(self._rows[i], last_obs, None, infos_kept)
                            continue
            if not ended:
                continue
            # The env ended and resets (an episode the callback did not end is cut here: left out).
            self._episodes[i] = None
            if same_step:
                seed = drawn[row] if drawn is not None and (drawn_mask is None or drawn_mask[row]) else None
                reset_info = None if info_rows is None else info_rows[row]
                self._start(i, obs_row, seed, reset_info)
            elif next_step:
                self._needs_reset[i] = True
        if changed:
            raise ValueError(
                "record_infos: an env's info keys changed during an episode, which Minari's datasets cannot "
                "store (Minari's DataCollector raises here too); "
                + "; ".join(
                    f"env {i} began its episode with info keys {_key_names(first)}, then gave "
                    f"{_key_names(info)}"
                    for i, first, info in changed
                )
                + ". Those episodes are left out; give the same keys at every step (a step_data_callback can "
                "pad them) or record_infos=False"
            )

    def _finish(self, env_id: int, episode: _Episode) -> None:
        if self._max_episodes is not None and len(self._finished) >= self._max_episodes:
            return
        buffer = EpisodeBuffer(
            seed=episode.seed,
            options=episode.options or None,
            observations=episode.observations.stacked(),
            actions=episode.actions.stacked(),
            rewards=np.asarray(episode.rewards),  # as Minari's collector: the dtype of the env's rewards
            terminations=np.asarray(episode.terminations, dtype=np.bool_),
            truncations=np.asarray(episode.truncations, dtype=np.bool_),
            infos=None if episode.infos is None else _stack_infos(episode.infos),
        )
        self._finished.append((env_id, buffer))

    # -- datasets ------------------------------------------------------------------------------------

    def _buffers(self) -> tuple[list[EpisodeBuffer], list[dict[str, Any]]]:
        finished = self._finished
        buffers = [buffer for _, buffer in finished]
        metadata = []
        for env_id, buffer in finished:
            meta = dict(self._episode_metadata_callback({"rewards": buffer.rewards}))
            meta["env_id"] = env_id
            metadata.append(meta)
        return buffers, metadata

    def create_dataset(
        self,
        dataset_id: str,
        eval_env: Any = None,
        algorithm_name: str | None = None,
        author: str | set | None = None,
        author_email: str | set | None = None,
        code_permalink: str | None = None,
        ref_min_score: float | None = None,
        ref_max_score: float | None = None,
        expert_policy: Callable[[Any], Any] | None = None,
        num_episodes_average_score: int = 100,
        description: str | None = None,
        requirements: list | None = None,
    ) -> minari.MinariDataset:
        """The episodes recorded so far as a new local Minari dataset (``MINARI_DATASETS_PATH``); takes
        `minari.DataCollector.create_dataset`'s arguments. The recorded episodes are then cleared, as
        Minari's collector clears its buffers; episodes still running go to the next dataset.

        A write that fails or is interrupted (Ctrl-C) leaves no dataset behind: the folder Minari made is
        removed, the recorded episodes are kept, and the same id can be used again."""
        # Checked before Minari makes the dataset's folder, which a failure later would leave behind.
        minari.dataset.minari_dataset.parse_dataset_id(dataset_id)
        buffers, episode_metadata = self._buffers()
        folder = Path(get_dataset_path(dataset_id))
        existed = folder.exists()  # Minari refuses it: not this call's to remove
        try:
            dataset = self._write(
                dataset_id,
                buffers,
                episode_metadata,
                eval_env=eval_env,
                algorithm_name=algorithm_name,
                author=author,
                author_email=author_email,
                code_permalink=code_permalink,
                ref_min_score=ref_min_score,
                ref_max_score=ref_max_score,
                expert_policy=expert_policy,
                num_episodes_average_score=num_episodes_average_score,
                description=description,
                requirements=requirements,
            )
        except BaseException:
            if not existed and folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
            raise
        del self._finished[: len(buffers)]
        return dataset

    def _write(
        self,
        dataset_id: str,
        buffers: list[EpisodeBuffer],
        episode_metadata: list[dict[str, Any]],
        **metadata: Any,
    ) -> minari.MinariDataset:
        """The dataset of ``buffers`` with ``metadata`` (`create_dataset`'s keywords), written whole into a
        new folder (`create_dataset` removes it if this raises)."""
        env_spec = _gym_env_spec(self._vec.spec)
        # Minari builds an env with gym.make for the reference scores and never closes it: they are computed
        # here instead (`_reference_scores`), in an env closed after.
        expert_policy = metadata.pop("expert_policy")
        ref_min_score = metadata.pop("ref_min_score")
        ref_max_score = metadata.pop("ref_max_score")
        num_episodes_average_score = metadata.pop("num_episodes_average_score")
        if expert_policy is not None and ref_max_score is not None:
            raise ValueError("Can't pass a value for `expert_policy` and `ref_max_score` at the same time.")
        dataset = minari.create_dataset_from_buffers(
            dataset_id,
            buffers,
            env=None if env_spec is None else _SpecAndSpaces(env_spec, self._obs_space, self._act_space),
            action_space=self._act_space,
            observation_space=self._obs_space,
            data_format=self._data_format,
            jpeg_encoding=self._jpeg_encoding,
            **metadata,
        )
        storage = dataset.storage
        if episode_metadata:
            storage.update_episode_metadata(episode_metadata)
        eval_env = metadata["eval_env"]
        scores = _reference_scores(
            env_spec if eval_env is None else _env_spec_of(eval_env),
            expert_policy,
            ref_min_score,
            ref_max_score,
            num_episodes_average_score,
        )
        storage.update_metadata({SPEC_KEY: _spec_data(self._vec.spec), **scores})
        # As Minari's storage measures it after each write: the size with what was added here.
        storage.update_metadata({"dataset_size": storage.get_size()})
        return minari.MinariDataset(storage.data_path)

    def add_to_dataset(self, dataset: minari.MinariDataset) -> None:
        """Add the episodes recorded so far to ``dataset``, as `minari.DataCollector.add_to_dataset`."""
        buffers, episode_metadata = self._buffers()
        storage = dataset.storage
        first = storage.total_episodes
        storage.update_episodes(buffers)
        storage.update_episode_metadata(episode_metadata, range(first, first + len(buffers)))
        if dataset.episode_indices is not None:
            dataset.episode_indices = np.append(dataset.episode_indices, first + np.arange(len(buffers)))
        del self._finished[: len(buffers)]


class _SpecAndSpaces(gym.Env):
    """What `minari.create_dataset_from_buffers` reads of its ``env`` argument, the recorded stack's spec and
    spaces, without the stack: given a spec, Minari builds the env with ``gym.make`` to read its spaces and
    never closes it (an ALE emulator for Atari, at every `create_dataset`)."""

    def __init__(self, spec: EnvSpec, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.spec = spec
        self.observation_space = observation_space
        self.action_space = action_space


def _env_spec_of(env: str | EnvSpec | gym.Env) -> EnvSpec | None:
    """The spec of an ``eval_env`` as Minari reads it (an id, a spec or an env)."""
    if isinstance(env, str):
        return gym.spec(env)
    if isinstance(env, EnvSpec):
        return env
    return env.spec


def _reference_scores(
    eval_spec: EnvSpec | None,
    expert_policy: Callable[[Any], Any] | None,
    ref_min_score: float | None,
    ref_max_score: float | None,
    num_episodes: int,
) -> dict[str, Any]:
    """The reference scores as Minari computes and stores them (`minari.utils.get_average_reference_score`
    of a random policy for the minimum, of ``expert_policy`` for the maximum, in the eval env), none unless
    an expert policy or a maximum is given, in an env that is closed after."""
    if eval_spec is None or (expert_policy is None and ref_max_score is None):
        return {}
    if ref_min_score is None or expert_policy is not None:
        env = gym.make(eval_spec)
        try:
            if ref_min_score is None:
                ref_min_score = get_average_reference_score(env, RandomPolicy(env), num_episodes)
            if expert_policy is not None:
                ref_max_score = get_average_reference_score(env, expert_policy, num_episodes)
        finally:
            env.close()
    return {
        "ref_max_score": ref_max_score,
        "ref_min_score": ref_min_score,
        "num_episodes_average_score": num_episodes,
    }


def _seed_every_episode(envs: gym.vector.VectorEnv) -> None:
    """Turn on ``envs``' seeded autoresets, as Minari's collector seeds every episode (a reset without a
    seed draws one); warn where the vector env cannot, before anything is recorded."""
    unwrapped = envs.unwrapped
    if isinstance(unwrapped, TorchwmVectorEnv):
        if unwrapped.autoreset_seeds:
            return
        try:
            unwrapped.autoreset_seeds = True
            return
        except UnsupportedStackError as exc:
            reason = str(exc)
    else:
        reason = f"{type(unwrapped).__name__} is not a torchwm vector env"
    warnings.warn(
        f"VectorDataCollector: only the first episode of each env will have a seed, later episodes none "
        f"(they cannot be replayed from a seed): this vector env cannot seed its autoresets ({reason})",
        UserWarning,
        stacklevel=3,
    )


def _env_reward_dtype(envs: gym.vector.VectorEnv) -> np.dtype:
    """The dtype of the rewards one env of ``envs`` gives (``np.asarray`` of its reward, as Minari's collector
    stores them), from one step of one env of the stack built apart, since the vector env gives float64
    whatever its envs give. float64 for a vector env that is not torchwm's or is wrapped (a vector wrapper
    may change the rewards: what is recorded is what it gives), or whose env cannot be built here (with a
    warning)."""
    spec = envs.unwrapped.spec
    if envs is not envs.unwrapped or not isinstance(spec, VecSpec):
        return np.dtype(np.float64)
    from torchwm.building import build_env

    try:
        env = build_env(spec, 0) if spec.env_fns is None else spec.env_fns[0]()
        try:
            env.reset(seed=0)
            env.action_space.seed(0)
            reward = env.step(env.action_space.sample())[1]
        finally:
            env.close()
    except Exception as exc:  # the vector env runs: only the stored dtype is at stake
        warnings.warn(
            f"VectorDataCollector: rewards are stored as float64, since one env of this stack could not be "
            f"built and stepped here to learn its reward type ({type(exc).__name__}: {exc}); pass "
            f"reward_dtype= to store the env's own",
            UserWarning,
            stacklevel=4,
        )
        return np.dtype(np.float64)
    dtype = np.asarray(reward).dtype
    return dtype if dtype.kind in "biuf" else np.dtype(np.float64)


def _env_reward(dtype: np.dtype) -> Callable[[float], Any] | None:
    """A vector env's reward (a Python float) as an env whose rewards have ``dtype`` gave it, so that an
    episode's ``np.asarray(rewards)`` has Minari's dtype; None for float64 (nothing to do). A reward the
    dtype cannot hold (0.5 from an env of ints) stays a float, as ``np.asarray`` of Minari's collector makes
    that episode's rewards float64: no value is changed."""
    if dtype == np.float64:
        return None
    if dtype.kind == "f":
        return dtype.type  # the env's own float32 (float16) value, exact
    if dtype.kind == "b":
        return lambda reward: dtype.type(reward) if reward in (0.0, 1.0) else reward
    if dtype == np.int64:
        return lambda reward: int(reward) if float(reward).is_integer() else reward  # np.asarray: int64
    return lambda reward: dtype.type(reward) if float(reward).is_integer() else reward


def _info_keys(info: dict[str, Any]) -> frozenset:
    """The keys of an info, nested dicts' too: what must stay the same through an episode."""
    return frozenset(
        (key, _info_keys(value) if isinstance(value, dict) else None) for key, value in info.items()
    )


def _key_names(info: dict[str, Any]) -> list[str]:
    return sorted(str(key) for key in info)


def _env_info(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k not in _VECTOR_INFO_KEYS}


def _spec_data(spec: Any) -> dict[str, Any] | None:
    """The torchwm spec as JSON data, or None where there is none to write (callables, a Gymnasium env, or
    env arguments JSON cannot hold, such as an array: Minari leaves its ``env_spec`` out then too)."""
    if not isinstance(spec, VecSpec):
        return None
    try:
        data = spec.to_dict()
        json.dumps(data)
    except (TypeError, ValueError) as exc:
        warnings.warn(
            f"the torchwm spec of this vector env cannot be stored in the dataset ({exc}): "
            f"make_vec_from_dataset will not rebuild it",
            UserWarning,
            stacklevel=3,
        )
        return None
    return data


def _gym_env_spec(spec: Any) -> gym.envs.registration.EnvSpec | None:
    """Gymnasium's `EnvSpec` of one env of the recorded stack, for Minari's ``env_spec``
    (``dataset.recover_environment()``, and ``eval_env`` when none is given): for a plain Gymnasium env
    (no torchwm wrappers), its own registered spec with the env's arguments, as Minari's collector stores
    it; for any other stack, a spec whose entry point is `recorded_env` and whose ``torchwm_spec`` argument
    is the `VecSpec` as data, so that ``gym.make`` builds the whole stack. None where there is nothing a
    later process can rebuild (envs made of callables, a spec JSON cannot hold)."""
    if not isinstance(spec, VecSpec) or spec.env_fns is not None:
        return None
    env_spec: gym.envs.registration.EnvSpec | None = None
    if spec.source == "gym" and not spec.wrappers and not spec.fused:
        try:
            base = gym.spec(spec.id)
        except gym.error.Error:
            base = None
        if base is not None:
            env_spec = dataclasses.replace(base, kwargs={**base.kwargs, **spec.env_kwargs})
    if env_spec is None:
        data = _spec_data(spec)
        if data is None:
            return None
        env_spec = gym.envs.registration.EnvSpec(
            id=spec.id,
            entry_point=RECORDED_ENV_ENTRY_POINT,
            kwargs={"torchwm_spec": data},
            # The stack as built, nothing around it: its own time limit and checks are inside it.
            order_enforce=False,
            disable_env_checker=True,
        )
    try:
        env_spec.to_json()
    except (TypeError, ValueError):  # an entry point or an argument JSON cannot hold
        return None
    return env_spec


RECORDED_ENV_ENTRY_POINT = f"{__name__}:recorded_env"


def recorded_env(torchwm_spec: dict[str, Any], render_mode: str | None = None) -> gym.Env:
    """One env of the stack a dataset was recorded from (``torchwm_spec``: its `VecSpec` as data): the entry
    point of the ``env_spec`` `VectorDataCollector` stores, which ``dataset.recover_environment()`` calls.
    Seeded with ``reset(seed=...)``, the episode's seed in the dataset's metadata, and stepped with its
    actions, it gives the recorded episode again."""
    from torchwm.building import build_env

    spec = VecSpec.from_dict(torchwm_spec)
    if render_mode is not None:
        spec = spec.replace(env_kwargs={**spec.env_kwargs, "render_mode": render_mode})
    return build_env(spec)


def dataset_spec(dataset: minari.MinariDataset) -> VecSpec:
    """The torchwm `VecSpec` a `VectorDataCollector` stored in ``dataset``'s metadata.

    Raises:
        ValueError: the dataset has none (not recorded by torchwm, or from envs made of callables).
    """
    data = dataset.storage.metadata.get(SPEC_KEY)
    if not data:
        raise ValueError(
            f"dataset {dataset.spec.dataset_id!r} holds no torchwm spec (metadata {SPEC_KEY!r}): it was not "
            f"recorded by torchwm's VectorDataCollector from a named env and wrappers"
        )
    return VecSpec.from_dict(data)


def make_vec_from_dataset(
    dataset: minari.MinariDataset, num_envs: int | None = None, *, backend: str | None = None, **changes: Any
) -> gym.vector.VectorEnv:
    """The vector env the dataset was recorded from: the same env, wrappers and options (`dataset_spec`),
    with ``num_envs`` envs (default: the recorded number) on ``backend`` (default: the recorded one; the
    recorded ``backend_kwargs`` are kept only on the same backend). ``changes`` replace other `VecSpec`
    fields (``seed=``, ``autoreset_mode=``)."""
    from torchwm.factory import make_vec_from_spec

    spec = dataset_spec(dataset)
    if num_envs is not None:
        changes["num_envs"] = num_envs
    if backend is not None and backend != spec.backend:
        changes.update(backend=backend, backend_kwargs=changes.get("backend_kwargs", {}))
    return make_vec_from_spec(spec.replace(**changes))
