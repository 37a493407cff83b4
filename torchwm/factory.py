"""`make_env` and `make_vec`: a name, a backend and a wrapper stack become an env.

Both go through `resolve_spec`, which checks every argument and fills in
every default before anything is built, giving a `VecSpec`; `check_spec_options`
refuses, before any worker starts, what the env or a wrapper would refuse once
built. `build_env` (from `torchwm.building`, importable here too) makes one env
from a spec. `make_vec` also takes what a
Gymnasium user already types for ``gymnasium.make_vec``: an ``EnvSpec`` as the
id, ``vectorization_mode`` and ``vector_kwargs`` (`gymnasium_arguments`).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from torchwm import names
from torchwm.building import RECORDERS as RECORDERS
from torchwm.building import build_env as build_env
from torchwm.building import check_distinct_envs as check_distinct_envs
from torchwm.building import check_single_env, without_recorders
from torchwm.building import env_fn as env_fn
from torchwm.building import registry_snapshot as registry_snapshot
from torchwm.building import spec_env_fns as spec_env_fns
from torchwm.errors import InvalidOptionError, InvalidOptionTypeError, UnsupportedStackError
from torchwm.plugins import backend_options, registry
from torchwm.spec import (
    EPISODE_STATISTICS,
    SetupOption,
    VecSpec,
    env_fns_of,
    resolve_wrapper,
    resolve_wrappers,
    setup_keywords,
    setup_options,
    wrapper_env_kwargs,
    wrapper_options,
)
from torchwm.vector.episode_seeds import unseedable_backend
from torchwm.wrappers.atari import atari_preprocessing, check_preprocessing_options
from torchwm.wrappers.atari_fused import unfusable_reason
from torchwm.wrappers.first_reset_seed import FirstResetSeed

# gymnasium.make_vec's vectorization_mode -> torchwm's backend. "async" is AsyncVectorEnv, whose
# default is shared_memory=True: shmem is the same design (vector_kwargs={"shared_memory": False}
# gives subproc, as AsyncVectorEnv without shared memory).
VECTORIZATION_MODES = {"sync": "sync", "async": "shmem"}
# gymnasium.make_vec's vector_kwargs that have a torchwm equivalent -> that backend option.
# max_concurrency (at most k envs stepping at once) is num_workers: a worker steps its envs one by one.
VECTOR_KWARGS = {
    "copy": "copy",
    "context": "context",
    "max_concurrency": "num_workers",
    "observation_mode": "observation_mode",
}
_MISSING = object()  # a kwarg the registration does not have


def _env_spec_arguments(spec: EnvSpec) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The id, the env kwargs that differ from its registration, and the make_vec arguments of an EnvSpec.

    ``spec.kwargs`` holds every registered default too (ALE's ``frameskip=4``, which the default stack
    replaces); only the ones the spec changed are passed on, so that ``make_vec(gym.spec(id))`` is
    ``make_vec(id)``. A vector env's spec (``gymnasium.make_vec(...).spec``) also holds ``num_envs``,
    ``vectorization_mode``, ``vector_kwargs`` and ``wrappers``, taken as Gymnasium takes them.
    """
    names.register_ale()
    registered = gym.registry.get(spec.id)
    if registered is None:
        raise ValueError(
            f"the EnvSpec {spec.id!r} is not registered with Gymnasium; register it first "
            f"(gymnasium.register(id={spec.id!r}, entry_point=...)) so that every worker can build it"
        )
    kwargs = dict(spec.kwargs)
    arguments: dict[str, Any] = {
        key: kwargs.pop(key)
        for key in ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")
        if key in kwargs
    }
    changed = {key: value for key, value in kwargs.items() if registered.kwargs.get(key, _MISSING) != value}
    if spec.max_episode_steps != registered.max_episode_steps:
        changed["max_episode_steps"] = spec.max_episode_steps
    return spec.id, changed, arguments


def gymnasium_arguments(
    backend: str | None,
    backend_kwargs: dict[str, Any] | None,
    autoreset_mode: Any,
    vectorization_mode: Any,
    vector_kwargs: Any,
) -> tuple[str, dict[str, Any] | None, Any]:
    """``gymnasium.make_vec``'s ``vectorization_mode`` and ``vector_kwargs`` as torchwm's ``backend``,
    ``backend_kwargs`` and ``autoreset_mode``; anything without an equivalent fails in one line naming
    torchwm's argument."""
    mode = getattr(vectorization_mode, "value", vectorization_mode)  # gymnasium.VectorizeMode too
    if mode is not None and mode not in VECTORIZATION_MODES:
        hint = (
            "torchwm has no vector_entry_point mode: pass backend='ale-native' for ALE's own vector env"
            if mode == "vector_entry_point"
            else f"expected one of {sorted(VECTORIZATION_MODES)}"
        )
        raise ValueError(f"vectorization_mode={mode!r}: {hint}, or use torchwm's backend= argument")
    if vector_kwargs is not None and not isinstance(vector_kwargs, dict):
        raise TypeError(
            f"vector_kwargs must be a dict, got {vector_kwargs!r:.200}; torchwm's argument is backend_kwargs="
        )
    vector_kwargs = dict(vector_kwargs or {})
    if mode is None and vector_kwargs:
        raise ValueError(
            "vector_kwargs needs vectorization_mode='sync' or 'async'; torchwm's argument is backend_kwargs="
        )
    if mode is not None:
        chosen = VECTORIZATION_MODES[mode]
        if mode == "async" and vector_kwargs.pop("shared_memory", True) is False:
            chosen = "subproc"
        if backend is not None and backend != chosen:
            raise ValueError(
                f"backend={backend!r} and vectorization_mode={mode!r} disagree "
                f"(vectorization_mode={mode!r} is backend={chosen!r}); give one of them"
            )
        backend = chosen
    if "autoreset_mode" in vector_kwargs:
        autoreset_mode = vector_kwargs.pop("autoreset_mode")
    unknown = sorted(set(vector_kwargs) - set(VECTOR_KWARGS))
    if unknown:
        raise TypeError(
            f"vector_kwargs {unknown} have no torchwm equivalent; torchwm takes backend options in "
            f"backend_kwargs= (copy, context, max_concurrency and observation_mode map to it; see "
            f"docs/from-gymnasium.md)"
        )
    if vector_kwargs:
        backend_kwargs = {**{VECTOR_KWARGS[k]: v for k, v in vector_kwargs.items()}, **(backend_kwargs or {})}
    return backend or "sync", backend_kwargs, autoreset_mode


def _plain_containers(value: Any) -> Any:
    """OmegaConf's DictConfig/ListConfig (what Hydra's ``instantiate`` passes) as plain dicts and lists."""
    omegaconf = sys.modules.get("omegaconf")  # never imported here: only Hydra users have such values
    if omegaconf is not None and isinstance(value, (omegaconf.DictConfig, omegaconf.ListConfig)):
        return omegaconf.OmegaConf.to_container(value, resolve=True)
    return value


def setup_arguments(caller: str, given: dict[str, Any], options: Sequence[SetupOption]) -> dict[str, Any]:
    """``given`` with every option of ``options`` (each default filled in, OmegaConf containers made plain),
    in their order; a name that is none of them is Python's TypeError for an unexpected keyword argument."""
    names = {option.name for option in options}
    for name in given:
        if name not in names:
            raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}")
    return {
        option.name: _plain_containers(given[option.name] if option.name in given else option.default)
        for option in options
    }


def resolve_spec(id: str, num_envs: int = 1, **options: Any) -> VecSpec:
    """Check every argument and make every default explicit; builds nothing.

    Takes the setup options (`torchwm.spec.setup_options`: make_vec's, with the env's keyword arguments as
    ``env_kwargs``); its signature is derived from them.
    """
    given = setup_arguments("resolve_spec", {"id": id, "num_envs": num_envs, **options}, setup_options())
    # Each option's own check, in the options' order; the id, its env kwargs and the wrappers are resolved
    # together below.
    checked = {option.name: option.check(given[option.name]) for option in setup_options() if option.check}
    size = checked.pop("size")
    env_kwargs = dict(given["env_kwargs"] or {})

    resolved = names.resolve(given["id"], env_kwargs)
    _check_wrapper_options_given_to_env(resolved.id, env_kwargs)
    wrapper_specs = resolve_wrappers(given["wrappers"], family=resolved.family, env_id=resolved.id)
    if size is not None:
        # Pixels first (after episode_statistics, which stays on the env itself), so that every wrapper above
        # sees the rendered frames.
        pixels = resolve_wrapper({"name": "pixels", "width": size[0], "height": size[1]})
        first = 1 if wrapper_specs and wrapper_specs[0].name == EPISODE_STATISTICS else 0
        wrapper_specs = (*wrapper_specs[:first], pixels, *wrapper_specs[first:])
    kwargs = {**wrapper_env_kwargs(wrapper_specs), **resolved.kwargs}
    if (
        resolved.family == "atari"
        and "frameskip" not in env_kwargs
        and any(w.name == "atari_preprocessing" for w in wrapper_specs)
    ):
        # AtariPreprocessing skips frames itself and needs the emulator to skip none.
        kwargs["frameskip"] = 1
    spec = VecSpec(
        **checked, id=resolved.id, env_kwargs=kwargs, wrappers=wrapper_specs, family=resolved.family
    )
    check_spec_options(spec)
    # Decided here, not when an env is built, so that the spec (and a config dumped from it) says what is
    # built: ``fused`` given is "allowed", ``spec.fused`` is "built fused".
    return spec.replace(
        fused=spec.fused and spec.family == "atari" and unfusable_reason(without_recorders(spec)[0]) is None
    )


def _setup_parameters(options: Sequence[SetupOption], positional: Sequence[str]) -> list[inspect.Parameter]:
    """``options`` as the parameters of a derived signature: those named in ``positional`` first (they come
    first among the options), the others keyword-only."""
    return [
        inspect.Parameter(
            option.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD
            if option.name in positional
            else inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if option.default is dataclasses.MISSING else option.default,
            annotation=option.annotation,
        )
        for option in options
    ]


# The signature users see (help(), IDEs) is the options', so that an option added to VecSpec is a parameter
# here without another line.
resolve_spec.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    _setup_parameters(setup_options(), ("id", "num_envs")), return_annotation="VecSpec"
)


def env_keyword_arguments(env_id: str) -> list[str] | None:
    """The keyword arguments that ``gymnasium.make(env_id, ...)`` passes on to the env's constructor or takes
    itself; None where that cannot be told (no signature, or the constructor takes ``**kwargs``)."""
    gym_spec = gym.registry.get(env_id)
    if gym_spec is None:
        return None
    entry_point = gym_spec.entry_point
    try:
        creator: Any = (
            gym.envs.registration.load_env_creator(entry_point)
            if isinstance(entry_point, str)
            else entry_point
        )
        params = inspect.signature(creator).parameters
    except (TypeError, ValueError, ImportError, AttributeError):
        return None  # no signature to check against: the env checks its arguments itself
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    accepted = [name for name, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return accepted + [
        name for name in inspect.signature(gym.make).parameters if name not in ("id", "kwargs")
    ]


def _check_wrapper_options_given_to_env(env_id: str, env_kwargs: dict[str, Any]) -> None:
    """An env kwarg the env does not take but a registered wrapper does (``frame_skip=4`` on an ALE id)
    is a TypeError, as Gymnasium's for an unexpected keyword, that names the wrapper."""
    taken = env_keyword_arguments(env_id) if env_kwargs else None
    if taken is None:
        return
    for key in env_kwargs:
        if key in taken:
            continue
        owners = [entry.name for entry in registry("wrapper") if key in wrapper_options(entry.factory)]
        if owners:
            raise TypeError(
                f"{env_id!r} got an unexpected keyword argument {key!r}: it is an option of the wrapper "
                f"{' and '.join(map(repr, owners))}, not of the env; give it there, e.g. "
                f"wrappers=[{{'name': {owners[0]!r}, {key!r}: {env_kwargs[key]!r}}}, ...]"
            )


def check_ale_frameskip(value: Any, name: str = "frameskip") -> None:
    """ALE's check of an ``AtariEnv``'s ``frameskip`` (an int >= 1, or ``(low, high)`` ints with
    ``0 < low < high`` for a frameskip drawn each step), made before any env is built.

    Raises:
        InvalidOptionTypeError: neither an int nor a tuple.
        InvalidOptionError: out of range. Both are ``gymnasium.error.Error``, what ALE raises.
    """
    given = f"env {name}={value!r}"
    if type(value) is int:
        if value <= 0:
            raise InvalidOptionError(f"{given}: {name} must be an int >= 1 (emulator frames per step)", name)
        return
    if type(value) is not tuple:
        raise InvalidOptionTypeError(
            f"{given}: {name} must be an int >= 1, or a tuple (low, high) for a stochastic frameskip, "
            f"not a {type(value).__name__}",
            name,
        )
    if len(value) != 2 or any(type(v) is not int for v in value):
        raise InvalidOptionError(
            f"{given}: a stochastic {name} must be a tuple of two ints (low, high)", name
        )
    low, high = value
    if not 0 < low < high:
        raise InvalidOptionError(
            f"{given}: a stochastic {name} (low, high) needs 0 < low < high (each step skips low to "
            f"high - 1 frames)",
            name,
        )


def check_spec_options(spec: VecSpec) -> None:
    """Refuse the options that the env or a wrapper would refuse only once built, in a worker.

    Checked again when a backend gets a spec (`torchwm.make_vec_from_spec`), since a spec may be built or
    changed by hand: the wrapper options against their registered factory (`resolve_wrapper`), an ALE env's
    ``frameskip`` as ALE checks it, and ``autoreset_seeds`` on a backend that cannot seed autoresets.
    """
    if spec.autoreset_seeds:
        options = backend_options(spec.backend)
        if options is not None and "env_fn" not in options:  # it builds its own envs from the env id
            raise unseedable_backend(spec.backend)
    if spec.env_fns is not None:
        return
    if spec.family == "atari" and "frameskip" in spec.env_kwargs:
        check_ale_frameskip(spec.env_kwargs["frameskip"])
    for wrapper in spec.wrappers:
        if wrapper.fn is None:
            resolved = resolve_wrapper(wrapper, family=spec.family, env_id=spec.id)
            if registry("wrapper").get(wrapper.name).factory is atari_preprocessing:
                check_preprocessing_options(resolved.kwargs)
                skip = resolved.kwargs.get("frame_skip", 1)
                if skip > 1 and spec.env_kwargs.get("frameskip", 1) != 1:
                    # Gymnasium's AtariPreprocessing refuses this pair in its constructor (a ValueError).
                    raise ValueError(
                        f"env frameskip={spec.env_kwargs['frameskip']!r} with atari_preprocessing "
                        f"frame_skip={skip}: frames would be skipped twice. Expected the env's frameskip=1 "
                        f"(the default) when atari_preprocessing skips frames; pass atari_preprocessing's "
                        f"frame_skip instead, or wrappers=[] for ALE's own frameskip"
                    )


def make_env(
    id: str,
    *,
    source: str | None = None,
    wrappers: Sequence[Any] | None = None,
    size: Any = None,
    seed: int | None = None,
    backend: str | None = None,
    fused: bool = True,
    **env_kwargs: Any,
) -> gym.Env:
    """One env: ``make_env("ALE/Pong-v5")`` gives Pong under the standard Atari stack.

    Args:
        id: a Gymnasium id, or an Atari game name (``"pong"``).
        source: how the env is made (``"gym"``, ``"ale"``, or a plugin's); ``backend=`` is another
            name for it, as in ``make_env("CartPole-v1", backend="gym", size=(64, 64))``.
        wrappers: the stack; ``None`` is the family default, ``[]`` none.
        size: ``(width, height)``: observations become rendered RGB frames of that size.
        seed: the seed of the first reset (and of the action space).
        fused: allow the fused Atari env where it gives the same arrays as the wrapper chain.
        **env_kwargs: passed to the env.

    Example:
        >>> import torchwm
        >>> env = torchwm.make_env("CartPole-v1", backend="gym", size=(64, 64))
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((64, 64, 3), dtype('uint8'))
    """
    if source is not None and backend is not None and source != backend:
        raise ValueError(
            f"make_env got source={source!r} and backend={backend!r}; backend is another name for source, "
            f"give one"
        )
    spec = resolve_spec(
        id,
        1,
        wrappers=wrappers,
        seed=seed,
        source=source or backend or "gym",
        size=size,
        fused=fused,
        env_kwargs=env_kwargs,
    )
    env = build_env(spec)
    return FirstResetSeed(env, seed) if seed is not None else env


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    *,
    vectorization_mode: Any = None,
    vector_kwargs: dict[str, Any] | None = None,
    **options: Any,
) -> gym.vector.VectorEnv:
    """A vector env of ``num_envs`` copies of ``id`` on ``backend`` (default ``"sync"``).

    The setup options below are `VecSpec`'s (`torchwm.spec.setup_options`), and this function's signature
    is derived from them; any other keyword argument goes to the env. ``id`` may be a
    ``gymnasium.envs.registration.EnvSpec`` (its id, and the kwargs it changes from the registration).
    ``vectorization_mode`` and ``vector_kwargs`` are ``gymnasium.make_vec``'s names: ``"sync"`` is
    ``backend="sync"``, ``"async"`` is ``backend="shmem"`` (``"subproc"`` with
    ``vector_kwargs={"shared_memory": False}``); their ``copy``, ``context``, ``max_concurrency``
    (``num_workers``), ``observation_mode`` and ``autoreset_mode`` map to torchwm's arguments, anything
    else fails naming torchwm's argument. ``autoreset_seeds=True`` draws each seed from
    ``numpy.random.SeedSequence(seed)`` (docs/datasets.md, "Seeded autoresets").

    Args:
        {setup_args}
        vectorization_mode: ``gymnasium.make_vec``'s ``"sync"`` or ``"async"``, instead of ``backend``.
        vector_kwargs: ``gymnasium.make_vec``'s options of that mode.
        **env_kwargs: keyword arguments of the env.

    Example:
        >>> import torchwm
        >>> envs = torchwm.make_vec("CartPole-v1", num_envs=4, backend="sync", seed=0)
        >>> obs, infos = envs.reset()
        >>> obs.shape
        (4, 4)
        >>> envs.close()
    """
    check_single_env(id, "make_vec was given")
    # The setup options by name; the other keyword arguments are the env's.
    taken = setup_keywords()
    setup = {name: value for name, value in options.items() if name in taken}
    env_kwargs = {name: value for name, value in options.items() if name not in taken}
    if isinstance(id, EnvSpec):
        id, changed, arguments = _env_spec_arguments(id)
        env_kwargs = {**changed, **env_kwargs}
        num_envs = arguments.get("num_envs", num_envs)
        vectorization_mode = arguments.get("vectorization_mode", vectorization_mode)
        vector_kwargs = arguments.get("vector_kwargs", vector_kwargs)
        if "wrappers" in arguments:
            setup["wrappers"] = arguments["wrappers"]
    setup["backend"], setup["backend_kwargs"], setup["autoreset_mode"] = gymnasium_arguments(
        setup.get("backend"),
        setup.get("backend_kwargs"),
        setup.get("autoreset_mode", VecSpec.autoreset_mode),
        vectorization_mode,
        vector_kwargs,
    )
    given = {**setup, "id": id, "num_envs": num_envs, "env_kwargs": env_kwargs}
    return make_vec_from_spec(resolve_spec(**setup_arguments("make_vec", given, setup_options())))


def make_vec_from_fns(env_fns: Sequence[Any], **options: Any) -> gym.vector.VectorEnv:
    """A vector env of the envs ``env_fns`` make, one each: Gymnasium's ``SyncVectorEnv(env_fns)`` and
    ``AsyncVectorEnv(env_fns)`` on any torchwm backend that builds envs from ``spec.env_fns``
    (``sync``, ``subproc``, ``shmem``, and ``ray`` from the torchwm-ray plugin).

    Takes the setup options that do not describe an env id's envs (its signature is derived from them).

    Args:
        {setup_args}

    Example:
        >>> import gymnasium as gym, torchwm
        >>> envs = torchwm.make_vec_from_fns([lambda: gym.make("CartPole-v1")] * 2, backend="sync")
        >>> envs.reset(seed=0)[0].shape
        (2, 4)
        >>> envs.close()
    """
    check_single_env(env_fns, "make_vec_from_fns was given")
    if isinstance(env_fns, Sequence) and not isinstance(env_fns, (str, bytes)):
        for item in env_fns:
            check_single_env(item, "make_vec_from_fns was given, among env_fns,")
    if isinstance(env_fns, (str, bytes)) or not isinstance(env_fns, Sequence) or not env_fns:
        raise TypeError(
            f"env_fns must be a non-empty list of callables that each return a gymnasium.Env, "
            f"got {env_fns!r:.200}"
        )
    taken = _env_fns_options()
    given = setup_arguments("make_vec_from_fns", options, taken)
    checked = {option.name: option.check(given[option.name]) for option in taken if option.check}
    backend = checked["backend"]
    backend_options_taken = backend_options(backend)
    if backend_options_taken is not None and "env_fn" not in backend_options_taken:
        # A backend that builds its envs from the spec's id (ale-native, envpool) would not run these.
        raise UnsupportedStackError(
            f"backend {backend!r} builds its envs from an env id and cannot run factories (env_fns); use "
            f"'sync', 'subproc', 'shmem' or 'ray' (torchwm-ray), or register the env and call make_vec"
        )
    label = getattr(env_fns[0], "__qualname__", None) or type(env_fns[0]).__name__
    # The factories are part of the spec (vec.spec.env_fns): the backend builds what the spec says.
    spec = VecSpec(
        **checked,
        id=f"<env_fns {label}>",
        num_envs=len(env_fns),
        env_fns=env_fns_of(list(env_fns), len(env_fns), "make_vec_from_fns"),
    )
    return make_vec_from_spec(spec)


def _env_fns_options() -> list[SetupOption]:
    return [option for option in setup_options() if option.with_env_fns]


def _with_args(doc: str | None, options: Sequence[SetupOption]) -> str:
    """``doc`` with its ``{setup_args}`` line replaced by Google-style ``Args:`` lines of ``options``, from
    their help, indented as that line is (Python 3.13 strips a docstring's common indentation)."""
    text = doc or ""
    line = next((line for line in text.splitlines() if line.strip() == "{setup_args}"), None)
    if line is None:
        return text
    indent = line[: len(line) - len(line.lstrip())]
    entries = []
    for option in options:
        default = "" if option.default is dataclasses.MISSING else f" Default: ``{option.default!r}``."
        entries.append(f"{indent}{option.name}: {option.help}.{default}")
    return text.replace(line, "\n".join(entries), 1)


def _derive_signatures() -> None:
    """make_vec's and make_vec_from_fns' signatures and ``Args:`` from the setup options."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    options = setup_options()
    parameters = []
    for parameter in _setup_parameters(options, ("id", "num_envs")):
        if parameter.name == "id":
            parameter = parameter.replace(annotation="str | EnvSpec")
        elif parameter.name == "backend":
            # None: "sync", or what vectorization_mode says.
            parameter = parameter.replace(default=None, annotation="str | None")
        if parameter.name != "env_kwargs":
            parameters.append(parameter)
    parameters += [
        inspect.Parameter("vectorization_mode", keyword, default=None, annotation="Any"),
        inspect.Parameter("vector_kwargs", keyword, default=None, annotation="dict[str, Any] | None"),
        inspect.Parameter("env_kwargs", inspect.Parameter.VAR_KEYWORD, annotation="Any"),
    ]
    make_vec.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation="gym.vector.VectorEnv"
    )
    documented = [option for option in options if option.name != "env_kwargs"]
    make_vec.__doc__ = _with_args(make_vec.__doc__, documented)

    from_fns = [
        inspect.Parameter("env_fns", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Sequence[Any]")
    ]
    from_fns += _setup_parameters(_env_fns_options(), ())
    make_vec_from_fns.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        from_fns, return_annotation="gym.vector.VectorEnv"
    )
    make_vec_from_fns.__doc__ = _with_args(make_vec_from_fns.__doc__, _env_fns_options())


_derive_signatures()


def make_vec_from_spec(spec: VecSpec) -> gym.vector.VectorEnv:
    """Build the vector env a `VecSpec` describes, on its backend.

    Raises:
        TypeError: the backend returned something that is not a ``gymnasium.vector.VectorEnv`` (closed
            first, if it can be); the message names the backend and the plugin that registered it.
    """
    check_spec_options(spec)
    # Not at the top: the wrappers package imports every built-in wrapper.
    from torchwm.wrappers.record_video import check_recording, warn_replaced_videos

    check_recording(spec)
    warn_replaced_videos(spec)
    entry = registry("backend").get(spec.backend)
    vec = entry.factory(spec, **spec.backend_kwargs)
    if not isinstance(vec, gym.vector.VectorEnv):
        # Else the user meets an AttributeError at the first reset, far from the plugin at fault.
        close = getattr(vec, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - the TypeError below is the error to report
                pass
        origin = f"plugin {entry.plugin!r}" + (f" ({entry.distribution})" if entry.distribution else "")
        raise TypeError(
            f"backend {spec.backend!r} (registered by {origin}) must return a gymnasium.vector.VectorEnv, "
            f"got {_describe(vec)}"
        )
    return vec


def _describe(value: Any) -> str:
    """``None``, or the type and a short repr of ``value``, for an error message."""
    if value is None:
        return "None"
    kind = type(value)
    text = repr(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"a {kind.__module__}.{kind.__qualname__} ({text})"
