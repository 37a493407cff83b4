"""Save and restore one env's whole state, wrapper stack included: `clone_env_state`, `restore_env_state`.

An env is a chain of layers: the wrappers (each reached from the one above by Gymnasium's
``Wrapper.env``), down to the innermost env (and, under a layer that holds a stack of its own, as
torchwm's fused Atari env does, its ``torchwm_layer_below()``). The state of an env is every layer's
state, outermost first, in an `EnvState`: a plain, picklable value that can be restored into this env or
into any env built from the same spec (another env index, another vector env, another process, another
backend).

How a layer's state is saved, first match wins:

1. The layer's class defines ``get_torchwm_state(self)`` (its own state only, not the envs it
   wraps, returned as a value restore may reuse many times) and ``set_torchwm_state(self, state)``
   (`StatefulLayer`): every torchwm wrapper and env, and the protocol for a third-party one. It may
   also define ``check_torchwm_state(state)`` (a static or class method: `TypeError` or `ValueError`
   for a state it could not have saved), run before any env changes.
2. A built-in rule for a third-party class in its MRO (`_builtin_handlers`): Gymnasium's ``TimeLimit``,
   ``OrderEnforcing``, ``Autoreset``, ``FrameStackObservation``, ``RecordEpisodeStatistics`` and
   ``AtariPreprocessing``, ALE's ``AtariEnv`` (the emulator with its RNG, so that sticky actions
   replay exactly) and Gymnasium's MuJoCo envs (their physics state: MuJoCo's objects cannot be
   deep-copied).
3. Any other layer: a deep copy of its ``__dict__``, without what every Gymnasium wrapper or env
   holds as configuration (the link to the env below, the spaces, the spec) and without references
   to other layers of the chain. A layer that holds a shared object of another kind (a handle it
   also reaches through the chain) must use the protocol.

A layer that cannot be saved (its deep copy raises: a lock, an open file, a process) makes
`clone_env_state` raise `TypeError` naming its class; nothing has changed then. A state is checked
whole before any layer changes (`check_restorable`): its layers must be this env's (the same classes,
in order) and each layer's state one its rule could have saved. A random generator's state is saved as
``bit_generator.state``.

The vector side (`torchwm.vector.saved_states`) adds each env's last observation, its autoreset
bookkeeping and what the state belongs to (`StackIdentity`: the spec's identity and the observations'
shape), and checks every state with `check_state` before any message goes to a worker;
docs/state.md is the user's page.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import sys
import time
import types
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from torchwm.spec import VecSpec

GET_STATE = "get_torchwm_state"
SET_STATE = "set_torchwm_state"
CHECK_STATE = "check_torchwm_state"
LAYER_BELOW = "torchwm_layer_below"


@runtime_checkable
class StatefulLayer(Protocol):
    """What a wrapper or env defines to say how its own state is saved (the envs it wraps are saved
    by their own rules). ``get_torchwm_state`` returns a picklable value that later steps do not
    change (copy arrays); ``set_torchwm_state`` takes one such value, possibly many times, and must not
    keep mutable parts of it (copy them in).

    Two more methods are optional: ``check_torchwm_state(state)``, a static or class method that raises
    `TypeError` or `ValueError` for a value ``get_torchwm_state`` could not have returned (a state
    pickled by another version), run before any env changes; and ``torchwm_layer_below(self)``, the
    next layer down for a layer that is no `gymnasium.Wrapper` but holds a stack of its own.
    """

    def get_torchwm_state(self) -> Any: ...

    def set_torchwm_state(self, state: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class StackIdentity:
    """What a state belongs to: the spec's identity and one observation's shape and dtype.

    Not the number of envs, the seed, the backend, the autoreset mode or the env's index: a state
    restores into any env built from the same spec. Options are kept as their ``repr``, so that two
    specs compare equal whatever order their options were given in.

    Attributes:
        env: the source and id (``"gym:ALE/Pong-v5"``).
        env_kwargs: ``(name, repr(value))`` of each env option, sorted by name.
        wrappers: ``(name, ((option, repr(value)), ...))`` of each wrapper, in stack order.
        observation_shape, observation_dtype: of one env's observation (None: not an array space).
    """

    env: str
    env_kwargs: tuple[tuple[str, str], ...]
    wrappers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    observation_shape: tuple[int, ...] | None
    observation_dtype: str | None

    @classmethod
    def of(cls, spec: VecSpec, observation_space: gym.Space) -> StackIdentity:
        """The identity of the envs ``spec`` builds, whose observations are in ``observation_space``."""
        shape = getattr(observation_space, "shape", None)
        dtype = getattr(observation_space, "dtype", None)
        return cls(
            f"{spec.source}:{spec.id}",
            _options(spec.env_kwargs),
            tuple((wrapper.name, _options(wrapper.kwargs)) for wrapper in spec.wrappers),
            None if shape is None else tuple(shape),
            None if dtype is None else str(np.dtype(dtype)),
        )

    def difference(self, other: StackIdentity) -> str:
        """How this identity (a state's) differs from ``other`` (an env's), in words; "" when equal."""
        if self == other:
            return ""
        saved, here = [], []
        if self.env != other.env:
            saved.append(self.env)
            here.append(other.env)
        if self.env_kwargs != other.env_kwargs:  # the options that differ only
            saved.append(f"env options {_describe_options(_not_in(self.env_kwargs, other.env_kwargs))}")
            here.append(f"env options {_describe_options(_not_in(other.env_kwargs, self.env_kwargs))}")
        if self.wrappers != other.wrappers:
            saved.append(f"wrappers {_describe_wrappers(self.wrappers)}")
            here.append(f"wrappers {_describe_wrappers(other.wrappers)}")
        shapes = (self.observation_shape, self.observation_dtype)
        if shapes != (other.observation_shape, other.observation_dtype):
            saved.append(f"observations of shape {self.observation_shape} {self.observation_dtype}")
            here.append(f"observations of shape {other.observation_shape} {other.observation_dtype}")
        return f"it was saved from {', '.join(saved)}, and this env has {', '.join(here)}"


def _options(options: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    # Lists and tuples alike (a config file gives lists where Python code gives tuples).
    return tuple(sorted((str(key), repr(_plain(value))) for key, value in options.items()))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda item: str(item[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _not_in(options: tuple[tuple[str, str], ...], others: tuple[tuple[str, str], ...]) -> tuple:
    return tuple(option for option in options if option not in others)


def _describe_options(options: tuple[tuple[str, str], ...]) -> str:
    return "{" + ", ".join(f"{key}={value}" for key, value in options) + "}"


def _describe_wrappers(wrappers: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]) -> str:
    return "[" + ", ".join(f"{name}{_describe_options(options)}" for name, options in wrappers) + "]"


@dataclasses.dataclass(frozen=True)
class EnvState:
    """One env's saved state (opaque to users: restore it, pickle it, keep it).

    Attributes:
        layers: ``(class name, state)`` of each layer, outermost first.
        observation: the env's last observation (set by the vector env; None for a lone env).
        autoreset_pending: the vector env's next step resets this env (next_step autoreset).
        terminated, truncated: the flags of its last step.
        stack: what the state belongs to (set by the vector env; None for a lone env).
    """

    layers: tuple[tuple[str, Any], ...]
    observation: Any = None
    autoreset_pending: bool = False
    terminated: bool = False
    truncated: bool = False
    stack: StackIdentity | None = None

    def __repr__(self) -> str:
        return f"EnvState({' > '.join(name for name, _ in self.layers)})"


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _short(name: str) -> str:
    return name.rpartition(".")[2]


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


# -- checks a rule shares --------------------------------------------------------------------------


def check_state_keys(owner: str, state: Any, keys: Iterable[str]) -> None:
    """`TypeError` unless ``state`` is a dict, `ValueError` unless it has every key of ``keys``: the check
    of a layer state saved as a dict (``owner`` names the layer's class in the message)."""
    keys = sorted(keys)
    if not isinstance(state, dict):
        raise TypeError(
            f"the state of {owner} must be a dict with the keys {keys}, got {type(state).__name__}"
        )
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(
            f"the state of {owner} has no {', '.join(map(repr, missing))} (it has "
            f"{sorted(map(str, state))}): it was damaged or saved by another version"
        )


# -- built-in handlers -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Handler:
    save: Callable[[Any], Any]
    load: Callable[[Any, Any], None]
    check: Callable[[str, Any], None]  # (the class's name, a state): raises for a state save cannot give


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

    def check(owner: str, state: Any) -> None:
        check_state_keys(owner, state, (*names, *clock))

    return _Handler(save, load, check)


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


def save_atari_env(env: Any) -> dict[str, Any]:
    """The state of an ALE `AtariEnv` (its emulator with the emulator's generator, the action a sticky
    action repeats, its own generator): the built-in rule of `AtariEnv`, and what an `AtariEnv` subclass
    with rules of its own saves."""
    # include_rng: the emulator's generator draws the sticky actions; without it a replay differs.
    state = env.ale.cloneState(include_rng=True)
    return {
        "ale": state,
        "sticky_action": _sticky_action(env, state),
        "np_random": _rng_state(env._np_random),
        "np_random_seed": env._np_random_seed,
    }


def restore_atari_env(env: Any, state: dict[str, Any]) -> None:
    """Put an ALE `AtariEnv` in ``state`` (from `save_atari_env`)."""
    if state["sticky_action"] is None:
        env.ale.restoreState(state["ale"])
    else:
        import ale_py

        _force_last_action(env.ale, state["ale"], ale_py.Action(state["sticky_action"]))
    _set_rng(env, state["np_random"])
    env._np_random_seed = state["np_random_seed"]


ATARI_STATE_KEYS = ("ale", "sticky_action", "np_random", "np_random_seed")


def check_atari_state(owner: str, state: Any) -> None:
    """The check of a state `save_atari_env` returned."""
    check_state_keys(owner, state, ATARI_STATE_KEYS)


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


def _builtin_handlers() -> dict[str, _Handler]:
    """The rules of third-party classes, by class name (torchwm's own classes save themselves)."""
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
        "gymnasium.wrappers.stateful_observation.FrameStackObservation": _attributes("obs_queue"),
        "gymnasium.wrappers.atari_preprocessing.AtariPreprocessing": _attributes(
            "obs_buffer", "lives", "game_over"
        ),
        "ale_py.env.AtariEnv": _Handler(save_atari_env, restore_atari_env, check_atari_state),
        "gymnasium.envs.mujoco.mujoco_env.MujocoEnv": _Handler(
            _save_mujoco,
            _load_mujoco,
            lambda owner, state: check_state_keys(owner, state, ("physics", "np_random", "np_random_seed")),
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


def _protocol(cls: type) -> tuple[Callable, Callable] | None:
    """The class's own ``get_torchwm_state``/``set_torchwm_state`` (looked up on the class: a Gymnasium
    wrapper does not forward attributes, but a layer's class is the sure place)."""
    get = getattr(cls, GET_STATE, None)
    put = getattr(cls, SET_STATE, None)
    if callable(get) and callable(put):
        return get, put
    return None


def _handler(cls: type) -> _Handler | None:
    for base in cls.__mro__:
        handler = _HANDLERS.get(f"{base.__module__}.{base.__qualname__}")
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
        below = getattr(type(layer), LAYER_BELOW, None)
        if callable(below):
            layer = below(layer)
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


def _generic_check(owner: str, state: Any) -> None:
    # Only its kind: which attributes an env has may change as it runs (set at its first step, say).
    if not isinstance(state, dict):
        raise TypeError(f"the state of {owner} must be a dict of its attributes, got {type(state).__name__}")


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
            protocol = _protocol(type(layer))
            if protocol is not None:
                state = protocol[0](layer)
            else:
                handler = _handler(type(layer))
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


def _check_layer(cls: type, name: str, state: Any) -> None:
    """The check of the rule that saves layers of class ``cls`` (named ``name``), for ``state``."""
    owner = _short(name)
    if _protocol(cls) is not None:
        check = getattr(cls, CHECK_STATE, None)
        if callable(check):
            check(state)
        return
    handler = _handler(cls)
    if handler is not None:
        handler.check(owner, state)
    else:
        _generic_check(owner, state)


def _loaded_class(name: str) -> type | None:
    """The class of that name, if its module is imported in this process or is one of torchwm's own
    (imported then): a state makes this process import no other package's code."""
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        module = sys.modules.get(module_name)
        if module is None and parts[0] == "torchwm":
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
        if module is None:
            continue
        found: Any = module
        for part in parts[split:]:
            found = getattr(found, part, None)
        return found if isinstance(found, type) else None
    return None


def check_state(state: EnvState, stack: StackIdentity) -> None:
    """Whether ``state`` can be restored into an env of ``stack``, as far as this process can tell
    without the env: what it belongs to, its observation's shape and dtype, and the state of each layer
    whose class this process knows (a built-in rule's, or the ``check_torchwm_state`` of a torchwm class or
    of a class whose module this process imported).
    The vector env runs it on every state before any message goes to a worker.

    Raises:
        ValueError, TypeError: the state does not fit; the message says how.

    Example:
        >>> import torchwm
        >>> with torchwm.make_vec("CartPole-v1", 1) as envs:
        ...     _ = envs.reset(seed=0)
        ...     (state,) = envs.clone_state()
        >>> with torchwm.make_vec("MountainCar-v0", 1) as other:
        ...     try:
        ...         check_state(state, StackIdentity.of(other.spec, other.single_observation_space))
        ...     except ValueError as error:
        ...         print(str(error)[:64])
        it was saved from gym:CartPole-v1, observations of shape (4,) fl
    """
    if state.stack is None:
        raise ValueError(
            "the state records no stack it belongs to (it was saved by an older torchwm, or from a lone "
            "env); give a state from envs.clone_state()"
        )
    difference = state.stack.difference(stack)
    if difference:
        layers = " > ".join(_short(name) for name, _ in state.layers)
        raise ValueError(f"{difference} (the state's layers: {layers})")
    if stack.observation_shape is not None:
        shape = np.shape(state.observation)
        if shape != stack.observation_shape:
            raise ValueError(
                f"its observation has shape {shape}, but this env's observations have shape "
                f"{stack.observation_shape}: the state was damaged"
            )
    for name, layer_state in state.layers:
        cls = _loaded_class(name)
        if cls is not None:
            _check_layer(cls, name, layer_state)
        elif name in _HANDLERS:
            _HANDLERS[name].check(_short(name), layer_state)


def check_restorable(env: gym.Env, state: Any) -> None:
    """TypeError if ``state`` is no `EnvState`; ValueError or TypeError if its layers are not ``env``'s or
    a layer's state is not one its rule could have saved. Changes nothing."""
    if not isinstance(state, EnvState):
        raise TypeError(
            f"expected an EnvState (from clone_state), got {type(state).__name__}: {state!r:.200}"
        )
    layers = _layers(env)
    mismatch = describe_mismatch([_class_name(layer) for layer in layers], [name for name, _ in state.layers])
    if mismatch:
        raise ValueError(f"this state is not of this env's stack: {mismatch}")
    for layer, (name, layer_state) in zip(layers, state.layers, strict=True):
        _check_layer(type(layer), name, layer_state)


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
        TypeError, ValueError: ``state`` is not an `EnvState` of this env's stack, or a layer's state is
            damaged (nothing changed).
    """
    check_restorable(env, state)
    apply_env_state(env, state)


def apply_env_state(env: gym.Env, state: EnvState) -> None:
    """`restore_env_state` without its check, for a caller that checked ``state`` already
    (`check_restorable`)."""
    for layer, (_, layer_state) in zip(_layers(env), state.layers, strict=True):
        protocol = _protocol(type(layer))
        if protocol is not None:
            protocol[1](layer, layer_state)
            continue
        handler = _handler(type(layer))
        if handler is None:
            _generic_load(layer, layer_state)
        else:
            handler.load(layer, layer_state)
