"""The envs' side of a vector env: `Stepper`, what a backend implements.

`torchwm.vector.base.VectorEnv` is the public contract, written once: the
one-thread hold, every check of the caller's arguments, seeds, ``env_ids``,
the order of rows, infos and closing. It holds one stepper (``vec._stepper``)
and hands it each call once the arguments are checked, so that a step goes
base -> stepper -> transport and back, once each way. A stepper does what it
is asked and no more: ``sync``'s runs its envs in a loop
(`torchwm.vector.sync.SyncStepper`), a worker pool's reaches its workers
(`torchwm.vector.pool_stepper.PoolStepper`), a plugin's drives its own engine.

A stepper's constructor checks its options, builds its `StepState` first (no
I/O, nothing started), then starts its envs and sets what the vector env reads
once: the spaces, ``metadata``, ``render_mode`` and the batch arrays
(``observations``, ``rewards``, ``terminations``, ``truncations``, one row per
env). The helpers below check the options every stepper shares, before
anything starts.
"""

from __future__ import annotations

import abc
import inspect
import time
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from torchwm.env_state import EnvState
from torchwm.errors import EnvTimeoutError
from torchwm.spec import VecSpec, check_count, check_timeout
from torchwm.vector.episode_seeds import EpisodeSeedBook, SeedStream
from torchwm.vector.step_state import StepState

ObservationMode = str | tuple[gym.Space, gym.Space]


def checked_batch_size(batch_size: Any, num_envs: int, owner: str = "") -> int | None:
    """The ``batch_size`` option (how many envs `recv` returns at the least): None (every env in flight) or
    an int from 1 to ``num_envs``; every backend checks it here, before anything starts.

    Args:
        owner: names the backend in the message (``"shmem: "``), or ``""``.
    """
    if batch_size is None:
        return None
    batch_size = check_count(f"{owner}batch_size", batch_size)
    if batch_size > num_envs:
        raise ValueError(f"{owner}batch_size must be an int from 1 to num_envs={num_envs}, got {batch_size}")
    return batch_size


# `checked_batch_size` under the name the plugin API exports (`torchwm.plugin_api.checks.check_batch_size`);
# inside torchwm the other name keeps it apart from the conformance check `torchwm.testing.check_batch_size`.
check_batch_size = checked_batch_size


def check_observation_mode(observation_mode: Any) -> ObservationMode:
    """Gymnasium's ``observation_mode`` option, checked as its vector envs check it (same types, same words).

    ``"same"`` (every env has the same observation space), ``"different"`` (spaces of one shape and dtype,
    batched with Gymnasium's `batch_differing_spaces`), or a tuple ``(batched space, single space)``, in
    the order Gymnasium's vector envs read it.
    """
    if isinstance(observation_mode, tuple) and len(observation_mode) == 2:
        if not all(isinstance(space, gym.Space) for space in observation_mode):
            raise TypeError(
                f"Expected both elements of observation_mode to be Spaces, got {type(observation_mode[0])} "
                f"and {type(observation_mode[1])}"
            )
        return observation_mode
    if isinstance(observation_mode, str) and observation_mode in ("same", "different"):
        return observation_mode
    raise ValueError(
        f"Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and batch "
        f"observation space, actual got {observation_mode!s:.200}"
    )


def resolve_spaces(
    owner: str,
    observation_mode: ObservationMode,
    observation_spaces: list[gym.Space],
    action_spaces: list[gym.Space],
) -> tuple[gym.Space, gym.Space, gym.Space]:
    """(single observation space, batched observation space, single action space) of envs with these spaces.

    Every env is checked, as Gymnasium's vector envs check them, with a ``RuntimeError`` that starts with
    Gymnasium's sentence and names the env: under ``"same"`` each observation space must equal env 0's,
    otherwise have the single space's shape and dtype; every action space must equal env 0's.

    Args:
        owner: the class named in the message (``SyncVectorEnv``, ...).
        observation_mode: as `check_observation_mode` returns it.
        observation_spaces, action_spaces: one per env, in env order.
    """
    same = isinstance(observation_mode, str) and observation_mode == "same"
    if isinstance(observation_mode, tuple):
        batched, single = observation_mode
    else:
        batched, single = None, observation_spaces[0]
    for i, space in enumerate(observation_spaces):
        if same and space != single:
            raise RuntimeError(
                f"{owner}(..., observation_mode='same') however the sub-environments observation spaces are "
                f"not equivalent. (env {i} has observation space {space}, unlike env 0's {single}.) If "
                f"this is intentional, use `observation_mode='different'` instead."
            )
        if not same and not is_space_dtype_shape_equiv(space, single):
            raise RuntimeError(
                f"{owner}(..., observation_mode='different' or custom space) however the sub-environments "
                f"observation spaces do not share a common shape and dtype: env {i} has observation space "
                f"{space}, and the single observation space is {single}"
            )
    for i, space in enumerate(action_spaces):
        if space != action_spaces[0]:
            raise RuntimeError(
                f"Sub-environment action space doesn't make the `single_action_space`: env {i} has action "
                f"space {space}, unlike env 0's {action_spaces[0]}; every env of a vector env must have the "
                f"same one"
            )
    if batched is None:
        n = len(observation_spaces)
        batched = batch_space(single, n) if same else batch_differing_spaces(observation_spaces)
    return single, batched, action_spaces[0]


def wait_ready_with_deadline(
    stepper: Stepper, candidates: np.ndarray, count: int, timeout: float | None, min_ready: int
) -> tuple[np.ndarray, list[dict]]:
    """`Stepper.wait_ready` with `recv`'s ``min_ready``: the stepper's own, or for a stepper whose
    ``wait_ready`` does not take it, a wait to the deadline and then for ``min_ready`` envs (within the
    stepper's ``timeout``, from the start)."""
    if "min_ready" in inspect.signature(stepper.wait_ready).parameters:
        return stepper.wait_ready(candidates, count, timeout, min_ready=min_ready)
    started = time.monotonic()
    try:
        return stepper.wait_ready(candidates, count, timeout)
    except EnvTimeoutError:
        limit = stepper.timeout
        rest = None if limit is None else max(limit - (time.monotonic() - started), 0.0)
        return stepper.wait_ready(candidates, min_ready, rest)


class Stepper(abc.ABC):
    """The envs' side of one vector env. `torchwm.vector.base.VectorEnv` calls its methods one at a time
    (it holds the vector env's lock), with arguments already checked.

    Args:
        spec: what to build; ``spec.num_envs`` envs.
        batch_size: how many envs `recv` returns at the least (None: every env in flight); checked here.
        timeout: seconds any wait on envs may take before `EnvTimeoutError` (None or ``math.inf``: none);
            checked here. The vector env's ``timeout`` is this attribute.

    Class attributes a backend may set:
        check_action_values: the envs crash on an out-of-range discrete action (a C++ engine): `send`
            checks action values too. Python envs get any value, as in Gymnasium.
        resets_while_stepping: `reset(env_ids=...)` may reset envs while other envs have a step in
            flight (each env lives its own cycle, as Tianshou's asynchronous collector wants); False for
            engines that step a batch as a whole.
        close_wait_seconds: how long a close from another thread waits for a call under way to leave
            before `close` frees what it may still use (the call then raises `ClosedEnvironmentError`).
    """

    check_action_values: ClassVar[bool] = False
    resets_while_stepping: ClassVar[bool] = True
    close_wait_seconds: ClassVar[float] = 1.0
    # Why `clone_state`/`restore_state` cannot work here (None: the stepper implements `clone_states` and
    # `restore_states`): the error they raise, in one line.
    state_refusal: ClassVar[str | None] = None

    # Seeded autoresets (`torchwm.vector.episode_seeds`): a stepper whose envs an `EnvGroup` resets makes its
    # book (`EpisodeSeedBook`) and passes `reset_envs`' ``streams`` on in its `Reset`s; None: it cannot seed
    # autoresets, and the vector env refuses to turn them on.
    episode_seeds: EpisodeSeedBook | None = None

    # Set by a subclass's constructor once its envs are up; the vector env reads them.
    single_observation_space: gym.Space
    single_action_space: gym.Space
    observation_space: gym.Space | None = None  # the batched space, if not batch_space of the single one
    metadata: dict[str, Any]
    render_mode: str | None = None
    observations: Any  # one row per env; a stepper may replace the object between calls
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray

    # True once the stepper closed itself after a fault that leaves nothing usable (a step that cannot be
    # waited for again, a forked copy): the vector env then closes, and says so from then on.
    closed: bool = False

    def __init__(self, spec: VecSpec, *, batch_size: int | None = None, timeout: float | None = None) -> None:
        n = spec.num_envs
        self.spec = spec
        self.num_envs = n
        self.autoreset_mode = spec.autoreset
        self.state = StepState(n, checked_batch_size(batch_size, n) or n)
        self.timeout = check_timeout(timeout)

    @abc.abstractmethod
    def reset_envs(
        self,
        ids: np.ndarray,
        seeds: list[int | None],
        options: dict | None,
        streams: list[SeedStream | None] | None = None,
    ) -> list[dict]:
        """Reset envs ``ids`` (in that order) with ``seeds`` (one each, None: no seed) and ``options``; write
        their rows of the batch; return their infos in the order of ``ids``. Blocks until done, within
        ``self.timeout``. ``streams`` (one each, only for a stepper with an `episode_seeds` book): where each
        env draws its episodes' seeds, for its `torchwm.vector.messages.Reset`."""

    @abc.abstractmethod
    def send_step(self, ids: np.ndarray, actions: Any) -> None:
        """Start stepping envs ``ids`` (ascending, or every env in env order); ``actions`` has one row per
        id. May return before the step is done. The vector env records them in flight after."""

    @abc.abstractmethod
    def wait_ready(
        self, candidates: np.ndarray, count: int, timeout: float | None, *, min_ready: int | None = None
    ) -> tuple[np.ndarray, list[dict]]:
        """Wait until ``count`` of the envs ``candidates`` (all in flight) have finished; return those ids
        (`StepState.collect`: the envs sent longest ago first) and their infos, their rows written.

        After ``timeout`` seconds raise `EnvTimeoutError`, the envs still in flight. With ``min_ready``
        (`recv`'s), the timeout is a deadline instead: at it, return every env ready if at least
        ``min_ready`` are, else wait on for ``min_ready`` within ``self.timeout``. A stepper that does not
        take the keyword is waited on again for ``min_ready`` envs after the timeout."""

    @abc.abstractmethod
    def call(self, name: str | Callable, args: tuple, kwargs: dict, ids: list[int]) -> list[Any]:
        """Call ``name`` (a method, an attribute or a function of the env) on envs ``ids`` (in the caller's
        order); one value each."""

    def clone_states(self, ids: np.ndarray) -> list[EnvState]:
        """The whole state of envs ``ids`` (in that order), one `torchwm.env_state.EnvState` each, with its
        last observation and autoreset bookkeeping (`torchwm.vector.env_group.EnvGroup.clone_states`, where
        the envs live); changes nothing. A backend that cannot sets `state_refusal` instead."""
        raise NotImplementedError(self.state_refusal or f"{type(self).__name__} cannot clone env states")

    def restore_states(self, ids: np.ndarray, states: list[EnvState]) -> list[dict]:
        """Put envs ``ids`` in ``states`` (checked by the vector env already: their stacks are this vector
        env's), writing their rows of the batch as a reset does; their infos, in the order of ``ids``. The
        group where the envs live checks each state against its env before any env changes
        (`torchwm.vector.env_group.EnvGroup.restore_states`)."""
        raise NotImplementedError(self.state_refusal or f"{type(self).__name__} cannot restore env states")

    @abc.abstractmethod
    def set_attr(self, name: str, values: list[Any], ids: list[int]) -> None:
        """Set attribute ``name`` on envs ``ids``, one value each."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every env, worker and buffer; called once, by the vector env's close. (A constructor that
        raises cleans up what it started itself: close is not called then.)"""

    def interrupt(self) -> bool:
        """Another thread's call is under way while this thread closes the env: end what that call waits on,
        if the stepper can (a pool ends its workers). Returns whether the close should then wait for the call
        to leave (False: it cannot be this process's, as in a forked copy)."""
        return True
