"""The worker of the ``ray`` backend: one share of a vector env's envs in a Ray actor, on any node.

`EnvActor` builds its envs from the pool's `torchwm.plugin_api.WorkerPayload` and steps them with
the pool's `torchwm.plugin_api.EnvGroup`, through ordinary actor calls (resets, ``call``,
``set_attr``, the states' clone and restore, partial steps) and, for a step of all envs, as a task of
the compiled graph (`step_all`), which the driver's end (`torchwm_ray.driver`) runs. An env that raises
does not stop the call: the others go on and their rows come back with the error
(`torchwm_ray.failures.EnvFailure`). Observations over Ray's inline limit come back in chunks
(`obs_chunks`). The actor's process ends when its raylet is gone
(`torchwm_ray.connection.exit_with_raylet`), since Ray can no longer reach it.
"""

from __future__ import annotations

import math
import os
import pickle
import traceback
from typing import Any

import gymnasium as gym
import numpy as np
import ray
from gymnasium import spaces
from ray import cloudpickle

from torchwm.plugin_api import EnvGroup, WorkerHandle, messages, rows
from torchwm_ray.connection import exit_with_raylet
from torchwm_ray.failures import ActorRestarted, EnvFailure

# Ray sends a return value inline with the reply when it is under 100 KiB (its default
# max_direct_call_object_size) and through the object store otherwise, which is slower.
INLINE_BYTES = 90_000


def obs_chunks(space: gym.Space, rows: int) -> int:
    """In how many return values an actor sends ``rows`` observations (0: with the rest of the result)."""
    if not isinstance(space, spaces.Box):
        return 0
    size = rows * int(np.prod(space.shape)) * space.dtype.itemsize
    return 0 if size <= INLINE_BYTES else math.ceil(size / INLINE_BYTES)


class EnvActor:
    """The worker: one share of the pool's envs in a Ray actor process (used through `ray.remote`).

    A restarted actor (``max_restarts``) runs ``__init__`` again: its envs are new and must be reset
    before they step, which the pool does.
    """

    def __init__(self, payload: bytes) -> None:
        self.graph_step_running = False
        # Ray ran __init__ again after a crash: the envs are new, and the driver must hear of it
        # even if the crash happened between two calls.
        self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        exit_with_raylet()
        try:
            # Unpickled here rather than by Ray: an env class this node cannot import (its package is
            # missing) is then this actor's error reply, with the ImportError, instead of a dead actor
            # whose cause is only in the node's log files.
            self.payload: WorkerHandle.Payload = cloudpickle.loads(payload)
            self.envs, self.failed = self.payload.build_envs(), None
        except Exception as exc:
            self.envs, self.failed = [], EnvFailure.of(exc, None).reply

    def describe(self) -> dict[str, Any]:
        return {
            "share": self.failed or messages.describe_share(self.envs),
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    def attach(self, observation_space: gym.Space) -> int:
        """Batch rows of its own for its envs' results; returns in how many chunks it sends observations."""
        count = len(self.envs)
        self.observations = rows.create_batch(observation_space, count)
        self.rewards = np.zeros(count, dtype=np.float64)
        self.terminations = np.zeros(count, dtype=np.bool_)
        self.truncations = np.zeros(count, dtype=np.bool_)
        self.group = EnvGroup(
            self.envs,
            self.payload.autoreset_mode,
            self.observations,
            self.rewards,
            self.terminations,
            self.truncations,
            first_env=self.payload.first_env,
        )
        self.obs_chunks = obs_chunks(observation_space, count)
        return self.obs_chunks

    def _result(self, local_ids: list[int], infos: list[dict], chunked: bool = True) -> tuple:
        """The rows of ``local_ids``: ``(obs, rewards, terminations, truncations, infos)``.

        With ``obs_chunks``, the observations go as that many separate return values instead, after
        ``(None, rewards, terminations, truncations, infos)``: Ray puts a return value over 100 kB in its
        object store, which costs more than the step of a few Atari envs.
        """
        if len(local_ids) == len(self.envs):
            # Ray copies the return value when the method returns, so the buffers can be reused.
            obs, rewards, terminations, truncations = (
                self.observations,
                self.rewards,
                self.terminations,
                self.truncations,
            )
        else:
            ids = np.asarray(local_ids)
            obs = rows.take_rows(self.group.observation_space, self.observations, ids)
            rewards, terminations, truncations = (
                self.rewards[ids],
                self.terminations[ids],
                self.truncations[ids],
            )
        if not (chunked and self.obs_chunks):
            return obs, rewards, terminations, truncations, infos
        return (
            (None, rewards, terminations, truncations, infos),
            *np.array_split(np.ascontiguousarray(obs).reshape(-1), self.obs_chunks),
        )

    def _each_env(self, local_ids: list[int], run: Any) -> tuple[list[Any], EnvFailure | None]:
        """``run(row, i)`` (a list of one result) for each env in turn; the others go on after a failure.
        Returns the results (``{}`` for an env that raised) and the first failure."""
        results: list[Any] = []
        failed = None
        for row, i in enumerate(local_ids):
            try:
                results += run(row, i)
            except Exception as exc:
                results.append({})
                failed = failed or EnvFailure.of(exc, i)
        return results, failed

    def _rows_or_failure(
        self, local_ids: list[int], infos: list[dict], failed: EnvFailure | None, chunked: bool = True
    ) -> tuple:
        if failed is not None:  # a new one: an exception travels as its constructor's arguments
            raise EnvFailure(failed.reply, self._result(local_ids, infos, chunked=False))
        return self._result(local_ids, infos, chunked)

    def reset(
        self,
        local_ids: list[int],
        seeds: list[int | None],
        options: dict | None,
        streams: list[Any] | None = None,
    ) -> tuple:
        """Reset envs ``local_ids`` as the pool's `messages.Reset` says (``streams``: where each env draws
        its episodes' seeds, given again after a restart, since Ray rebuilds the actor from its first
        payload)."""
        if len(local_ids) == len(self.envs):
            self.restarted = False

        def reset_one(row: int, i: int) -> list[dict]:
            return self.group.reset([i], [seeds[row]], options, None if streams is None else [streams[row]])

        infos, failed = self._each_env(local_ids, reset_one)
        return self._rows_or_failure(local_ids, infos, failed)

    def step(self, local_ids: list[int], actions: Any, chunked: bool = True) -> tuple:
        if self.restarted:
            raise ActorRestarted()
        array_actions = isinstance(self.group.action_space, rows.ARRAY_SPACES)

        def step_one(row: int, i: int) -> list[dict]:
            action = (
                actions[row : row + 1]
                if array_actions
                else rows.take_rows(self.group.action_space, actions, np.array([row]))
            )
            return self.group.step([i], action)

        infos, failed = self._each_env(local_ids, step_one)
        return self._rows_or_failure(local_ids, infos, failed, chunked)

    def step_all(self, actions: Any) -> bytes:
        """Step every env; the compiled graph's task. Its channels take any size, so no chunks.

        The result goes pickled: a compiled graph hands NumPy arrays to the driver as views of its
        shared-memory channel, which cannot take the next step's result until every view is gone,
        and an array in ``infos`` (``final_obs``) may be kept by the user for ever. A failure is
        returned, not raised: when one task of a compiled graph raises, Ray raises that error for
        every actor's output and the other actors' rows are lost.
        """
        self.graph_step_running = True
        try:
            return pickle.dumps(self.step(list(range(len(self.envs))), actions, chunked=False), protocol=5)
        except EnvFailure as failure:
            outcome = failure
        except Exception as exc:
            outcome = EnvFailure.of(exc, None)
        finally:
            self.graph_step_running = False
        try:
            return pickle.dumps(outcome, protocol=5)
        except Exception:  # the rows themselves cannot be pickled (an info value): send the error alone
            return pickle.dumps(
                EnvFailure(
                    outcome.reply._replace(traceback=outcome.reply.traceback + traceback.format_exc())
                ),
                protocol=5,
            )

    def in_graph_step(self) -> bool:
        """Whether a step of the compiled graph runs now (an ordinary call, answered beside the graph's
        loop)."""
        return self.graph_step_running

    def call(self, name: str, args: tuple, kwargs: dict, local_ids: list[int] | None = None) -> bytes:
        """The value of each env of ``local_ids`` (None: all), pickled here so that a value that cannot travel
        names its env."""
        local_ids = list(range(len(self.envs))) if local_ids is None else local_ids
        values, failed = self._each_env(local_ids, lambda row, i: self.group.call([i], name, args, kwargs))
        if failed is not None:
            raise failed
        try:
            return cloudpickle.dumps(values)
        except Exception as exc:
            error = exc  # find the value that cannot travel, to name its env
        for i, value in zip(local_ids, values, strict=True):
            try:
                cloudpickle.dumps(value)
            except Exception as exc:
                # A TypeError, as the process backends report a reply they cannot pickle.
                raise EnvFailure.of(
                    TypeError(
                        f"{name!r} of this env is a {type(value).__name__}, which cannot be sent from the "
                        f"Ray actor to the driver ({type(exc).__name__}: {exc}); call a method that "
                        f"returns plain data instead"
                    ),
                    i,
                ) from None
        raise error

    def set_attr(self, name: str, values: list[Any], local_ids: list[int] | None = None) -> None:
        def set_one(row: int, i: int) -> list[None]:
            self.group.set_attr([i], name, [values[row]])
            return [None]

        _, failed = self._each_env(list(range(len(self.envs))) if local_ids is None else local_ids, set_one)
        if failed is not None:
            raise failed

    def clone_states(self, local_ids: list[int]) -> bytes:
        """The states of envs ``local_ids`` (`EnvGroup.clone_states`), pickled here as `call`'s values are.
        An actor Ray restarted holds new episodes, not the ones the driver knows: it refuses, as a step."""
        if self.restarted:
            raise ActorRestarted()
        states, failed = self._each_env(local_ids, lambda row, i: self.group.clone_states([i]))
        if failed is not None:
            raise failed
        return cloudpickle.dumps(states)

    def restore_states(self, local_ids: list[int], states: list[Any]) -> tuple:
        """Put envs ``local_ids`` in ``states`` (`EnvGroup.restore_states`: all checked before any env
        changes); their rows, as a reset's."""
        if self.restarted:
            raise ActorRestarted()
        try:
            infos = self.group.restore_states(local_ids, states)
        except Exception as exc:
            raise EnvFailure(messages.error_reply(exc)) from None
        return self._result(local_ids, infos)

    def needs_reset(self) -> None:
        self.group.answer(messages.NeedsReset())

    def close(self) -> None:
        # The envs, not the group: an actor closed before attach has built envs but no group.
        for env in self.envs:
            env.close()
