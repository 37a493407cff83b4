"""The envs one worker holds: `EnvGroup`.

Every Python backend steps its envs through an `EnvGroup`: `sync` holds one
in the calling process; each worker of a pool holds one (in a worker process,
in a Ray actor, or in the parent for the ``inline`` share). So the three
autoreset modes, seeding and the order of calls are the same code on every
backend, and the same seed gives the same arrays. It draws the seed of every episode that starts
without one, when seeded autoresets are on for the env: from the `SeedStream` its `Reset` brought
(`torchwm.vector.episode_seeds`), counting on for each autoreset. Results go straight into
the batch rows the group was given (plain arrays, or shared memory for
``shmem``); only infos come back as a list. The commands it answers are in
`torchwm.vector.messages`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.env_state import EnvState, apply_env_state, check_restorable, clone_env_state
from torchwm.vector.batching import ARRAY_SPACES, get_row, put_rows
from torchwm.vector.episode_seeds import EPISODE_SEED, SeedStream, episode_seed
from torchwm.vector.messages import (
    Call,
    CloneStates,
    Close,
    ControlCommand,
    NeedsReset,
    PickledFunction,
    Reset,
    RestoreStates,
    SetAttr,
    blame_env,
    error_reply,
)

# Observations of rows up to this size are written in one write per step (`EnvGroup._write_all_obs`).
_ONE_WRITE_MAX_ROW_BYTES = 4096


def _wrong_shape(space: gym.Space, value: Any, path: tuple = ()) -> tuple[tuple, tuple, tuple] | None:
    """(path, shape, expected shape) of the first array of ``value`` (one env's observation of a Dict or
    Tuple space) whose shape is not its space's; None if every one fits."""
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            if isinstance(value, dict) and key in value:
                found = _wrong_shape(sub, value[key], (*path, key))
                if found is not None:
                    return found
    elif isinstance(space, gym.spaces.Tuple):
        if isinstance(value, (tuple, list)):
            for k, (sub, item) in enumerate(zip(space.spaces, value)):
                found = _wrong_shape(sub, item, (*path, k))
                if found is not None:
                    return found
    elif isinstance(space, ARRAY_SPACES):
        shape = np.shape(value)
        expected = tuple(space.shape or ())
        if shape != expected:
            return path, shape, expected
    return None


class EnvGroup:
    """Several envs stepped in a loop, writing into preallocated batch rows.

    Args:
        envs: the envs, already built.
        autoreset_mode: what happens after an episode ends (Gymnasium's meaning).
        observations: the batch rows for these envs (``len(envs)`` rows).
        rewards, terminations, truncations: arrays of ``len(envs)``.
        first_env: the global index of ``envs[0]`` in its vector env (a worker's first env): an env's
            drawn episode seeds depend on its global index (`torchwm.vector.episode_seeds`), and errors name
            it.
    """

    def __init__(
        self,
        envs: Sequence[gym.Env],
        autoreset_mode: AutoresetMode,
        observations: Any,
        rewards: np.ndarray,
        terminations: np.ndarray,
        truncations: np.ndarray,
        first_env: int = 0,
    ) -> None:
        self.envs = list(envs)
        self.first_env = first_env  # the global index of envs[0]: for drawn seeds and messages
        self.autoreset_mode = autoreset_mode
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.observations = observations
        self.rewards = rewards
        self.terminations = terminations
        self.truncations = truncations
        self.needs_reset = [False] * len(self.envs)
        # Seeded autoresets: each env's root (None: off, the env resets without a seed) and the count of its
        # next drawn episode, as its last Reset set them. A state restored into an env changes neither: an
        # env's seeds are its own, not its state's.
        self._roots: list[int | None] = [None] * len(self.envs)
        self._episodes = [0] * len(self.envs)
        self._all_local = list(range(len(self.envs)))
        self._array_obs = isinstance(self.observation_space, ARRAY_SPACES)
        self._array_actions = isinstance(self.action_space, ARRAY_SPACES)
        self._obs_shape = tuple(self.observation_space.shape or ()) if self._array_obs else None

    def _write_obs(self, i: int, obs: Any) -> None:
        # The shape is compared here, where the row is copied anyway: NumPy would broadcast an
        # observation of shape (1,) into a row of shape (3,) without a word. Gymnasium's vector envs
        # raise ValueError for it.
        if self._array_obs:
            shape = getattr(obs, "shape", None)
            if shape is None:
                shape = () if isinstance(obs, (int, float)) else np.shape(obs)
            if shape != self._obs_shape:
                raise self._shape_error(i, (), shape, self._obs_shape)
            self.observations[i] = obs
        else:
            wrong = _wrong_shape(self.observation_space, obs)
            if wrong is not None:
                raise self._shape_error(i, *wrong)
            put_rows(self.observation_space, self.observations, i, obs)

    def _shape_error(
        self, i: int, path: tuple, shape: tuple, expected: tuple | None, came: str = "returned"
    ) -> ValueError:
        where = "".join(f"[{key!r}]" for key in path)
        return ValueError(
            f"env {self.first_env + i} {came} an observation{where} of shape {shape}, but its observation "
            f"space{where} has shape {expected}; every observation must have its space's shape"
        )

    def reset(
        self,
        local_ids: Sequence[int],
        seeds: Sequence[int | None],
        options: dict[str, Any] | None,
        streams: Sequence[SeedStream | None] | None = None,
    ) -> list[dict]:
        """Reset envs ``local_ids`` with ``seeds``; ``streams`` (`Reset`'s): where each draws its seeds."""
        infos = []
        i = None
        # One try around the loop, none per env: free until an env raises (then it names the env).
        try:
            for p, (i, seed) in enumerate(zip(local_ids, seeds, strict=True)):
                stream = None if streams is None else streams[p]
                if stream is None:
                    self._roots[i] = None
                    obs, info = self.envs[i].reset(seed=seed, options=options)
                else:
                    self._roots[i], self._episodes[i] = stream
                    if seed is None:
                        obs, info = self._drawn_reset(i, options)
                    else:
                        obs, info = self.envs[i].reset(seed=seed, options=options)
                        info = {**info, EPISODE_SEED: seed}
                self._write_obs(i, obs)
                self.rewards[i] = 0.0
                self.terminations[i] = False
                self.truncations[i] = False
                self.needs_reset[i] = False
                infos.append(info)
        except BaseException as exc:
            blame_env(exc, i)
            raise
        return infos

    def _drawn_reset(self, i: int, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset env ``i`` with the next seed of its stream, reported in its info."""
        episode = self._episodes[i]
        seed = episode_seed(self._roots[i], self.first_env + i, episode)  # type: ignore[arg-type]
        self._episodes[i] = episode + 1
        obs, info = self.envs[i].reset(seed=seed, options=options)
        return obs, {**info, EPISODE_SEED: seed}

    def step(self, local_ids: Sequence[int], actions: Any) -> list[dict]:
        """Step envs ``local_ids``; ``actions`` holds one row per id, in that order."""
        envs, needs_reset, roots = self.envs, self.needs_reset, self._roots
        array_actions = self._array_actions
        observations: list[Any] = []
        infos = []
        rewards: list[SupportsFloat] = []
        terminations, truncations = [], []
        next_step = self.autoreset_mode is AutoresetMode.NEXT_STEP
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        i = None
        # One try around the loops, none per env: free until an env raises (then it names the env).
        try:
            for row, i in enumerate(local_ids):
                env = envs[i]
                reward: SupportsFloat
                if next_step and needs_reset[i]:
                    # An env with a root draws its episode's seed: one check per autoreset, none per step.
                    obs, info = env.reset() if roots[i] is None else self._drawn_reset(i)
                    reward, terminated, truncated = 0.0, False, False
                else:
                    action = actions[row] if array_actions else get_row(self.action_space, actions, row)
                    obs, reward, terminated, truncated, info = env.step(action)
                    if same_step and (terminated or truncated):
                        # A copy: the env may reuse its observation buffer on the reset below.
                        final = {"final_obs": copy.deepcopy(obs), "final_info": info}
                        obs, reset_info = env.reset() if roots[i] is None else self._drawn_reset(i)
                        info = {**final, **reset_info}
                observations.append(obs)
                rewards.append(reward)
                terminations.append(terminated)
                truncations.append(truncated)
                needs_reset[i] = terminated or truncated
                infos.append(info)
            i = None  # no env's own: the writes below
            # Written once for all envs, as Gymnasium concatenates them after its loop: a numpy write and a
            # shape check per env cost as much as a cheap env's step.
            rows = slice(None) if local_ids == self._all_local else list(local_ids)
            if not self._write_all_obs(rows, observations):
                # A shape, a type or a value that does not fit: env by env, so that the error names the env.
                for obs, i in zip(observations, local_ids, strict=True):
                    self._write_obs(i, obs)
                i = None
            if not self._write_flags(rows, rewards, terminations, truncations):
                # A value that does not fit (a reward that is no number, say): env by env, as Gymnasium
                # writes them, so that an error names the env that returned it.
                for row, i in enumerate(local_ids):
                    self.rewards[i] = rewards[row]
                    self.terminations[i] = terminations[row]
                    self.truncations[i] = truncations[row]
        except BaseException as exc:
            blame_env(exc, i)
            raise
        return infos

    def _write_all_obs(self, rows: Any, observations: list[Any]) -> bool:
        """The observations of ``rows`` in one write, when the space is an array space and every one has its
        shape; False (nothing raised, rows maybe half written) otherwise: the caller writes them one by one.
        """
        # Large rows (images) go env by env: there the one write's extra copy, through a whole batch, costs
        # more than a write per env.
        if not self._array_obs or self.observations.strides[0] > _ONE_WRITE_MAX_ROW_BYTES:
            return False
        try:
            # One array, or an error for observations of differing shapes: the shapes are checked in C.
            batch = np.asarray(observations)
        except Exception:  # noqa: BLE001 - whatever it was, the env-by-env write raises it again, naming the env
            return False
        # The batch's shape, compared exactly: NumPy would broadcast observations all of shape (1,) into
        # rows of shape (3,).
        if batch.shape != (len(observations), *self._obs_shape):  # type: ignore[misc]
            return False
        try:
            self.observations[rows] = batch
        except (TypeError, ValueError):
            return False
        return True

    def _write_flags(self, rows: Any, rewards: list, terminations: list, truncations: list) -> bool:
        """Rewards and flags of ``rows`` in one write each; False (nothing raised) if a value does not fit."""
        try:
            self.rewards[rows] = rewards
            self.terminations[rows] = terminations
            self.truncations[rows] = truncations
        except (TypeError, ValueError):
            return False
        return True

    def call(
        self,
        local_ids: Sequence[int],
        name: str | Callable | PickledFunction,
        args: tuple,
        kwargs: dict,
    ) -> list[Any]:
        """Call ``name`` on envs ``local_ids``: a method or attribute of each env, or a function run as
        ``name(env, *args, **kwargs)``."""
        results = []
        i = None
        try:
            if isinstance(name, PickledFunction):
                name = name.load()
            for i in local_ids:
                if callable(name):  # a function of the env, run where the env lives
                    results.append(name(self.envs[i], *args, **kwargs))
                    continue
                attr = self.envs[i].get_wrapper_attr(name)
                results.append(attr(*args, **kwargs) if callable(attr) else attr)
        except BaseException as exc:
            blame_env(exc, i)
            raise
        return results

    def clone_states(self, local_ids: Sequence[int]) -> list[EnvState]:
        """The `EnvState` of each env of ``local_ids``, with its last observation (its batch row) and its
        autoreset flags; the envs are unchanged."""
        states = []
        i = None
        try:
            for i in local_ids:
                state = clone_env_state(self.envs[i])
                states.append(
                    dataclasses.replace(
                        state,
                        observation=copy.deepcopy(get_row(self.observation_space, self.observations, i)),
                        autoreset_pending=bool(self.needs_reset[i]),
                        terminated=bool(self.terminations[i]),
                        truncated=bool(self.truncations[i]),
                    )
                )
        except BaseException as exc:
            blame_env(exc, i)
            raise
        return states

    def restore_states(self, local_ids: Sequence[int], states: Sequence[EnvState]) -> list[dict]:
        """Put each env of ``local_ids`` in its state: its layers, its batch row and flags, its autoreset
        flag. Every state is checked against its env first, so that a state that does not fit changes no
        env. Returns one (empty) info per env, as a reset does."""
        i = None
        try:
            for i, state in zip(local_ids, states, strict=True):
                check_restorable(self.envs[i], state)
                wrong = _wrong_shape(self.observation_space, state.observation)
                if wrong is not None:
                    raise self._shape_error(i, *wrong, came="was given a state holding")
            for i, state in zip(local_ids, states, strict=True):
                apply_env_state(self.envs[i], state)
                self._write_obs(i, state.observation)
                self.rewards[i] = 0.0
                self.terminations[i] = state.terminated
                self.truncations[i] = state.truncated
                self.needs_reset[i] = state.autoreset_pending
        except BaseException as exc:
            blame_env(exc, i)
            raise
        return [{} for _ in local_ids]

    def set_attr(self, local_ids: Sequence[int], name: str, values: Sequence[Any]) -> None:
        i = None
        try:
            for i, value in zip(local_ids, values, strict=True):
                self.envs[i].set_wrapper_attr(name, value)
        except BaseException as exc:
            blame_env(exc, i)
            raise

    def answer(self, command: ControlCommand) -> Any:
        """Run a control command: its reply, or the `ErrorReply` of what raised (`Close` closes nothing:
        the worker's end does that once it has answered)."""
        try:
            if isinstance(command, Reset):
                return self.reset(command.local_ids, command.seeds, command.options, command.streams)
            if isinstance(command, Call):
                return self.call(self._local(command.local_ids), command.name, command.args, command.kwargs)
            if isinstance(command, CloneStates):
                return self.clone_states(command.local_ids)
            if isinstance(command, RestoreStates):
                return self.restore_states(command.local_ids, command.states)
            if isinstance(command, SetAttr):
                self.set_attr(self._local(command.local_ids), command.name, command.values)
            elif isinstance(command, NeedsReset):
                self.needs_reset = [True] * len(self.envs)
            elif not isinstance(command, Close):
                raise ValueError(f"unknown worker command {command!r}")
        except Exception as exc:
            return error_reply(exc)
        return None

    def _local(self, local_ids: Sequence[int] | None) -> Sequence[int]:
        return self._all_local if local_ids is None else local_ids

    def close(self) -> None:
        for env in self.envs:
            env.close()
