"""Saving and restoring the envs of a vector env: `clone_state` and `restore_state` (docs/state.md).

Each env's whole stack is saved where it lives (`torchwm.env_state`, run through the stepper's `call`),
with its last observation and autoreset bookkeeping (`torchwm.vector.env_group`); a restore checks
every env's stack against its state before any env changes, then writes the restored rows into the
parent's batch and tells the step state that those envs were reset.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from torchwm.env_state import EnvState, describe_mismatch
from torchwm.vector.batching import InfoBatcher, put_rows
from torchwm.vector.env_group import clone_group_env, group_env_layers, restore_group_env
from torchwm.vector.step_state import StepState
from torchwm.vector.stepper import Stepper


class SavedStates:
    """`clone_state` and `restore_state` of `torchwm.vector.base.VectorEnv` (mixed into it)."""

    num_envs: int
    single_observation_space: Any
    _stepper: Stepper
    _state: StepState
    _held: Callable[[str], contextlib.AbstractContextManager[None]]
    _env_ids: Callable[[Any], np.ndarray]
    _check_nothing_pending: Callable[[str], None]
    _rows: Callable[..., Any]
    _all_rows: Callable[[], Any]
    _spread: Callable[[np.ndarray, list[dict]], list[dict]]

    def clone_state(self, env_ids: Any = None) -> tuple[EnvState, ...]:
        """The state of every env, or of the envs ``env_ids`` (in that order): one picklable `EnvState`
        each, the whole stack's (every wrapper, the emulator or physics and their generators), with the
        env's last observation and autoreset bookkeeping. `restore_state` puts an env back in it; the
        envs are unchanged. See docs/state.md.

        Raises:
            TypeError: a wrapper or env cannot be saved (named by its class); nothing changed.
            AlreadyPendingCallError: a step is in flight (`recv` it first), as for `reset`.
            NotImplementedError: the backend cannot save states (``ale-native``).
        """
        with self._held("cloning env states"):
            ids = self._state_call_ids(env_ids, "clone_state")
            return tuple(self._stepper.call(clone_group_env, (), {}, ids.tolist()))

    def restore_state(self, states: Any, env_ids: Any = None) -> tuple[Any, dict[str, Any]]:
        """Put every env, or the envs ``env_ids``, in ``states`` (one `EnvState` from `clone_state` each, in
        the order of ``env_ids``; from any env built from the same spec, on any backend). Returns the
        restored envs' observations and infos, batched as `reset` returns them: every env's rows without
        ``env_ids``, else the rows of ``env_ids`` in that order with ``infos["env_id"]``. The same actions
        then give the same observations, rewards, terminations and truncations, bit for bit.

        Raises:
            TypeError, ValueError: ``states`` are no states of these envs' stacks (nothing changed).
            AlreadyPendingCallError: a step is in flight, as for `reset`.
        """
        with self._held("restoring env states"):
            ids = self._state_call_ids(env_ids, "restore_state")
            if isinstance(states, EnvState) or not isinstance(states, (list, tuple)):
                raise TypeError(
                    f"restore_state expected a tuple or list of EnvState (one per env restored, as "
                    f"clone_state returns them), got {type(states).__name__}"
                )
            if len(states) != ids.size:
                raise ValueError(f"restore_state expected {ids.size} states, one per env, got {len(states)}")
            for i, state in zip(ids.tolist(), states, strict=True):
                if not isinstance(state, EnvState):
                    raise TypeError(
                        f"restore_state expected EnvState values (from clone_state), got "
                        f"{type(state).__name__} for env {i}"
                    )
                if state.observation is None:
                    raise ValueError(
                        f"restore_state: the state given for env {i} has no observation: it was saved from a "
                        f"lone env (torchwm.env_state.clone_env_state); give a state from envs.clone_state()"
                    )
            # Every env's stack checked before any env changes.
            layers = self._stepper.call(group_env_layers, (), {}, ids.tolist())
            for i, state, names in zip(ids.tolist(), states, layers, strict=True):
                mismatch = describe_mismatch(names, [name for name, _ in state.layers])
                if mismatch:
                    raise ValueError(f"restore_state: the state given for env {i} does not fit: {mismatch}")
            observations = self._stepper.call_each(restore_group_env, list(states), ids.tolist())
            stepper = self._stepper
            for i, state, obs in zip(ids.tolist(), states, observations, strict=True):
                # The parent's batch (a pool's; the same memory under sync and shmem, written again).
                put_rows(self.single_observation_space, stepper.observations, i, obs)
                stepper.rewards[i] = 0.0
                stepper.terminations[i] = state.terminated
                stepper.truncations[i] = state.truncated
            self._state.was_reset(ids)
            infos: list[dict] = [{} for _ in range(ids.size)]
            if env_ids is not None:
                obs_rows, _, _, _, batched = self._rows(ids, infos)
                return obs_rows, batched
            return self._all_rows(), InfoBatcher(self.num_envs).batch(self._spread(ids, infos))

    def _state_call_ids(self, env_ids: Any, calling: str) -> np.ndarray:
        """The envs of a `clone_state`/`restore_state`, once the backend and the step state allow it."""
        refusal = self._stepper.state_refusal
        if refusal is not None:
            raise NotImplementedError(refusal)
        ids = self._env_ids(env_ids)
        self._check_nothing_pending(calling)
        return ids
