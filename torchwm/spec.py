"""Plain-data descriptions of what to build: `WrapperSpec` and `VecSpec`.

A `VecSpec` is everything a backend needs to build a vector env: the env id
and source, the env's keyword arguments, the wrapper stack with every option
explicit, the number of envs, the seed, the autoreset mode (and whether autoresets are seeded) and the
backend.
It is a frozen dataclass: it pickles, prints, and round-trips through
`VecSpec.to_dict` / `VecSpec.from_dict`, so a spec dumped to a file rebuilds
the same env elsewhere. The fields a user gives are declared once, with
`setup_field`: each carries a `SetupOption` (its check, help, config type),
and `setup_options` is what `make_vec`, the config file and the command line
derive their parameters, keys and flags from. `resolve_wrappers` turns what a user wrote
(``"frame_stack"``, ``{"name": "frame_stack", "stack_size": 4}`` or a
callable) into `WrapperSpec` items, checking names and option types against
the registered factory's signature before anything is built. `check_count`,
`check_seed` and `check_timeout` check the plain arguments that several entry
points share (`make_vec`, a vector env's `reset` and `recv`, the process
backends' options), so that each is refused alike everywhere.

Workers and transports import this module: the plugin registry and pydantic, which only resolving a
wrapper needs, are imported inside the functions that use them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import inspect
import json
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import annotated_types
from gymnasium.vector import AutoresetMode

from torchwm.errors import InvalidSeedError, WrapperOptionError, did_you_mean

if TYPE_CHECKING:
    import gymnasium as gym

AUTORESET_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}

# The wrapper that records episodes where the source makes the env, wherever the stack names it.
EPISODE_STATISTICS = "episode_statistics"

# The standard DeepMind stack, as ALE's AtariVectorEnv and Gymnasium's docs give it.
ATARI_DEFAULT_WRAPPERS: tuple[Mapping[str, Any], ...] = (
    {"name": "atari_preprocessing"},
    {"name": "frame_stack", "stack_size": 4, "padding": "zero"},
)


@dataclass(frozen=True)
class WrapperSpec:
    """One wrapper of a stack: a registered name with all its options, or a callable."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    fn: Callable[[Any], Any] | None = None  # set only for a callable given directly (not from a config)

    def apply(self, env: Any) -> Any:
        if self.fn is not None:
            return self.fn(env)
        from torchwm.plugins import registry

        return registry("wrapper").get(self.name).factory(env, **self.kwargs)

    def __repr__(self) -> str:
        if self.fn is not None:
            return f"<callable {self.name}>"
        options = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.name}({options})"


# The metadata key under which a `VecSpec` field holds its `SetupOption`.
SETUP_OPTION = "torchwm_setup_option"


@dataclass(frozen=True)
class SetupOption:
    """One option of the setup a user gives: a `VecSpec` field's metadata (``size`` is the one option that
    is no field: it becomes the ``pixels`` wrapper).

    Everything that takes a setup is derived from these (`setup_options`): `torchwm.make_vec`'s,
    `make_vec_from_fns`'s and `resolve_spec`'s parameters and checks, the keys of a config file, the setup
    flags of the ``torchwm`` commands and the options of the conformance kit's ``BackendUnderTest.make``,
    so that a new option is one field here.
    """

    name: str
    default: Any  # what a user who does not give the option gets (make_vec's default, the config key's)
    help: str  # one sentence: make_vec's docstring, the command-line flag's help
    annotation: str  # the parameter's type in make_vec's signature
    config_type: Any  # the config key's type, checked by pydantic (strictly, unless config_strict is False)
    # A user's value -> the spec's; raises TypeError or ValueError whose message starts with the option's
    # name. None: `resolve_spec` resolves the value together with the env id (id, env_kwargs, wrappers).
    check: Callable[[Any], Any] | None = None
    config_strict: bool = True
    flag: bool = False  # a flag of the commands that build a setup (``--num-envs``), over the config's key
    with_env_fns: bool = True  # `make_vec_from_fns` takes it too (False: it describes the env id's envs)
    # Checked where every spec is made (a replace, a dict, the vector env's setter), not only by make_vec:
    # for a cheap check that needs no registry.
    on_every_spec: bool = False


def setup_field(default: Any, *, field_default: Any = dataclasses.MISSING, **option: Any) -> Any:
    """A `VecSpec` field and its `SetupOption` (``name`` is the field's). ``field_default``: the field's
    own default where it differs from the user's (``fused``: allowed by default, decided by
    `resolve_spec`); a dict default is a new empty dict each time."""
    own = default if field_default is dataclasses.MISSING else field_default
    metadata = {SETUP_OPTION: {"default": default, **option}}
    if isinstance(own, dict):
        return field(default_factory=dict, metadata=metadata)
    if own is dataclasses.MISSING:
        return field(metadata=metadata)
    return field(default=own, metadata=metadata)


def check_bool(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")
        return value

    return check


def check_registered(kind: str) -> Callable[[Any], str]:
    """A registered name of ``kind`` (backend, source): a str the registry knows, else `UnknownNameError`
    with the closest names."""

    def check(value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"{kind} must be a registered {kind} name (a str), got {value!r}")
        from torchwm.plugins import registry  # the registry loads plugins: only when a setup is checked

        registry(kind).get(value)
        return value

    return check


def check_options(name: str) -> Callable[[Any], dict[str, Any]]:
    """A dict of keyword options; None is none."""

    def check(value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise TypeError(f"{name} must be a dict, got {value!r}")
        return dict(value)

    return check


def check_optional_seed(value: Any) -> int | None:
    return None if value is None else check_seed(value)


def check_size(size: Any) -> tuple[int, int] | None:
    """``(width, height)`` in pixels, or None."""
    if size is None:
        return None
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in size)
    ):
        raise ValueError(f"size must be two positive ints (width, height), got {size!r}")
    return (int(size[0]), int(size[1]))


def parse_autoreset_mode(mode: Any) -> str:
    """``"next_step"``, ``"NextStep"`` or ``AutoresetMode.NEXT_STEP`` -> ``"next_step"``."""
    if isinstance(mode, AutoresetMode):
        return next(k for k, v in AUTORESET_MODES.items() if v is mode)
    if isinstance(mode, str):
        for key, enum in AUTORESET_MODES.items():
            if mode in (key, enum.value, enum.name):
                return key
    raise ValueError(f"autoreset_mode must be one of {sorted(AUTORESET_MODES)}, got {mode!r}")


_PositiveInt = Annotated[int, annotated_types.Gt(0)]


@dataclass(frozen=True)
class VecSpec:
    """What to build, with every default explicit. `vec.spec` returns it.

    The fields a user gives are declared with `setup_field`: their checks, help and config types are read
    from here by everything that takes a setup (`SetupOption`).
    """

    id: str = setup_field(
        dataclasses.MISSING,
        help='a Gymnasium id or an Atari game name ("pong")',
        annotation="str",
        config_type=str,
        with_env_fns=False,
    )
    num_envs: int = setup_field(
        1,
        help="number of envs in the vector env",
        annotation="int",
        config_type=Annotated[int, annotated_types.Ge(1)],
        check=lambda value: check_count("num_envs", value),
        flag=True,
        with_env_fns=False,
    )
    source: str = setup_field(
        "gym",
        help="how one env is made: gym, ale, or a plugin's (torchwm list sources)",
        annotation="str",
        config_type=str,
        check=check_registered("source"),
        with_env_fns=False,
    )
    env_kwargs: dict[str, Any] = setup_field(
        None,
        field_default={},
        help="keyword arguments of the env (make_vec takes them as its other keyword arguments)",
        annotation="dict[str, Any] | None",
        config_type=dict[str, Any],
        with_env_fns=False,
    )
    wrappers: tuple[WrapperSpec, ...] = setup_field(
        None,
        field_default=(),
        help="the wrapper stack: names, mappings of a name and options, or callables env -> env; None is "
        "the family default (the Atari stack for ALE ids), [] none",
        annotation="Sequence[Any] | None",
        config_type=list[str | dict[str, Any]] | None,
        with_env_fns=False,
    )
    seed: int | None = setup_field(
        None,
        help="seed of the first reset (env i gets seed + i) and of the action space",
        annotation="int | None",
        config_type=Annotated[int, annotated_types.Ge(0)] | None,
        check=check_optional_seed,
        flag=True,
    )
    autoreset_mode: str = setup_field(
        "next_step",
        help="next_step, same_step or disabled, with Gymnasium's meaning",
        annotation="Any",
        config_type=str,
        check=parse_autoreset_mode,
        flag=True,
    )
    # Every episode of every env starts from a seed of its own, drawn from a SeedSequence of the seed and
    # reported in infos["episode_seed"] (`torchwm.vector.episode_seeds`); off: Gymnasium's behaviour.
    autoreset_seeds: bool = setup_field(
        False,
        help="start every episode of every env from a seed of its own, drawn from the seed and reported in "
        'infos["episode_seed"] (sync, subproc, shmem, ray)',
        annotation="bool",
        config_type=bool,
        check=check_bool("autoreset_seeds"),
        flag=True,
        on_every_spec=True,
    )
    backend: str = setup_field(
        "sync",
        help="a registered backend (torchwm list backends)",
        annotation="str",
        config_type=str,
        check=check_registered("backend"),
        flag=True,
    )
    backend_kwargs: dict[str, Any] = setup_field(
        None,
        field_default={},
        help="options of the backend (num_workers, batch_size, context, ...)",
        annotation="dict[str, Any] | None",
        config_type=dict[str, Any],
        check=check_options("backend_kwargs"),
    )
    family: str = "generic"  # "atari" for ALE envs; decides the default stack and the fused path
    # Python backends build the fused Atari env, equal to the stack, instead of the wrapper chain.
    # resolve_spec sets it where the fused env can run the stack exactly (and ``make_vec(fused=False)`` did
    # not forbid it).
    fused: bool = setup_field(
        True,
        field_default=False,
        help="let Python backends use the fused Atari env where it gives the same arrays as the wrappers",
        annotation="bool",
        config_type=bool,
        check=check_bool("fused"),
        with_env_fns=False,
    )
    # One no-argument env factory per env (`torchwm.make_vec_from_fns`), built instead of ``id``; callables,
    # so a spec that has them cannot be written as data (`to_dict` refuses it, as for callable wrappers).
    env_fns: tuple[Callable[[], Any], ...] | None = None

    def __post_init__(self) -> None:
        # Checked here, where every spec is made (make_vec, make_vec_from_fns, a dict, a replace, the vector
        # env's setter), once.
        for option in setup_options():
            if option.on_every_spec and option.check is not None:
                option.check(getattr(self, option.name))

    @property
    def autoreset(self) -> AutoresetMode:
        return AUTORESET_MODES[self.autoreset_mode]

    def replace(self, **changes: Any) -> VecSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, dicts, scalars) that `from_dict` turns back into an equal spec."""
        if self.env_fns is not None:
            raise ValueError(
                "this spec builds its envs with callables (env_fns, from make_vec_from_fns) and cannot be "
                "written as data; register the env (gymnasium.register, or a source plugin) and name it "
                "instead"
            )
        callables = [w.name for w in self.wrappers if w.fn is not None]
        if callables:
            raise ValueError(
                f"the wrappers {callables} are callables and cannot be written as data; register them "
                f"with a plugin (register_wrappers) and name them instead"
            )
        data: dict[str, Any] = {}
        for spec_field in dataclasses.fields(self):
            value = getattr(self, spec_field.name)
            if spec_field.name == "wrappers":
                data["wrappers"] = [{"name": w.name, **_plain(w.kwargs)} for w in value]
            elif spec_field.name != "env_fns":
                data[spec_field.name] = _plain(value)
        data["versions"] = package_versions()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VecSpec:
        """The spec `to_dict` wrote; wrapper options are checked again against the registry."""
        data = dict(data)
        data.pop("versions", None)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"VecSpec.from_dict: unknown keys {unknown}; expected some of {sorted(known)}")
        family = data.get("family", "generic")
        data["wrappers"] = resolve_wrappers(data.get("wrappers", ()), family=family, env_id=data["id"])
        data["env_kwargs"] = _from_plain(data.get("env_kwargs", {}))
        data["backend_kwargs"] = dict(data.get("backend_kwargs", {}))
        return cls(**data)

    def __repr__(self) -> str:
        shown = []
        for spec_field in dataclasses.fields(self):
            value = getattr(self, spec_field.name)
            if spec_field.name == "wrappers":
                shown.append(f"wrappers=[{', '.join(repr(w) for w in value)}]")
            elif spec_field.name == "env_fns":
                if value is not None:
                    shown.append(f"env_fns=<{len(value)} callables>")
            else:
                shown.append(f"{spec_field.name}={value!r}")
        return f"VecSpec({', '.join(shown)})"


# ``size`` is asked for like the fields, and becomes the ``pixels`` wrapper at the bottom of the stack
# (`resolve_spec`), so a spec holds it as that wrapper.
SIZE_OPTION = SetupOption(
    name="size",
    default=None,
    help="(width, height): observations become rendered RGB frames of that size",
    annotation="Any",
    config_type=tuple[_PositiveInt, _PositiveInt] | None,
    config_strict=False,  # a file's [64, 64] is a list
    check=check_size,
    with_env_fns=False,
)


@functools.cache
def setup_options() -> tuple[SetupOption, ...]:
    """Every option of a setup, in `VecSpec`'s field order, with ``size`` after ``wrappers``."""
    options = []
    for spec_field in dataclasses.fields(VecSpec):
        if SETUP_OPTION in spec_field.metadata:
            options.append(SetupOption(name=spec_field.name, **spec_field.metadata[SETUP_OPTION]))
            if spec_field.name == "wrappers":
                options.append(SIZE_OPTION)
    return tuple(options)


def setup_keywords() -> frozenset[str]:
    """The options `torchwm.make_vec` takes as keyword arguments: every one but the id and num_envs, which
    come first, and env_kwargs, which are its other keyword arguments."""
    return frozenset(option.name for option in setup_options()) - {"id", "num_envs", "env_kwargs"}


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in ("torchwm", "gymnasium", "ale-py"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _plain(value: Any) -> Any:
    """Tuples become lists so that TOML, YAML and JSON can hold the value."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _from_plain(value: Mapping[str, Any]) -> dict[str, Any]:
    # Env kwargs such as ALE's frameskip=(2, 5) are tuples; a file gives lists.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}


def check_count(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``: any integer (``np.int64`` too), not a bool."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def check_seed(value: Any, name: str = "seed") -> int:
    """``value`` as a seed Gymnasium's seeding takes: an int >= 0 (``np.int64`` too), as a Python int.

    Raises:
        TypeError: not an integer (a bool, a float, a string).
        InvalidSeedError: a negative int; both a ``ValueError`` and ``gymnasium.error.Error``, what an
            env's own ``reset(seed=-1)`` raises.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 0 or None, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise InvalidSeedError(
            f"{name} must be an int >= 0 (Gymnasium's seeding refuses negative seeds), got {value}"
        )
    return int(value)


def check_timeout(value: Any, name: str = "timeout") -> float | None:
    """``value`` as a number of seconds > 0, or None for no limit; ``math.inf`` also means no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{name} must be a number of seconds > 0, or None for no limit, got {value!r} "
            f"({type(value).__name__})"
        )
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be a number of seconds > 0, or None for no limit, got {value!r}")
    return None if math.isinf(value) else float(value)


def wrapper_options(factory: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    """The keyword options of a wrapper factory (every parameter after ``env``)."""
    params = list(inspect.signature(factory).parameters.values())[1:]
    return {
        p.name: p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


_EXPECTED = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "dict_type": "expected a table",
    "list_type": "expected a list",
    "tuple_type": "expected a list",
    "model_type": "expected a table",
    "none_required": "expected nothing (null)",
}


def expected_text(error: Mapping[str, Any]) -> str:
    """What one pydantic error expected, in a config file's words (``expected an integer``)."""
    if error["type"] in _EXPECTED:
        return _EXPECTED[error["type"]]
    if error["type"] == "greater_than_equal":
        return f"expected an integer >= {error['ctx']['ge']}"
    message = error["msg"]
    return (
        "expected " + message[len("Input should be ") :]
        if message.startswith("Input should be ")
        else message
    )


def show_value(value: Any) -> str:
    """A value as a config file writes it (JSON), else its repr."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _type_name(annotation: Any) -> str:
    """``int``, ``int or None``, ``tuple``: an annotation in words, without Annotated's constraints."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join("None" if a is type(None) else _type_name(a) for a in typing.get_args(annotation))
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


# Option types whose values pydantic's strict check returns unchanged when they have exactly that type.
_PLAIN_TYPES = (int, float, str, bool)


def _plainly_valid(value: Any, annotation: Any) -> bool:
    """Whether ``value`` passes ``annotation`` as it is, seen without pydantic: its type is exactly a plain
    type the annotation names (``int``, ``str``, ...), or one of its ``Literal`` values (of the same type),
    directly or in a union. Anything else (constraints, containers, conversions) is pydantic's to check."""
    if annotation is type(None):
        return value is None
    if annotation in _PLAIN_TYPES:
        return type(value) is annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(type(value) is type(choice) and value == choice for choice in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return any(_plainly_valid(value, member) for member in typing.get_args(annotation))
    return False


def _check_option(wrapper: str, key: str, value: Any, annotation: Any) -> Any:
    if annotation is inspect.Parameter.empty or _plainly_valid(value, annotation):
        return value
    import pydantic  # a wrapper option's check only: a spec, a worker and a transport do without it

    try:
        return pydantic.TypeAdapter(annotation).validate_python(value, strict=not isinstance(value, list))
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        expected = _type_name(annotation)
        raise WrapperOptionError(
            f"wrapper {wrapper!r}: option {key!r} expected {expected}, got {value!r} "
            f"({error['msg'].lower()})",
            key,
            f"{expected_text(error)}, got {show_value(value)}",
        ) from None


def resolve_wrapper(item: Any, *, family: str = "generic", env_id: str = "") -> WrapperSpec:
    """One item of a stack, checked and with every default filled in."""
    if isinstance(item, WrapperSpec):
        if item.fn is not None:
            return item
        item = {"name": item.name, **item.kwargs}
    if isinstance(item, str):
        name, given = item, {}
    elif isinstance(item, Mapping):
        if "name" not in item:
            raise WrapperOptionError(
                f"a wrapper given as a mapping needs a 'name' key, got keys {sorted(item)}",
                "name",
                "expected the name of a registered wrapper, got no name key",
            )
        given = {k: v for k, v in item.items() if k != "name"}
        name = item["name"]
        if not isinstance(name, str):
            raise WrapperOptionError(
                f"a wrapper name must be a string, got {name!r}",
                "name",
                f"expected the name of a registered wrapper, got {show_value(name)}",
            )
    elif callable(item):
        label = getattr(item, "__qualname__", None) or type(item).__name__
        return WrapperSpec(name=label, fn=item)
    else:
        raise TypeError(
            f"a wrapper must be a name, a mapping with 'name' and options, or a callable env -> env; "
            f"got {item!r} ({type(item).__name__})"
        )

    from torchwm.plugins import registry

    entry = registry("wrapper").get(name)
    needs_family = entry.metadata.get("family")
    if needs_family and needs_family != family:
        raise ValueError(f"wrapper {name!r} works only on {needs_family} envs, and {env_id!r} is not one")
    options = wrapper_options(entry.factory)
    unknown = sorted(set(given) - set(options))
    if unknown:
        listed = f"its options are: {', '.join(options) or '(none)'}"
        raise WrapperOptionError(
            f"wrapper {name!r} has no option {', '.join(map(repr, unknown))}"
            f"{did_you_mean(unknown[0], list(options))}; {listed}",
            unknown[0],
            f"wrapper {name!r} has no option {unknown[0]!r}{did_you_mean(unknown[0], list(options))}; "
            f"{listed}",
        )
    try:
        hints = typing.get_type_hints(
            entry.factory, include_extras=True
        )  # keeps Annotated constraints (ge=1)
    except Exception:  # a factory whose annotations do not evaluate is not type-checked
        hints = {}
    kwargs: dict[str, Any] = {}
    for key, param in options.items():
        if key in given:
            kwargs[key] = _check_option(name, key, given[key], hints.get(key, param.annotation))
        elif param.default is not inspect.Parameter.empty:
            kwargs[key] = param.default
        else:
            raise TypeError(f"wrapper {name!r}: option {key!r} is required and was not given")
    return WrapperSpec(name=name, kwargs=kwargs)


def resolve_wrappers(
    items: Sequence[Any] | None, *, family: str = "generic", env_id: str = ""
) -> tuple[WrapperSpec, ...]:
    """A whole stack; ``None`` means the family default (the Atari stack, or nothing)."""
    if items is None:
        items = ATARI_DEFAULT_WRAPPERS if family == "atari" else ()
    if isinstance(items, (str, Mapping)) or callable(items):
        raise TypeError(
            f"wrappers must be a list of wrappers, got a single {type(items).__name__}: {items!r}"
        )
    specs = tuple(resolve_wrapper(item, family=family, env_id=env_id) for item in items)
    # episode_statistics records on the env the source makes, wherever it is written: a learner's episode
    # (a life, clipped rewards) is never what one logs (torchwm.wrappers.episode_statistics).
    stats = [spec for spec in specs if spec.fn is None and spec.name == EPISODE_STATISTICS]
    if len(stats) > 1:
        raise ValueError(
            f"{EPISODE_STATISTICS} appears {len(stats)} times in the stack; it records once, on the "
            f"env the source makes"
        )
    return (*stats, *(spec for spec in specs if spec not in stats))


def wrapper_env_kwargs(wrappers: Sequence[WrapperSpec]) -> dict[str, Any]:
    """Env keyword defaults the stack needs (``render_mode`` for pixels, ``frameskip=1`` under
    preprocessing)."""
    from torchwm.plugins import registry

    needed: dict[str, Any] = {}
    for w in wrappers:
        if w.fn is None:
            needed.update(registry("wrapper").get(w.name).metadata.get("env_kwargs", {}))
    return needed


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
    """``spec`` with the factories of the ``env_fn`` backend option (how a caller with factories of its
    own, such as `torchwm.TorchVectorizedEnv`, passes them to a backend) in ``spec.env_fns``, so that
    ``vec.spec`` says what was built whichever way the factories came."""
    if env_fn is None:
        return spec
    if spec.env_fns is not None:
        raise TypeError(
            f"{backend}: give the envs' factories once: the spec has env_fns, and env_fn= was passed too"
        )
    return spec.replace(env_fns=env_fns_of(env_fn, spec.num_envs, backend))
