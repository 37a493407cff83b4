"""Saving and restoring the envs of a vector env: `clone_state` and `restore_state` (docs/state.md).

Each env's whole stack is saved where it lives (`torchwm.env_state`, through the stepper's
`clone_states`, one round trip: the `torchwm.vector.messages.CloneStates` command of a pool), with its
last observation and autoreset bookkeeping, and stamped here with what it belongs to
(`torchwm.env_state.StackIdentity`). A restore checks every state here first (`check_state`: its stack,
its observation, each layer's state this process knows the rule of) before any message goes to a
worker, so that a state that does not fit changes no env on any worker; the stepper's `restore_states`
(`RestoreStates`, one round trip) then checks each state against its env and restores them, the rows
written once where the envs live, and the step state learns that those envs were reset.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from torchwm.env_state import EnvState, StackIdentity, check_state
from torchwm.spec import VecSpec
from torchwm.vector.batching import InfoBatcher
from torchwm.vector.step_state import StepState
from torchwm.vector.stepper import Stepper


class SavedStates:
    """`clone_state` and `restore_state` of `torchwm.vector.base.VectorEnv` (mixed into it)."""

    num_envs: int
    single_observation_space: Any
    _vec_spec: VecSpec
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
        env's last observation, its autoreset bookkeeping and what it belongs to (the spec's identity and
        the observations' shape). `restore_state` puts an env back in it; the envs are unchanged. See
        docs/state.md.

        Raises:
            TypeError: a wrapper or env cannot be saved (named by its class); nothing changed.
            AlreadyPendingCallError: a step is in flight (`recv` it first), as for `reset`.
            WorkerError: an env lost its episode to a worker's restart (``restart_on_crash``) that its
                next step has not reported yet; nothing changed.
            NotImplementedError: the backend cannot save states (``ale-native``).
        """
        with self._held("cloning env states"):
            ids = self._state_call_ids(env_ids, "clone_state")
            stack = self._stack_identity()
            return tuple(dataclasses.replace(state, stack=stack) for state in self._stepper.clone_states(ids))

    def restore_state(self, states: Any, env_ids: Any = None) -> tuple[Any, dict[str, Any]]:
        """Put every env, or the envs ``env_ids``, in ``states`` (one `EnvState` from `clone_state` each, in
        the order of ``env_ids``; from any env built from the same spec, on any backend). Returns the
        restored envs' observations and infos, batched as `reset` returns them: every env's rows without
        ``env_ids``, else the rows of ``env_ids`` in that order with ``infos["env_id"]``. The same actions
        then give the same observations, rewards, terminations and truncations, bit for bit.

        Raises:
            TypeError, ValueError: ``states`` are no states of these envs' stacks, or a state is damaged;
                every state is checked before any env changes, so nothing changed.
            AlreadyPendingCallError: a step is in flight, as for `reset`.
        """
        with self._held("restoring env states"):
            ids = self._state_call_ids(env_ids, "restore_state")
            self._check_states(states, ids)
            infos = self._stepper.restore_states(ids, list(states))
            self._state.was_reset(ids)
            if env_ids is not None:
                obs_rows, _, _, _, batched = self._rows(ids, infos)
                return obs_rows, batched
            return self._all_rows(), InfoBatcher(self.num_envs).batch(self._spread(ids, infos))

    def _stack_identity(self) -> StackIdentity:
        return StackIdentity.of(self._vec_spec, self.single_observation_space)

    def _check_states(self, states: Any, ids: np.ndarray) -> None:
        """Every state of a restore, checked before anything is sent (see `check_state`)."""
        if isinstance(states, EnvState) or not isinstance(states, (list, tuple)):
            raise TypeError(
                f"restore_state expected a tuple or list of EnvState (one per env restored, as "
                f"clone_state returns them), got {type(states).__name__}"
            )
        if len(states) != ids.size:
            raise ValueError(f"restore_state expected {ids.size} states, one per env, got {len(states)}")
        stack = self._stack_identity()
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
            try:
                check_state(state, stack)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"restore_state: the state given for env {i} does not fit: {exc}") from None

    def _state_call_ids(self, env_ids: Any, calling: str) -> np.ndarray:
        """The envs of a `clone_state`/`restore_state`, once the backend and the step state allow it."""
        refusal = self._stepper.state_refusal
        if refusal is not None:
            raise NotImplementedError(refusal)
        ids = self._env_ids(env_ids)
        self._check_nothing_pending(calling)
        return ids
