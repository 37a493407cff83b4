"""Save and restore one env's whole state, wrapper stack included: `clone_env_state`, `restore_env_state`.

An env is a chain of layers: the wrappers (each reached from the one above by Gymnasium's
``Wrapper.env``), down to the innermost env (and, under torchwm's fused Atari env, its own layers
down to ALE). The state of an env is every layer's state, outermost first, in an `EnvState`: a plain,
picklable value that can be restored into this env or into any env built from the same spec (another
env index, another vector env, another process, another backend).

How a layer's state is saved, first match wins:

1. The layer's class defines ``get_torchwm_state(self)`` (its own state only, not the envs it
   wraps, returned as a value restore may reuse many times) and ``set_torchwm_state(self, state)``:
   the protocol for a third-party wrapper or env (`StatefulLayer`, exported by `torchwm.plugin_api`).
2. A built-in handler for a class in its MRO: Gymnasium's ``TimeLimit``, ``OrderEnforcing``,
   ``FrameStackObservation``, ``RecordEpisodeStatistics`` and ``AtariPreprocessing``, torchwm's
   Atari wrappers and fused Atari env, ALE's ``AtariEnv`` (the emulator with its RNG, so that
   sticky actions replay exactly) and Gymnasium's MuJoCo envs (their physics state: MuJoCo's
   objects cannot be deep-copied).
3. Any other layer: a deep copy of its ``__dict__``, without what every Gymnasium wrapper or env
   holds as configuration (the link to the env below, the spaces, the spec) and without references
   to other layers of the chain. A layer that holds a shared object of another kind (a handle it
   also reaches through the chain) must use the protocol.

A layer that cannot be saved (its deep copy raises: a lock, an open file, a process) makes
`clone_env_state` raise `TypeError` naming its class; nothing has changed then. `restore_env_state`
checks that the state's layers are this env's (the same classes, in order) before it changes any.
A random generator's state is saved as ``bit_generator.state``.

The vector side (`torchwm.vector.base.VectorEnv.clone_state`) adds each env's last observation and
its autoreset bookkeeping; docs/state.md is the user's page.
"""

from __future__ import annotations

import copy
import dataclasses
import time
import types
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

GET_STATE = "get_torchwm_state"
SET_STATE = "set_torchwm_state"


@runtime_checkable
class StatefulLayer(Protocol):
    """What a wrapper or env defines to say how its own state is saved (the envs it wraps are saved
    by their own rules). ``get_torchwm_state`` returns a picklable value that later steps do not
    change (copy arrays); ``set_torchwm_state`` takes one such value, possibly many times, and must not
    keep mutable parts of it (copy them in)."""

    def get_torchwm_state(self) -> Any: ...

    def set_torchwm_state(self, state: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class EnvState:
    """One env's saved state (opaque to users: restore it, pickle it, keep it).

    Attributes:
        layers: ``(class name, state)`` of each layer, outermost first.
        observation: the env's last observation (set by the vector env; None for a lone env).
        autoreset_pending: the vector env's next step resets this env (next_step autoreset).
        terminated, truncated: the flags of its last step.
    """

    layers: tuple[tuple[str, Any], ...]
    observation: Any = None
    autoreset_pending: bool = False
    terminated: bool = False
    truncated: bool = False

    def __repr__(self) -> str:
        return f"EnvState({' > '.join(name for name, _ in self.layers)})"


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


# -- generators ------------------------------------------------------------------------------------


def _rng_state(generator: np.random.Generator | None) -> dict | None:
    return None if generator is None else dict(copy.deepcopy(generator.bit_generator.state))


def _set_rng(env: gym.Env, state: dict | None) -> None:
    """Give ``env`` (a `gym.Env`, not a wrapper) a generator in ``state``, in place when it has one of the
    same kind, so that whoever holds a reference to it sees the restored one."""
    if state is None:
        env._np_random = None
        return
    current = env._np_random
    if current is None or type(current.bit_generator).__name__ != state["bit_generator"]:
        current = np.random.Generator(getattr(np.random, state["bit_generator"])())
        env._np_random = current
    current.bit_generator.state = copy.deepcopy(state)


# -- built-in handlers -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Handler:
    save: Callable[[Any], Any]
    load: Callable[[Any, Any], None]
    inner: Callable[[Any], Any] | None = None  # the next layer down, when it is not ``layer.env``


def _copy_into(target: Any, value: Any) -> Any:
    """``value`` copied into ``target`` where it is an array or deque of the same kind (references to it
    stay valid), else a deep copy to assign."""
    if isinstance(target, np.ndarray) and isinstance(value, np.ndarray) and target.shape == value.shape:
        target[...] = value
        return target
    if isinstance(target, deque) and isinstance(value, deque) and target.maxlen == value.maxlen:
        target.clear()
        target.extend(copy.deepcopy(value))
        return target
    return copy.deepcopy(value)


def _attributes(*names: str, clock: tuple[str, ...] = ()) -> _Handler:
    """A handler that saves the attributes ``names``. ``clock``: attributes that hold a
    ``time.perf_counter()`` start, saved as the seconds elapsed (a clock does not travel between
    processes)."""

    def save(layer: Any) -> dict[str, Any]:
        state = {name: copy.deepcopy(getattr(layer, name)) for name in names}
        now = time.perf_counter()
        state.update({name: now - getattr(layer, name) for name in clock})
        return state

    def load(layer: Any, state: dict[str, Any]) -> None:
        for name in names:
            setattr(layer, name, _copy_into(getattr(layer, name), state[name]))
        now = time.perf_counter()
        for name in clock:
            setattr(layer, name, now - state[name])

    return _Handler(save, load)


# ALE's state leaves out the last action it applied, which a sticky action repeats: the first frames
# after a restore would repeat whatever the emulator did last (a known ALE limitation). The clone finds
# which of the env's actions acts as that last action (the frames after the state, probed from the state
# with the live emulator, then with each candidate), and the restore makes it the last action again.
_PROBE_FRAMES = 16  # a sticky run longer than this (probability 0.25**16) is not told apart
_FORCE_FRAMES = 32  # frames of one action that make it the last action, from the state's generator


def _force_last_action(ale: Any, state: Any, action: Any) -> None:
    """``ale`` in ``state``, with ``action`` as the last action a sticky action repeats."""
    ale.restoreState(state)
    for _ in range(_FORCE_FRAMES):
        ale.act(action)
    ale.restoreState(state)


def _sticky_action(env: Any, state: Any) -> int | None:
    """The action that stands for the emulator's last one after ``state`` (None: no sticky actions). Leaves
    ``ale`` in ``state`` with that last action."""
    import ale_py

    ale = env.ale
    if ale.getFloat("repeat_action_probability") <= 0.0:
        return None
    noop = ale_py.Action.NOOP

    def frames() -> list[bytes]:
        seen = []
        for _ in range(_PROBE_FRAMES):
            ale.act(noop)
            seen.append(ale.getRAM().tobytes())
        seen.append(ale.cloneState(include_rng=True).serialize())  # the whole machine, at the end
        return seen

    truth = frames()  # with the emulator's own last action
    for candidate in dict.fromkeys([*env._action_set, noop]):
        _force_last_action(ale, state, candidate)
        if frames() == truth:
            _force_last_action(ale, state, candidate)
            return int(candidate.value)
    raise TypeError(
        f"{type(env).__name__}: the last action ALE applied is none of this env's actions, so a sticky "
        f"action after a restore would differ"
    )


def _save_atari(env: Any) -> dict[str, Any]:
    # include_rng: the emulator's generator draws the sticky actions; without it a replay differs.
    state = env.ale.cloneState(include_rng=True)
    return {
        "ale": state,
        "sticky_action": _sticky_action(env, state),
        "np_random": _rng_state(env._np_random),
        "np_random_seed": env._np_random_seed,
    }


def _load_atari(env: Any, state: dict[str, Any]) -> None:
    if state["sticky_action"] is None:
        env.ale.restoreState(state["ale"])
    else:
        import ale_py

        _force_last_action(env.ale, state["ale"], ale_py.Action(state["sticky_action"]))
    _set_rng(env, state["np_random"])
    env._np_random_seed = state["np_random_seed"]


def _save_rom_once(env: Any) -> dict[str, Any]:
    env.load_rom()
    return _save_atari(env)


def _load_rom_once(env: Any, state: dict[str, Any]) -> None:
    env.load_rom()
    _load_atari(env, state)


def _save_mujoco(env: Any) -> dict[str, Any]:
    import mujoco

    # MuJoCo's integration state: time, qpos, qvel, act, warm start, controls, applied forces, mocap.
    kind = mujoco.mjtState.mjSTATE_INTEGRATION
    physics = np.empty(mujoco.mj_stateSize(env.model, kind), dtype=np.float64)
    mujoco.mj_getState(env.model, env.data, physics, kind)
    return {
        "physics": physics,
        "np_random": _rng_state(env._np_random),
        "np_random_seed": env._np_random_seed,
    }


def _load_mujoco(env: Any, state: dict[str, Any]) -> None:
    import mujoco

    kind = mujoco.mjtState.mjSTATE_INTEGRATION
    physics = state["physics"]
    if physics.size != mujoco.mj_stateSize(env.model, kind):
        raise ValueError(
            f"this MuJoCo state has {physics.size} numbers, but {type(env).__name__}'s model takes "
            f"{mujoco.mj_stateSize(env.model, kind)}: it was saved from another model"
        )
    mujoco.mj_setState(env.model, env.data, physics, kind)
    mujoco.mj_forward(env.model, env.data)  # derived quantities of the restored state, as set_state does
    _set_rng(env, state["np_random"])
    env._np_random_seed = state["np_random_seed"]


def _save_fused_core(core: Any) -> dict[str, Any]:
    assert not core._pending, "the fused core is saved between steps only"
    return {
        "raw_frames": tuple(frame.copy() for frame in core._raw_frames),
        "lives": core.lives,
        "episode_return": core._episode_return,
        "episode_length": core._episode_length,
        "episode_seconds": time.perf_counter() - core._episode_start,
        "episode_count": core.episode_count,
        "queues": (deque(core.return_queue), deque(core.length_queue), deque(core.time_queue)),
    }


def _load_fused_core(core: Any, state: dict[str, Any]) -> None:
    for frame, saved in zip(core._raw_frames, state["raw_frames"], strict=True):
        frame[...] = saved
    core.lives = state["lives"]
    core._episode_return = state["episode_return"]
    core._episode_length = state["episode_length"]
    core._episode_start = time.perf_counter() - state["episode_seconds"]
    core.episode_count = state["episode_count"]
    # In place: the fused env hands out these same deques (its return_queue, ...).
    for queue, saved in zip((core.return_queue, core.length_queue, core.time_queue), state["queues"]):
        queue.clear()
        queue.extend(saved)


def _builtin_handlers() -> dict[str, _Handler]:
    frame_stack = _attributes("obs_queue")
    return {
        "gymnasium.wrappers.common.TimeLimit": _attributes("_elapsed_steps"),
        "gymnasium.wrappers.common.OrderEnforcing": _attributes("_has_reset"),
        "gymnasium.wrappers.common.Autoreset": _attributes("autoreset"),
        "gymnasium.wrappers.common.RecordEpisodeStatistics": _attributes(
            "episode_returns",
            "episode_lengths",
            "episode_count",
            "return_queue",
            "length_queue",
            "time_queue",
            clock=("episode_start_time",),
        ),
        "gymnasium.wrappers.stateful_observation.FrameStackObservation": frame_stack,
        "gymnasium.wrappers.atari_preprocessing.AtariPreprocessing": _attributes(
            "obs_buffer", "lives", "game_over"
        ),
        "ale_py.env.AtariEnv": _Handler(_save_atari, _load_atari),
        # Its ROM is loaded at its first reset: a state saved or restored before it loads the ROM first.
        "torchwm.wrappers.atari_rom.RomOnceAtariEnv": _Handler(_save_rom_once, _load_rom_once),
        "gymnasium.envs.mujoco.mujoco_env.MujocoEnv": _Handler(_save_mujoco, _load_mujoco),
        "torchwm.wrappers.episodic_life.EpisodicLifeEnv": _attributes("lives", "was_real_done"),
        "torchwm.wrappers.fire_reset.FireResetEnv": _attributes(),
        "torchwm.wrappers.atari_fused.RingFrameStack": _attributes("_ring", "_oldest"),
        "torchwm.wrappers.atari_fused.AtariPreprocessingCore": _Handler(
            _save_fused_core, _load_fused_core, inner=lambda core: core.atari_env
        ),
        "torchwm.wrappers.atari_fused.FusedAtariEnv": _Handler(
            lambda env: {"needs_reset": env._needs_reset},
            lambda env, state: setattr(env, "_needs_reset", state["needs_reset"]),
            inner=lambda env: env._top,
        ),
    }


_HANDLERS = _builtin_handlers()

# What every Gymnasium wrapper or env holds as configuration, not as state: not saved by the generic rule.
_CONFIGURATION = frozenset(
    {
        "env",
        "_action_space",
        "_observation_space",
        "_reward_range",
        "_metadata",
        "_cached_spec",
        "_saved_kwargs",
        "_ezpickle_args",
        "_ezpickle_kwargs",
        "action_space",
        "observation_space",
        "metadata",
        "render_mode",
        "spec",
    }
)
_CODE = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, type)


def _protocol(layer: Any) -> tuple[Callable, Callable] | None:
    """The layer's own ``get_torchwm_state``/``set_torchwm_state``, looked up on its class (a Gymnasium
    wrapper does not forward attributes, but a layer's class is the sure place)."""
    get = getattr(type(layer), GET_STATE, None)
    put = getattr(type(layer), SET_STATE, None)
    if callable(get) and callable(put):
        return get, put
    return None


def _handler(layer: Any) -> _Handler | None:
    for cls in type(layer).__mro__:
        handler = _HANDLERS.get(f"{cls.__module__}.{cls.__qualname__}")
        if handler is not None:
            return handler
    return None


def _layers(env: gym.Env) -> list[Any]:
    """The layers of ``env``, outermost first."""
    layers: list[Any] = []
    layer: Any = env
    while layer is not None:
        if any(layer is seen for seen in layers):
            raise ValueError(
                f"the wrapper chain of {type(env).__name__} loops back to {type(layer).__name__}"
            )
        layers.append(layer)
        handler = None if _protocol(layer) else _handler(layer)
        if handler is not None and handler.inner is not None:
            layer = handler.inner(layer)
        elif isinstance(layer, gym.Wrapper):
            layer = layer.env
        else:
            layer = None
    return layers


def _generic_save(layer: Any, layers: list[Any]) -> dict[str, Any]:
    kept = {
        key: value
        for key, value in vars(layer).items()
        if key not in _CONFIGURATION
        and key != "_np_random"
        and not isinstance(value, _CODE)
        and not any(value is other for other in layers)
    }
    state = copy.deepcopy(kept)
    if isinstance(layer, gym.Env) and not isinstance(layer, gym.Wrapper):
        state["_np_random"] = _rng_state(layer._np_random)
    return state


def _generic_load(layer: Any, state: dict[str, Any]) -> None:
    state = copy.deepcopy(state)
    if "_np_random" in state:
        _set_rng(layer, state.pop("_np_random"))
    vars(layer).update(state)


def clone_env_state(env: gym.Env) -> EnvState:
    """The state of ``env`` and of every layer under it (see the module docstring); ``env`` is unchanged.

    Raises:
        TypeError: a layer cannot be saved; the message names its class.

    Example:
        >>> import gymnasium as gym
        >>> env = gym.make("CartPole-v1")
        >>> _ = env.reset(seed=0)
        >>> state = clone_env_state(env)
        >>> first = env.step(0)[0]
        >>> restore_env_state(env, state)
        >>> bool((env.step(0)[0] == first).all())
        True
    """
    layers = _layers(env)
    saved = []
    for depth, layer in enumerate(layers):
        try:
            protocol = _protocol(layer)
            if protocol is not None:
                state = protocol[0](layer)
            else:
                handler = _handler(layer)
                state = _generic_save(layer, layers) if handler is None else handler.save(layer)
        except Exception as exc:
            where = "the env" if depth == 0 else f"layer {depth} under {type(env).__name__}"
            raise TypeError(
                f"cannot save the state of {type(layer).__name__} ({_class_name(layer)}, {where}): {exc}. "
                f"Give the class get_torchwm_state() and set_torchwm_state(state) (torchwm.plugin_api."
                f"StatefulLayer) to say how its state is saved"
            ) from exc
        saved.append((_class_name(layer), state))
    return EnvState(tuple(saved))


def layer_names(env: gym.Env) -> list[str]:
    """The class names of ``env``'s layers, outermost first, as an `EnvState` records them."""
    return [_class_name(layer) for layer in _layers(env)]


def check_restorable(env: gym.Env, state: Any) -> None:
    """TypeError if ``state`` is no `EnvState`, ValueError if its layers are not ``env``'s."""
    if not isinstance(state, EnvState):
        raise TypeError(
            f"expected an EnvState (from clone_state), got {type(state).__name__}: {state!r:.200}"
        )
    mismatch = describe_mismatch(layer_names(env), [name for name, _ in state.layers])
    if mismatch:
        raise ValueError(f"this state is not of this env's stack: {mismatch}")


def describe_mismatch(env_layers: list[str], state_layers: list[str]) -> str:
    """How a state's layers differ from an env's ("" when they are the same)."""
    if env_layers == state_layers:
        return ""
    return (
        f"the state was saved from {' > '.join(state_layers)}, and the env is {' > '.join(env_layers)}; "
        f"restore a state into an env built from the same spec"
    )


def restore_env_state(env: gym.Env, state: EnvState) -> None:
    """Put ``env`` (every layer) in ``state``, which `clone_env_state` returned for an env of the same
    spec; ``state`` itself is not changed and may be restored again.

    Raises:
        TypeError, ValueError: ``state`` is not an `EnvState` of this env's stack (nothing changed).
    """
    check_restorable(env, state)
    for layer, (_, layer_state) in zip(_layers(env), state.layers, strict=True):
        protocol = _protocol(layer)
        if protocol is not None:
            protocol[1](layer, layer_state)
            continue
        handler = _handler(layer)
        if handler is None:
            _generic_load(layer, layer_state)
        else:
            handler.load(layer, layer_state)
