"""The envs one worker holds, and every command they answer.

Every Python backend steps its envs through an `EnvGroup`: `sync` holds one
in the calling process; each worker of a pool holds one (in a worker process,
in a Ray actor, or in the parent for the ``inline`` share). So the three
autoreset modes, seeding and the order of calls are the same code on every
backend, and the same seed gives the same arrays. Results go straight into
the batch rows the group was given (plain arrays, or shared memory for
``shmem``); only infos come back as a list.

The commands a pool sends a worker are typed here, once for every transport:
`Step`, and the control commands `Reset`, `Call`, `SetAttr`, `NeedsReset` and
`Close`, which `EnvGroup.answer` runs. An env that raises is answered with an
`ErrorReply` (`error_reply`), which the pool turns into a `WorkerError`.
`describe_share` is what a worker reports once its envs are built.
"""

from __future__ import annotations

import copy
import functools
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, SupportsFloat

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from torchwm.factory import build_env
from torchwm.vector.batching import ARRAY_SPACES, get_row, put_rows

if TYPE_CHECKING:
    from torchwm.spec import VecSpec


# -- commands ------------------------------------------------------------------------------------


class Step(NamedTuple):
    """Step envs ``local_ids`` of the worker (None: all of them, in order); ``actions`` has one row each."""

    local_ids: list[int] | None
    actions: Any


class Reset(NamedTuple):
    """Reset envs ``local_ids`` with one seed each; answered with their infos."""

    local_ids: list[int]
    seeds: list[int | None]
    options: dict | None


class Call(NamedTuple):
    """Call method ``name`` of envs ``local_ids`` of the worker (None: all, in order), or read it; answered
    with one value per env."""

    name: str
    args: tuple
    kwargs: dict
    local_ids: list[int] | None = None


class SetAttr(NamedTuple):
    """Set attribute ``name`` on envs ``local_ids`` of the worker (None: all, in order), one value each."""

    name: str
    values: list
    local_ids: list[int] | None = None


class NeedsReset(NamedTuple):
    """Sent to a restarted worker under next_step autoreset: its envs' interrupted episodes were reported
    truncated, so their next step starts a new episode, as after any truncation."""


class Close(NamedTuple):
    """Close the envs and end the worker; answered with None."""


ControlCommand = Reset | Call | SetAttr | NeedsReset | Close


class ErrorReply(NamedTuple):
    """A worker's answer when an env (or the worker's own code) raised.

    Attributes:
        env: the local index of the env that raised (None: not one env).
        traceback: the traceback text, shown in the `WorkerError`.
        summary: ``repr`` of the exception.
        pickled_type: the exception's type, cloudpickled (None: it cannot be), so that the pool raises a
            `WorkerError` that is also an instance of it.
    """

    env: int | None
    traceback: str
    summary: str
    pickled_type: bytes | None


class ShareDescription(NamedTuple):
    """What the pool needs to know of one worker's envs, once built: every env's observation and action
    space (so that every env of every worker is checked, `torchwm.vector.base.resolve_spaces`), and the
    first env's metadata and render mode."""

    observation_spaces: list[gym.Space]
    action_spaces: list[gym.Space]
    metadata: dict[str, Any]
    render_mode: str | None


def describe_share(envs: list[gym.Env]) -> ShareDescription:
    """The `ShareDescription` of ``envs``. A space equal to the first env's is that same object, which
    pickle sends once."""
    first = envs[0]

    def spaces_of(kind: str) -> list[gym.Space]:
        reference = getattr(first, kind)
        return [reference if space == reference else space for space in (getattr(env, kind) for env in envs)]

    return ShareDescription(spaces_of("observation_space"), spaces_of("action_space"), dict(first.metadata),
                            first.render_mode)


def wrong_shape(space: gym.Space, value: Any, path: tuple = ()) -> tuple[tuple, tuple, tuple] | None:
    """(path, shape, expected shape) of the first array of ``value`` (one env's observation of a Dict or
    Tuple space) whose shape is not its space's; None if every one fits."""
    if isinstance(space, gym.spaces.Dict):
        for key, sub in space.spaces.items():
            if isinstance(value, dict) and key in value:
                found = wrong_shape(sub, value[key], (*path, key))
                if found is not None:
                    return found
    elif isinstance(space, gym.spaces.Tuple):
        if isinstance(value, (tuple, list)):
            for k, (sub, item) in enumerate(zip(space.spaces, value)):
                found = wrong_shape(sub, item, (*path, k))
                if found is not None:
                    return found
    elif isinstance(space, ARRAY_SPACES):
        shape = np.shape(value)
        expected = tuple(space.shape or ())
        if shape != expected:
            return path, shape, expected
    return None


def failing_env(exc: BaseException) -> int | None:
    """The local index of the env that raised, read from the `EnvGroup` frame of the traceback.

    `EnvGroup` loops over its envs with the index in ``i``; reading it back here
    costs nothing on the hot path, unlike wrapping every env call in a try.
    """
    tb = exc.__traceback__
    index = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_filename == EnvGroup.step.__code__.co_filename and "i" in frame.f_locals:
            index = frame.f_locals["i"]
        tb = tb.tb_next
    return index if isinstance(index, int) else None


def error_reply(exc: BaseException) -> ErrorReply:
    """The `ErrorReply` for ``exc``, built where it was raised (a worker, or the parent's own share)."""
    try:
        pickled_type: bytes | None = cloudpickle.dumps(type(exc))
    except Exception:
        pickled_type = None
    return ErrorReply(failing_env(exc), "".join(traceback.format_exception(exc)), repr(exc), pickled_type)


class EnvGroup:
    """Several envs stepped in a loop, writing into preallocated batch rows.

    Args:
        envs: the envs, already built.
        autoreset_mode: what happens after an episode ends (Gymnasium's meaning).
        observations: the batch rows for these envs (``len(envs)`` rows).
        rewards, terminations, truncations: arrays of ``len(envs)``.
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
        self.first_env = first_env  # the global index of envs[0], for messages
        self.autoreset_mode = autoreset_mode
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.observations = observations
        self.rewards = rewards
        self.terminations = terminations
        self.truncations = truncations
        self.needs_reset = [False] * len(self.envs)
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
            wrong = wrong_shape(self.observation_space, obs)
            if wrong is not None:
                raise self._shape_error(i, *wrong)
            put_rows(self.observation_space, self.observations, i, obs)

    def _shape_error(self, i: int, path: tuple, shape: tuple, expected: tuple | None) -> ValueError:
        where = "".join(f"[{key!r}]" for key in path)
        return ValueError(
            f"env {self.first_env + i} returned an observation{where} of shape {shape}, but its observation "
            f"space{where} has shape {expected}; every observation must have its space's shape"
        )

    def reset(self, local_ids: Sequence[int], seeds: Sequence[int | None], options: dict[str, Any] | None) -> list[dict]:
        infos = []
        for i, seed in zip(local_ids, seeds, strict=True):
            obs, info = self.envs[i].reset(seed=seed, options=options)
            self._write_obs(i, obs)
            self.rewards[i] = 0.0
            self.terminations[i] = False
            self.truncations[i] = False
            self.needs_reset[i] = False
            infos.append(info)
        return infos

    def step(self, local_ids: Sequence[int], actions: Any) -> list[dict]:
        """Step envs ``local_ids``; ``actions`` holds one row per id, in that order."""
        infos = []
        rewards: list[SupportsFloat] = []
        terminations, truncations = [], []
        next_step = self.autoreset_mode is AutoresetMode.NEXT_STEP
        same_step = self.autoreset_mode is AutoresetMode.SAME_STEP
        for row, i in enumerate(local_ids):
            env = self.envs[i]
            reward: SupportsFloat
            if next_step and self.needs_reset[i]:
                obs, info = env.reset()
                reward, terminated, truncated = 0.0, False, False
            else:
                action = actions[row] if self._array_actions else get_row(self.action_space, actions, row)
                obs, reward, terminated, truncated, info = env.step(action)
                if same_step and (terminated or truncated):
                    # A copy: the env may reuse its observation buffer on the reset below.
                    final = {"final_obs": copy.deepcopy(obs), "final_info": info}
                    obs, reset_info = env.reset()
                    info = {**final, **reset_info}
            self._write_obs(i, obs)
            rewards.append(reward)
            terminations.append(terminated)
            truncations.append(truncated)
            self.needs_reset[i] = terminated or truncated
            infos.append(info)
        # Written once for all envs: three numpy writes per env cost as much as a cheap env's step.
        rows = slice(None) if local_ids == self._all_local else list(local_ids)
        if not self._write_flags(rows, rewards, terminations, truncations):
            # A value that does not fit (a reward that is no number, say): env by env, as Gymnasium
            # writes them, so that an error comes from the env that returned it, with ``i`` naming it
            # (`failing_env` reads it).
            for row, i in enumerate(local_ids):
                self.rewards[i] = rewards[row]
                self.terminations[i] = terminations[row]
                self.truncations[i] = truncations[row]
        return infos

    def _write_flags(self, rows: Any, rewards: list, terminations: list, truncations: list) -> bool:
        """Rewards and flags of ``rows`` in one write each; False (nothing raised) if a value does not fit."""
        try:
            self.rewards[rows] = rewards
            self.terminations[rows] = terminations
            self.truncations[rows] = truncations
        except (TypeError, ValueError):
            return False
        return True

    def call(self, local_ids: Sequence[int], name: str, args: tuple, kwargs: dict) -> list[Any]:
        results = []
        for i in local_ids:
            attr = self.envs[i].get_wrapper_attr(name)
            results.append(attr(*args, **kwargs) if callable(attr) else attr)
        return results

    def set_attr(self, local_ids: Sequence[int], name: str, values: Sequence[Any]) -> None:
        for i, value in zip(local_ids, values, strict=True):
            self.envs[i].set_wrapper_attr(name, value)

    def answer(self, command: ControlCommand) -> Any:
        """Run a control command: its reply, or the `ErrorReply` of what raised (`Close` closes nothing:
        the worker's end does that once it has answered)."""
        try:
            if isinstance(command, Reset):
                return self.reset(command.local_ids, command.seeds, command.options)
            if isinstance(command, Call):
                return self.call(self._local(command.local_ids), command.name, command.args, command.kwargs)
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


def check_distinct_envs(envs: Sequence[gym.Env]) -> None:
    """ValueError (SB3's DummyVecEnv's type and first sentence) if two of ``envs`` are one env: a factory that
    returns the same instance every time. Only envs built in one process can be compared."""
    seen: dict[int, int] = {}
    for i, env in enumerate(envs):
        first = seen.setdefault(id(env.unwrapped), i)
        if first != i:
            raise ValueError(
                "You tried to create multiple environments, but the function to create them returned the same "
                f"instance instead of creating different objects (envs {first} and {i} are one env). Each env "
                "factory must build a new env every time it is called, e.g. `lambda: gym.make(...)`, not "
                "`lambda: env`"
            )


def env_fns_of(env_fn: Any, num_envs: int, backend: str) -> tuple[Callable[[], gym.Env], ...]:
    """One factory per env: ``env_fn`` is one callable for every env, or a list of ``num_envs`` callables."""
    fns = list(env_fn) if isinstance(env_fn, (list, tuple)) else [env_fn] * num_envs
    if len(fns) != num_envs or not all(callable(fn) for fn in fns):
        raise TypeError(
            f"{backend}: env_fn must be a callable returning a gymnasium.Env, or a list of {num_envs} such "
            f"callables (one per env), got {env_fn!r:.200}"
        )
    return tuple(fns)


def with_env_fn(spec: VecSpec, env_fn: Any, backend: str) -> VecSpec:
    """``spec`` with the factories of the ``env_fn`` backend option in ``spec.env_fns`` (kept for callers that
    pass the option, such as `torchwm.TorchVectorizedEnv`), so that ``vec.spec`` says what was built."""
    if env_fn is None:
        return spec
    if spec.env_fns is not None:
        raise TypeError(f"{backend}: give the envs' factories once: the spec has env_fns, and env_fn= was passed too")
    return spec.replace(env_fns=env_fns_of(env_fn, spec.num_envs, backend))


def spec_env_fns(spec: VecSpec) -> list[Callable[[], gym.Env]]:
    """One no-argument factory per env of ``spec``: its ``env_fns``, or `torchwm.factory.build_env` of it."""
    if spec.env_fns is not None:
        return list(spec.env_fns)
    return [functools.partial(build_env, spec, index=i) for i in range(spec.num_envs)]
