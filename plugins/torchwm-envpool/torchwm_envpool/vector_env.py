"""The ``envpool`` backend: a torchwm vector env whose envs are one EnvPool, stepped in C++ threads.

`EnvPoolVectorEnv` gives EnvPool's envs torchwm's contract (the base class's
checks, ``env_ids``, send/recv with ``batch_size``, ``reset(seed=)``), and adds
as little as it can: one copy of the rows EnvPool returns into the batch, and
for ``frame_stack(padding="zero")`` the blanking of the frames before an
episode's first (EnvPool repeats the first frame there). Where EnvPool's
semantics differ from the Python backends (seeds are fixed when the pool is
made; its own RNG streams; next-step autoreset only), the backend either
emulates torchwm (``reset(seed=...)`` of every env remakes the pool with those
seeds) or refuses the call with a clear error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from gymnasium import spaces

from torchwm.errors import AlreadyPendingCallError, EnvTimeoutError
from torchwm.plugin_api import Batch, Stepper, VecSpec, VectorEnv, checks, rows
from torchwm_envpool.translate import EnvPoolPlan, translate

INFO_KEYS = ("lives", "elapsed_step")  # per-env infos kept from EnvPool's (not its RAM copy nor player ids)


# EnvPool takes seeds as int32 (and asserts on others); a negative seed is refused, as Gymnasium does.
MAX_SEED = 2**31 - 1


def check_seeds(seeds: list[Any], what: str) -> list[int]:
    """Each env's seed as an int, or a `ValueError`/`TypeError` that says the range EnvPool accepts."""
    for env, seed in enumerate(seeds):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(
                f"{what}: the envpool backend's seeds must be ints in [0, {MAX_SEED}], got {seed!r}"
            )
        if not 0 <= seed <= MAX_SEED:
            raise ValueError(
                f"{what}: the envpool backend's seeds must be ints in [0, {MAX_SEED}] (EnvPool takes "
                f"int32 seeds; env i gets seed + i), got {int(seed)} for env {env}"
            )
    return [int(seed) for seed in seeds]


class EnvPoolStepper(Stepper):
    """One EnvPool (``pool``) for an `EnvPoolVectorEnv`; its arguments are that class's."""

    # EnvPool's C++ envs index their action set with the action: an out-of-range one crashes the process
    # (Atari: SIGSEGV), so action values are checked before they are sent.
    check_action_values = True
    resets_while_stepping = False  # EnvPool's wait returns other envs' results
    state_refusal = (
        "envpool cannot clone or restore env states (its C++ envs have none to give); use backend='shmem' "
        "(or 'sync') with the same spec"
    )

    def __init__(
        self,
        spec: VecSpec,
        *,
        num_threads: int = 0,
        thread_affinity_offset: int = -1,
        batch_size: int | None = None,
        timeout: float | None = None,
    ) -> None:
        num_threads = checks.check_count("num_threads", num_threads, minimum=0)
        thread_affinity_offset = checks.check_count(
            "thread_affinity_offset", thread_affinity_offset, minimum=-1
        )
        super().__init__(spec, batch_size=batch_size, timeout=timeout)  # checked before the pool is made
        n = spec.num_envs
        self._plan: EnvPoolPlan = translate(spec)
        self._pool_options = {
            "num_threads": num_threads,
            "thread_affinity_offset": thread_affinity_offset,
            "batch_size": self.state.batch_size,
        }
        # EnvPool draws env i's seed from the pool's seed as seed + i, Gymnasium's layout.
        seed = (
            spec.seed
            if spec.seed is not None
            else int(cast(int, np.random.SeedSequence().entropy) % (MAX_SEED - n + 2))
        )
        self._fresh_seeds: list[int] | None = check_seeds([seed + i for i in range(n)], "make_vec(seed=...)")
        self.pool: Any = self._make_pool(self._fresh_seeds)
        self.single_observation_space, self.single_action_space = self._spaces()
        self.metadata = {"render_modes": []}
        self._batch = Batch(self.single_observation_space, n)
        self.observations = self._batch.observations
        self.rewards = self._batch.rewards
        self.terminations = self._batch.terminations
        self.truncations = self._batch.truncations
        self._all_ids = np.arange(n)
        # set_attr values (name -> env -> value): EnvPool has no Python env objects.
        self._attributes: dict[str, dict[int, Any]] = {}

    # -- EnvPool ----------------------------------------------------------------------------------

    def _make_pool(self, seeds: list[int]) -> Any:
        import envpool

        return envpool.make_gymnasium(
            self._plan.task_id,
            num_envs=len(seeds),
            seed=seeds[0],
            env_seed=list(seeds),
            **self._pool_options,
            **self._plan.kwargs,
        )

    def _spaces(self) -> tuple[spaces.Space, spaces.Space]:
        obs_space = self.pool.observation_space
        if self._plan.squeeze_stack:
            obs_space = spaces.Box(0, 255, obs_space.shape[1:], np.uint8)
        return obs_space, self.pool.action_space

    # -- what the vector env calls -------------------------------------------------------------------

    def reset_envs(
        self, ids: np.ndarray, seeds: list[int | None], options: dict | None, streams: Any = None
    ) -> list[dict]:
        # streams: never given, since this stepper keeps no episode_seeds book (EnvPool seeds its own envs)
        n = self.num_envs
        if options:
            raise ValueError(
                f"the envpool backend takes no reset options but reset_mask, got {sorted(options)}"
            )
        seeded = [s is not None for s in seeds]
        if any(seeded):
            if ids.size != n or not all(seeded):
                raise ValueError(
                    "EnvPool fixes each env's seed when the pool is made, so the envpool backend can seed "
                    "only a reset of every env at once (reset(seed=s) or a list of num_envs seeds); "
                    f"got seeds for envs {ids[np.asarray(seeded)].tolist()} of {n}"
                )
            if seeds != self._fresh_seeds:
                # before the pool goes: a refused reset changes nothing
                new_seeds = check_seeds(seeds, "reset")
                self.pool.close()
                self.pool = self._make_pool(new_seeds)
        self._fresh_seeds = None
        pool_batch = self._pool_options["batch_size"]
        if self.is_async and ids.size < pool_batch:
            raise ValueError(
                f"EnvPool returns exactly batch_size={pool_batch} envs per wait, so the envpool backend "
                f"cannot reset {ids.size} envs alone; reset at least {pool_batch} (or make the env with a "
                f"smaller batch_size)"
            )
        self.pool._reset(ids.astype(np.int32))
        infos: dict[int, dict] = {}
        while len(infos) < ids.size:
            obs, info = self.pool.recv(reset=True, return_info=True)
            infos.update(self.store(obs, 0.0, False, False, info))
        return [infos[i] for i in ids.tolist()]

    @property
    def is_async(self) -> bool:
        """EnvPool's async mode (batch_size < num_envs): each wait returns exactly batch_size envs."""
        return self._pool_options["batch_size"] < self.num_envs

    def send_step(self, ids: np.ndarray, actions: Any) -> None:
        if not self.is_async and self.state.in_flight.any():
            # In sync mode EnvPool's next wait returns the envs of one send; a second send would be lost.
            raise AlreadyPendingCallError(
                f"envs {np.flatnonzero(self.state.in_flight).tolist()} have actions in flight: recv() before "
                f"sending again, or make the env with batch_size < num_envs to overlap sends",
                "step",
            )
        # All envs: no env_id, so EnvPool uses its own cached ids instead of converting ours.
        env_id = None if ids.size == self.num_envs else ids.astype(np.int32)  # every env comes in env order
        self.pool.send(np.asarray(actions), env_id)

    def wait_ready(
        self, candidates: np.ndarray, count: int, timeout: float | None, *, min_ready: int | None = None
    ) -> tuple[np.ndarray, list[dict]]:
        # EnvPool's own wait returns its batch and cannot be cut short: ``min_ready`` changes nothing.
        # Every env of `_ready` is in flight (recv has not returned it), so it is among the candidates.
        waiting = [i for i in candidates.tolist() if i not in self.state.ready]
        pool_batch = self._pool_options["batch_size"]
        if self.is_async and waiting and len(waiting) < pool_batch:
            raise ValueError(
                f"EnvPool returns exactly batch_size={pool_batch} envs per wait and only {len(waiting)} "
                f"are in flight ({sorted(waiting)}): send actions for at least {pool_batch} envs before "
                f"recv()"
            )
        start = time.monotonic()
        while len(self.state.ready) < count:
            obs, rewards, terminations, truncations, info = self.pool.recv(reset=False, return_info=True)
            stored = self.store(obs, rewards, terminations, truncations, info)
            self.state.arrived(list(stored), list(stored.values()))
            if timeout is not None and time.monotonic() - start > timeout:
                raise EnvTimeoutError(f"EnvPool took more than {timeout} s to return {count} envs")
        return self.state.collect(count)

    def call(self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int]) -> list[Any]:
        if name in self._attributes:
            values = self._attributes[name]
            unset = [i for i in ids if i not in values]
            if unset:
                raise AttributeError(
                    f"{name!r} was set with set_attr on envs {sorted(values)}, not on envs {unset}"
                )
            return [values[i] for i in ids]
        if name in ("observation_space", "action_space"):
            space = self.single_observation_space if name == "observation_space" else self.single_action_space
            return [space] * len(ids)
        value = None if callable(name) else getattr(self.pool, name, None)
        if value is None or callable(value):
            raise AttributeError(
                f"the envpool backend has no per-env Python objects to call or read {name!r} on; "
                f"EnvPool's own object is vec.envpool"
            )
        return [value] * len(ids)

    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        self._attributes.setdefault(name, {}).update(zip(ids, values, strict=True))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def store(
        self,
        obs: np.ndarray,
        rewards: Any,
        terminations: Any,
        truncations: Any,
        info: dict[str, Any],
    ) -> dict[int, Any]:
        """Put EnvPool's rows into the batch (blanking stack padding); return the infos by env id, as rows of
        one block of columns (`torchwm.plugin_api.rows.info_rows`), which the vector env batches a column at
        a time rather than env by env."""
        env_ids = info["env_id"]
        elapsed = info["elapsed_step"]
        if self._plan.squeeze_stack:
            obs = obs[:, 0]
        if env_ids.size == self.num_envs and (env_ids == self._all_ids).all():
            # EnvPool returns a new array on every wait: adopt it as the batch instead of copying it.
            self.observations = self._batch.observations = obs
            self._batch.store(slice(None), None, rewards, terminations, truncations)
        else:
            self._batch.store(env_ids, obs, rewards, terminations, truncations)
        if self._plan.zero_padding:
            # Frames before the episode's first: EnvPool repeats that frame, torchwm's
            # frame_stack(padding="zero") shows blanks, one fewer for each step taken.
            padded = np.flatnonzero(elapsed < self._plan.stack_size - 1)
            for k in padded.tolist():
                self.observations[env_ids[k], : self._plan.stack_size - 1 - int(elapsed[k])] = 0
        keys = [key for key in INFO_KEYS if key in info]
        block = np.zeros((env_ids.size, len(keys)), dtype=np.int64)  # EnvPool's int32 columns, as Python ints
        for column, key in enumerate(keys):
            block[:, column] = info[key]
        infos = rows.info_rows(tuple((key, int) for key in keys), block)
        return dict(zip(env_ids.tolist(), infos, strict=True))


class EnvPoolVectorEnv(VectorEnv):
    """``num_envs`` envs of one EnvPool.

    Args:
        spec: what to build; `torchwm_envpool.translate.translate` says whether EnvPool can.
        num_threads: EnvPool's worker threads (0: EnvPool chooses, one per env up to the cores).
        thread_affinity_offset: pin threads to cores from this one (-1: no pinning).
        batch_size: `recv` returns the first ``batch_size`` envs ready (EnvPool's async mode).
        timeout: seconds > 0, or ``None``/``math.inf`` for no limit, as for every backend (checked before
            the pool is made). EnvPool's waits cannot be interrupted: a wait that passes it raises
            `EnvTimeoutError` once it ends, and a recv that could never complete is refused up front.
        copy: return copies of the observation batch (default) or the internal buffer.

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("ALE/Pong-v5", 8, backend="envpool", seed=0)   # doctest: +SKIP
        >>> envs.reset()[0].shape                                                  # doctest: +SKIP
        (8, 4, 84, 84)
    """

    def __init__(
        self,
        spec: VecSpec,
        *,
        num_threads: int = 0,
        thread_affinity_offset: int = -1,
        batch_size: int | None = None,
        timeout: float | None = None,
        copy: bool = True,
    ) -> None:
        stepper = EnvPoolStepper(
            spec,
            num_threads=num_threads,
            thread_affinity_offset=thread_affinity_offset,
            batch_size=batch_size,
            timeout=timeout,
        )
        super().__init__(stepper, copy=copy)
        self._envpool_stepper = stepper

    @property
    def envpool(self) -> Any:
        """The EnvPool object itself (its config, its own methods)."""
        return self._envpool_stepper.pool
