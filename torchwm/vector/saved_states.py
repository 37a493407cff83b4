"""Saving and restoring the envs of a vector env: `SavedStates`, behind `clone_state` and `restore_state`
(docs/state.md).

Each env's whole stack is saved where it lives (`torchwm.env_state`, through the stepper's
`clone_states`, one round trip: the `torchwm.vector.messages.CloneStates` command of a pool), with its
last observation and autoreset bookkeeping, and stamped here with what it belongs to
(`torchwm.env_state.StackIdentity`). A restore checks every state here first (`check_state`: its stack,
its observation, each layer's state this process knows the rule of) before any message goes to a
worker, so that a state that does not fit changes no env on any worker; the stepper's `restore_states`
(`RestoreStates`, one round trip) then checks each state against its env and restores them, the rows
written once where the envs live, and the step state learns that those envs were reset.

`torchwm.vector.base.VectorEnv` holds one `SavedStates` over its stepper: its `clone_state` and
`restore_state` take the hold, choose the envs and return the rows; the states are this object's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.env_state import EnvState, StackIdentity, check_state
from torchwm.spec import VecSpec
from torchwm.vector.stepper import Stepper


class SavedStates:
    """The states of one stepper's envs: saved, stamped with their stack, checked, restored.

    Args:
        stepper: the envs whose states are saved and restored.
        spec, single_observation_space: what the envs are, for their `StackIdentity` (which no later change
            of the vector env's spec, as ``autoreset_seeds``, changes).
    """

    def __init__(self, stepper: Stepper, spec: VecSpec, single_observation_space: gym.Space) -> None:
        self.stepper = stepper
        self.spec = spec
        self.single_observation_space = single_observation_space

    def stack(self) -> StackIdentity:
        """What the envs' states belong to."""
        return StackIdentity.of(self.spec, self.single_observation_space)

    def check_supported(self) -> None:
        """`NotImplementedError` (the stepper's words) on a backend that cannot save states."""
        refusal = self.stepper.state_refusal
        if refusal is not None:
            raise NotImplementedError(refusal)

    def clone(self, ids: np.ndarray) -> tuple[EnvState, ...]:
        """The states of envs ``ids`` (in that order), each stamped with the stack it belongs to."""
        stack = self.stack()
        return tuple(dataclasses.replace(state, stack=stack) for state in self.stepper.clone_states(ids))

    def restore(self, states: Any, ids: np.ndarray) -> list[dict]:
        """Put envs ``ids`` in ``states`` (one each, in that order), every state checked first; their rows
        are written as a reset writes them, and the step state knows they were reset. Their infos, in the
        order of ``ids``."""
        self.check_states(states, ids)
        infos = self.stepper.restore_states(ids, list(states))
        self.stepper.state.was_reset(ids)
        return infos

    def check_states(self, states: Any, ids: np.ndarray) -> None:
        """Every state of a restore, checked before anything is sent (see `check_state`)."""
        if isinstance(states, EnvState) or not isinstance(states, (list, tuple)):
            raise TypeError(
                f"restore_state expected a tuple or list of EnvState (one per env restored, as "
                f"clone_state returns them), got {type(states).__name__}"
            )
        if len(states) != ids.size:
            raise ValueError(f"restore_state expected {ids.size} states, one per env, got {len(states)}")
        stack = self.stack()
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
