"""Config files: TOML, YAML, JSON or a dict, validated into a `VecSpec`.

`load_config` reads a file (``tomllib``; ``yaml.safe_load`` only, so a file
cannot ask for Python objects; ``json``), one of the example configs shipped
in the package by name (``"pong"``, see `shipped_configs`) or a dict,
refuses a table that expands to more than `MAX_CONFIG_VALUES` values (YAML
aliases nested in each other) or nests deeper than `MAX_CONFIG_DEPTH`,
substitutes ``${VAR}`` / ``${VAR:-default}`` in string values, applies ``--set``-style overrides
(``"wrappers[1].stack_size=2"``), validates every key with a pydantic schema
(unknown keys are errors, with the closest key suggested) and resolves the
result with `torchwm.factory.resolve_spec`. Backend options may be given per
backend (``[backends.shmem]``): only the table of the backend in use applies,
so the same file runs on any backend. Every error is a `ConfigError` whose message
starts with the key it is about (``wrappers[1].stack_size: expected an
integer, got "four"``). The file `VecSpec.to_dict` writes (the "resolved
config", see `dump_config`) loads back into an equal spec.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import gymnasium as gym
import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field

from torchwm import names
from torchwm.errors import ConfigError, UnknownNameError, WorkerError, WrapperOptionError, did_you_mean
from torchwm.factory import _plain_containers, env_keyword_arguments, make_vec_from_spec, resolve_spec
from torchwm.plugins import backend_options, registry
from torchwm.spec import (
    SetupOption,
    VecSpec,
    expected_text,
    package_versions,
    resolve_wrapper,
    setup_options,
    show_value,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json")
# The example configs shipped inside the package (package data), found by name from any directory.
SHIPPED_CONFIGS_DIR = Path(__file__).resolve().parent / "configs"
# A config holds tens of values; YAML aliases nested in each other can make a few hundred bytes
# stand for billions, which would be expanded before a key is checked.
MAX_CONFIG_VALUES = 100_000
# A config nests a few levels (backends.shmem.num_workers); every later step (interpolation, overrides,
# validation) walks it recursively, so a deeper one is refused before them, with a message.
MAX_CONFIG_DEPTH = 64

# ${VAR} or ${VAR:-default}; "$${" writes a literal "${".
_ENV_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
# The table of a multi-agent setup (`torchwm.multiagent.config` reads such a config).
MULTIAGENT_TABLE = "multiagent"
_Validated = TypeVar("_Validated")


class RunOptions(BaseModel):
    """The ``[run]`` table: what ``torchwm run`` does with the env (ignored by `make_vec_from_config`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    steps: int = Field(1000, ge=1)
    policy: str | None = Field(None, pattern=r"^[\w.]+:[\w.]+$")


def _config_field(option: SetupOption) -> tuple[Any, Any]:
    """A setup option as a key of `ConfigModel`: its type, and its default (required without one)."""
    default = ... if option.default is dataclasses.MISSING else option.default
    return option.config_type, Field(default, strict=option.config_strict)


# The keys of a config file that are no setup option.
_FILE_KEYS: dict[str, Any] = {
    # Options per backend name; the table of the backend in use applies (backend_kwargs wins over it).
    "backends": (dict[str, dict[str, Any]], Field(default_factory=dict)),
    # Written by VecSpec.to_dict (the resolved config): checked, not needed.
    "family": (Literal["atari", "generic"] | None, None),
    "versions": (dict[str, str | None] | None, None),
    "run": (RunOptions, Field(default_factory=lambda: RunOptions())),
}

# The keys of a config file: one per setup option (`torchwm.spec.setup_options`; derived, so that a new
# option is a key without another line), then the file's own.
_CONFIG_KEYS: dict[str, Any] = {
    **{option.name: _config_field(option) for option in setup_options()},
    **_FILE_KEYS,
}
ConfigModel = pydantic.create_model(
    "ConfigModel",
    __config__=ConfigDict(extra="forbid", strict=True),
    __doc__="The keys of a config file: the setup options (`VecSpec` fields and ``size``), ``backends``, "
    "``family``, ``versions`` and the ``[run]`` table.",
    **_CONFIG_KEYS,
)


def load_config(source: str | os.PathLike[str] | Mapping[str, Any], overrides: Sequence[str] = ()) -> VecSpec:
    """A validated `VecSpec` from a config file or dict.

    Args:
        source: a path to a ``.toml``, ``.yaml``/``.yml`` or ``.json`` file, or a dict of the same keys.
        overrides: ``"key=value"`` strings applied after reading (``"num_envs=16"``,
            ``"backend_kwargs.num_workers=2"``, ``"wrappers[1].stack_size=2"``).

    Raises:
        ConfigError: the file is missing or unreadable, or a key is unknown or has a bad value;
            the message names the key.

    Example:
        >>> import torchwm
        >>> spec = torchwm.load_config({"id": "CartPole-v1", "num_envs": 2, "seed": 0})
        >>> spec.num_envs, spec.seed
        (2, 0)
    """
    return load_run_config(source, overrides)[0]


def load_run_config(
    source: str | os.PathLike[str] | Mapping[str, Any],
    overrides: Sequence[str] = (),
    backend: str | None = None,
) -> tuple[VecSpec, RunOptions]:
    """Like `load_config`, and also the ``[run]`` table (what ``torchwm run`` uses).

    Args:
        backend: run on this backend instead of the file's. Options of the file's own
            ``backend_kwargs`` that this backend does not take are dropped with a warning (the
            ``[backends.NAME]`` tables need no such care: each applies to its backend only).
    """
    return load_table(source, validate_config, overrides, backend)


def load_table(
    source: str | os.PathLike[str] | Mapping[str, Any],
    validate: Callable[[dict[str, Any]], _Validated],
    overrides: Sequence[str] = (),
    backend: str | None = None,
) -> _Validated:
    """A config's table read as `load_run_config` reads it (the file or dict, its size checked, ``${VAR}``
    substituted, ``backend`` switched, ``overrides`` applied), then ``validate(table)``; every error a
    `ConfigError` that starts with the file's name. `torchwm.multiagent.config` reads its configs here too.
    """
    label = f"{source}: " if not isinstance(source, Mapping) else ""
    try:
        if isinstance(source, Mapping):
            check_expansion(source)
            # An OmegaConf DictConfig (a Hydra app's cfg.env) becomes plain dicts and lists first.
            data = copy.deepcopy(dict(_plain_containers(source)))
        else:
            path = find_config(source)
            label = f"{source}: " if path == Path(source) else f"{source} ({path}): "
            data = read_config(path)
            check_expansion(data)
        data = interpolate_env(data)
        if backend is not None:
            data = switch_backend(data, backend)
        data = apply_overrides(data, overrides)
        return validate(data)
    except ConfigError as exc:
        raise ConfigError(f"{label}{exc}") from exc.__cause__


def shipped_configs() -> dict[str, Path]:
    """The example configs shipped in the package, by name: ``{"pong": .../torchwm/configs/pong.toml, ...}``.

    Example:
        >>> from torchwm.config import shipped_configs
        >>> "pong" in shipped_configs()
        True
    """
    if not SHIPPED_CONFIGS_DIR.is_dir():
        return {}
    return {
        path.stem: path for path in sorted(SHIPPED_CONFIGS_DIR.iterdir()) if path.suffix in CONFIG_SUFFIXES
    }


def is_config_reference(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a config (an existing file, a config file name, or a shipped config)."""
    path = Path(target)
    return path.is_file() or path.suffix.lower() in CONFIG_SUFFIXES or str(target) in shipped_configs()


def find_config(target: str | os.PathLike[str]) -> Path:
    """The file ``target`` names: a config file's path, else a shipped config of that name (``"pong"``).

    A shipped config's name has no suffix and a config file's path has one, so ``pong`` is always the
    shipped config and ``./pong.toml`` a file.

    Raises:
        ConfigError: neither a config file nor a shipped config; the message lists the shipped names.
    """
    path = Path(target)
    if path.is_file() and path.suffix.lower() in CONFIG_SUFFIXES:
        return path
    shipped = shipped_configs()
    if str(target) in shipped:
        return shipped[str(target)]
    if path.is_file():
        return path  # read_config says why it is not a config file
    if path.suffix.lower() in CONFIG_SUFFIXES:
        raise ConfigError("no such file")
    raise ConfigError(
        f"not a config file (a name ending in {', '.join(CONFIG_SUFFIXES)}) nor a shipped config"
        f"{did_you_mean(str(target), list(shipped))}; the shipped configs are: "
        f"{', '.join(shipped) or '(none)'}"
    )


def check_expansion(data: Any, limit: int = MAX_CONFIG_VALUES, max_depth: int = MAX_CONFIG_DEPTH) -> None:
    """Refuse a table that holds more than ``limit`` values once its aliases are expanded, or that nests
    tables and lists more than ``max_depth`` deep.

    YAML aliases (``*a``) share one object, so a few hundred bytes nested nine deep stand for
    billions of values; every later step (interpolation, overrides, validation) would expand them.
    This walk counts each value as often as it is reachable and stops at the limit. It is a loop, not
    a recursion, so that it can refuse what the later, recursive steps could not walk.
    """
    count = 0
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > limit:
            raise ConfigError(
                f"the config expands to more than {limit:,} values (YAML aliases nested in each other?); "
                f"a config may hold at most {limit:,}"
            )
        if depth > max_depth:
            raise ConfigError(
                f"the config nests tables or lists more than {max_depth} levels deep; a config may "
                f"nest at most {max_depth}"
            )
        if isinstance(item, Mapping):
            stack.extend((value, depth + 1) for value in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((value, depth + 1) for value in item)


def switch_backend(data: Mapping[str, Any], backend: str) -> dict[str, Any]:
    """``data`` with ``backend`` set, keeping only the ``backend_kwargs`` that ``backend`` takes.

    ``backend_kwargs`` belong to the file's own backend; another backend may not take them
    (``sync`` has no ``num_workers``). Those it does not take are dropped with a `UserWarning`
    naming them; per-backend tables (``[backends.NAME]``) never need dropping.
    """
    data = dict(data)
    previous = data.get("backend", "sync")
    data["backend"] = backend
    options = data.get("backend_kwargs")
    if previous == backend or not isinstance(options, Mapping) or not options:
        return data
    try:
        accepted = backend_options(backend)
    except LookupError:
        return data  # the unknown name is reported, with suggestions, when the config is validated
    if accepted is None:
        return data  # a backend that takes any keyword: it checks them itself
    dropped = [key for key in options if key not in accepted]
    if dropped:
        data["backend_kwargs"] = {k: v for k, v in options.items() if k not in dropped}
        warnings.warn(
            f"backend {backend!r} does not take backend_kwargs {', '.join(dropped)} (options of "
            f"{previous!r}); "
            f"dropped them (give options per backend in [backends.NAME] tables to keep each backend's own)",
            UserWarning,
            stacklevel=3,
        )
    return data


def make_vec_from_config(
    source: str | os.PathLike[str] | Mapping[str, Any] | VecSpec, overrides: Sequence[str] = ()
) -> gym.vector.VectorEnv:
    """Build the vector env a config file, dict or `VecSpec` describes.

    Example:
        >>> import torchwm
        >>> with torchwm.make_vec_from_config({"id": "CartPole-v1", "num_envs": 2, "seed": 0}) as envs:
        ...     obs, infos = envs.reset()
        ...     obs.shape
        (2, 4)
    """
    if isinstance(source, VecSpec):
        if overrides:
            source = source.to_dict()
        else:
            return make_vec_from_spec(source)
    return make_vec_from_spec(load_config(source, overrides))


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw table of a TOML, YAML or JSON file (by its suffix), not yet validated."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise ConfigError(
            f"not a config file: expected a name ending in {', '.join(CONFIG_SUFFIXES)}, got {path.name!r}"
        )
    if not path.is_file():
        raise ConfigError("no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start}: {exc.reason}); save the config as UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot be read: {exc.strerror or exc}") from None
    try:
        if suffix == ".toml":
            data = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except RecursionError:
        # The parsers recurse once per level: a file nested thousands deep exhausts Python's stack.
        raise ConfigError(
            f"nested too deeply to read (deeper than Python's recursion limit); a config may "
            f"nest at most {MAX_CONFIG_DEPTH} levels"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}") from None
    except yaml.constructor.ConstructorError as exc:
        where = f" (line {exc.problem_mark.line + 1})" if exc.problem_mark else ""
        raise ConfigError(
            f"not allowed in a config{where}: {exc.problem}; configs hold plain data only (YAML is read with "
            f"yaml.safe_load, which refuses tags that build Python objects)"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a table of keys (id, num_envs, ...) at the top, got {type(data).__name__}"
        )
    return data


def interpolate_env(data: Any, path: str = "") -> Any:
    """``${VAR}`` and ``${VAR:-default}`` in every string value, from the environment.

    A string that is exactly one reference takes the type of what it holds (``"${N:-8}"`` gives
    the integer 8, parsed as `parse_value` does); a reference inside a longer string is text.
    """
    if isinstance(data, dict):
        return {k: interpolate_env(v, _join(path, k)) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate_env(v, f"{path}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, str) or "${" not in data:
        return data

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        value = os.environ.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ConfigError(
                    f"{path}: the environment variable {name} is not set and {match.group(0)} has no default "
                    f"(write ${{{name}:-default}})"
                )
            return default
        return value

    text = _ENV_REFERENCE.sub(substitute, data)
    whole = _ENV_REFERENCE.fullmatch(data)
    return parse_value(text) if whole and whole.group(0) != "$${" else text


def parse_value(text: str) -> Any:
    """A ``--set`` value: a TOML value (``16``, ``true``, ``2.5``, ``[64, 64]``, ``{a = 1}``, ``"x"``),
    ``null`` for None, else the text itself (``ALE/Pong-v5``)."""
    if text.strip() in ("null", "~", "None"):
        return None
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``"key=value"`` overrides with dotted keys and list indexes: ``"wrappers[1].stack_size=2"``."""
    data = copy.deepcopy(data)
    for override in overrides:
        key, sep, text = override.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(
                f"--set {override!r}: expected key=value (e.g. num_envs=16 or wrappers[1].stack_size=2)"
            )
        parts = _split_key(key)
        target: Any = data
        for depth, part in enumerate(parts[:-1]):
            here = _key_text(parts[: depth + 1])
            if isinstance(part, int):
                if not isinstance(target, list) or part >= len(target):
                    size = len(target) if isinstance(target, list) else 0
                    raise ConfigError(
                        f"{here}: no such item to override (the list has {size} items; write the whole list "
                        "in the config or --set it)"
                    )
                target = target[part]
            else:
                if not isinstance(target, dict):
                    raise ConfigError(
                        f"{key}: {_key_text(parts[:depth])} is a {type(target).__name__}, not a table"
                    )
                nxt = parts[depth + 1]
                target = target.setdefault(part, [] if isinstance(nxt, int) else {})
        last = parts[-1]
        if isinstance(last, int):
            if not isinstance(target, list) or last >= len(target):
                raise ConfigError(f"{key}: no such item to override")
            target[last] = parse_value(text.strip())
        else:
            if not isinstance(target, dict):
                raise ConfigError(f"{key}: {_key_text(parts[:-1])} is a {type(target).__name__}, not a table")
            target[last] = parse_value(text.strip())
    return data


def validate_config(data: Mapping[str, Any]) -> tuple[VecSpec, RunOptions]:
    """Check a raw table key by key and resolve it into a `VecSpec` (plus the ``[run]`` table)."""
    if MULTIAGENT_TABLE in data:
        raise ConfigError(
            f"{MULTIAGENT_TABLE}: this config describes a multi-agent setup (a [{MULTIAGENT_TABLE}] table); "
            "load it with torchwm.load_config or torchwm.multiagent.load_config, build it with "
            "torchwm.make_vec_from_config"
        )
    try:
        # The model's keys by name (derived from the setup options, so not attributes a type checker sees).
        keys: dict[str, Any] = dict(ConfigModel.model_validate(dict(data)))
    except pydantic.ValidationError as exc:
        raise ConfigError(_describe(exc.errors()[0], data)) from None

    # The keys resolve_spec checks (id, backend, source, autoreset_mode, wrappers) are checked there
    # and only there; this adds what a file needs: the key at fault, and the checks of keys that only
    # a file has (backends tables, family, versions).
    check_backend_tables(keys["backends"])
    backend_kwargs = {**keys["backends"].get(keys["backend"], {}), **(keys["backend_kwargs"] or {})}
    env_kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in (keys["env_kwargs"] or {}).items()}
    try:
        resolved = names.resolve(keys["id"], env_kwargs)
        if keys["wrappers"] is not None:
            for index, item in enumerate(keys["wrappers"]):
                _check_wrapper(index, item, resolved.family, resolved.id)
        given = {option.name: keys[option.name] for option in setup_options()}
        spec = resolve_spec(**{**given, "backend_kwargs": backend_kwargs, "env_kwargs": env_kwargs})
    except UnknownNameError as exc:
        raise ConfigError(f"{_KEY_OF_KIND.get(exc.kind, exc.kind)}: {exc}") from exc
    except ConfigError:
        raise
    except (LookupError, ValueError, TypeError) as exc:
        # resolve_spec's messages start with the argument's name ("autoreset_mode must be one of ..."),
        # which is the file's key.
        key = next((k for k in ConfigModel.model_fields if str(exc).startswith(f"{k} ")), None)
        raise ConfigError(f"{key}: {exc}" if key else str(exc)) from exc
    check_backend_options(keys["backend"], backend_kwargs, keys["backend_kwargs"] or {})
    if keys["source"] in ("gym", "ale") and keys["env_kwargs"]:
        _check_env_kwargs(spec.id, keys["env_kwargs"])
    if keys["family"] is not None and keys["family"] != spec.family:
        raise ConfigError(
            f"family: {keys['id']!r} is a {spec.family} env, but the config says {keys['family']!r}"
        )
    if keys["versions"]:
        warn_versions(keys["versions"])
    return spec, keys["run"]


def check_backend_tables(backends: Mapping[str, Any]) -> None:
    """The ``[backends.NAME]`` tables' names: a table for a backend that is not installed (a plugin's) is
    kept for machines that have it; a name close to an installed backend's is a typo."""
    for name in backends:
        if name not in registry("backend") and did_you_mean(name, registry("backend").names()):
            raise ConfigError(
                f"backends.{name}: {UnknownNameError('backend', name, registry('backend').names())}"
            )


def dump_config(spec: Any, format: str = "toml", run: RunOptions | None = None) -> str:
    """The resolved config (`VecSpec.to_dict`, or a multi-agent setup's `MultiAgentSpec.to_dict`) as TOML,
    YAML or JSON text that `load_config` (`torchwm.multiagent.load_config`) reads back.

    ``run``: the ``[run]`` table to write too (``torchwm run``'s steps and policy), so that
    `load_run_config` reads back the same run.

    TOML has no null, so keys whose value is None are left out of TOML output; on loading, an
    absent ``seed`` or wrapper option takes its default, which for those keys is None.

    Example:
        >>> import torchwm
        >>> from torchwm.config import dump_config
        >>> print(dump_config(torchwm.load_config({"id": "CartPole-v1", "seed": 0})).splitlines()[0])
        id = "CartPole-v1"
    """
    # A VecSpec, or a multi-agent setup's spec (`torchwm.multiagent.spec.MultiAgentSpec`), which has its own.
    data = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
    if run is not None:
        data["run"] = run.model_dump()
    if format == "toml":
        import tomli_w

        return tomli_w.dumps(_drop_none(data))
    if format in ("yaml", "yml"):
        return yaml.safe_dump(data, sort_keys=False)
    if format == "json":
        return json.dumps(data, indent=2) + "\n"
    raise ValueError(f"format must be 'toml', 'yaml' or 'json', got {format!r}")


def check_backend_options(
    backend: str, options: Mapping[str, Any], flat: Mapping[str, Any] | None = None
) -> None:
    """Option names the backend does not take, with the closest name; the values are its own to check.

    ``flat`` is the file's ``backend_kwargs`` (the other options came from ``[backends.NAME]``), to
    name the key a bad option was given under; None means all came from ``backend_kwargs``.
    """
    accepted = backend_options(backend)
    if accepted is None:
        return
    for key in options:
        if key not in accepted:
            where = f"backend_kwargs.{key}" if flat is None or key in flat else f"backends.{backend}.{key}"
            raise ConfigError(
                f"{where}: backend {backend!r} has no option {key!r}{did_you_mean(key, accepted)}; "
                f"its options are: {', '.join(accepted) or '(none)'}"
            )


def is_memory_error(exc: BaseException) -> bool:
    """A `MemoryError`, here or in a worker (whose `WorkerError` names it): the config asked for more
    memory than the machine has, and `memory_message` says which option (``torchwm run``, ``check``,
    ``bench``)."""
    if isinstance(exc, MemoryError):
        return True
    return isinstance(exc, WorkerError) and re.search(r"\braised \w*MemoryError\(", str(exc)) is not None


# numpy's MemoryError: "Unable to allocate 931. GiB for an array with shape (1000000, 1000000) and data type
# uint8"
_ALLOCATION = re.compile(r"Unable to allocate .*? for an array with shape \(([\d, ]*)\)[^\n'\"]*")


def memory_message(spec: Any, exc: BaseException) -> str:
    """One line for a `MemoryError` met building ``spec``: the option that asked for too much when the
    size numpy could not allocate shows which (its value is a side of the array), else numpy's message."""
    text = str(exc) + "\n" + getattr(exc, "remote_traceback", "")
    allocation = _ALLOCATION.search(text)
    said = (
        allocation.group(0)
        if allocation
        else (text.strip().splitlines()[0] if text.strip() else "MemoryError")
    )
    sides = {int(n) for n in re.findall(r"\d+", allocation.group(1))} if allocation else set()
    candidates = [
        (value, f"wrapper {wrapper.name!r} option {key}={value}")
        for wrapper in spec.wrappers
        if wrapper.fn is None
        for key, value in wrapper.kwargs.items()
        if type(value) is int and value > 1 and value in sides
    ] + [
        (value, f"env kwarg {key}={value}")
        for key, value in spec.env_kwargs.items()
        if type(value) is int and value > 1 and value in sides
    ]
    if candidates:
        _, option = max(candidates, key=lambda c: c[0])
        return f"{option} asks for more memory than this machine has ({said})"
    return f"building {spec.id} x {spec.num_envs} on {spec.backend!r} ran out of memory: {said}"


def _check_env_kwargs(env_id: str, env_kwargs: Mapping[str, Any]) -> None:
    """Keyword arguments the env's constructor (or `gymnasium.make`) does not take, blamed on the env."""
    accepted = env_keyword_arguments(env_id) if env_kwargs else None
    if accepted is None:
        return
    for key in env_kwargs:
        if key not in accepted:
            entry_point = gym.registry[env_id].entry_point
            where = (
                entry_point
                if isinstance(entry_point, str)
                else getattr(entry_point, "__qualname__", entry_point)
            )
            raise ConfigError(
                f"env_kwargs.{key}: the env {env_id!r} ({where}) takes no argument {key!r}"
                f"{did_you_mean(key, accepted)}; it takes: {', '.join(sorted(accepted))}"
            )


# The config key of each kind of name that `UnknownNameError` reports.
_KEY_OF_KIND = {"env id": "id", "backend": "backend", "source": "source"}


def _check_wrapper(index: int, item: str | Mapping[str, Any], family: str, env_id: str) -> None:
    """One wrapper of the file, checked by `resolve_wrapper`, its error put at its key path."""
    here = f"wrappers[{index}]"
    try:
        resolve_wrapper(item, family=family, env_id=env_id)
    except WrapperOptionError as exc:
        raise ConfigError(f"{here}.{exc.option}: {exc.problem}") from exc
    except LookupError as exc:  # no wrapper of that name
        raise ConfigError(f"{here}.name: {exc}") from exc
    except (ValueError, TypeError) as exc:  # a required option missing, a wrapper of another env family
        raise ConfigError(f"{here}: {exc}") from exc


def _describe(error: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """One pydantic error as ``key.path: expected ..., got ...``."""
    loc = [
        part
        for part in error["loc"]
        if not (isinstance(part, str) and part.startswith(("function-", "nullable[")))
    ]
    # Unions report each member; keep the key path itself.
    loc = [part for part in loc if isinstance(part, int) or part in _KNOWN_KEYS or not _looks_like_type(part)]
    key = _key_text(loc) or "config"
    if error["type"] == "extra_forbidden":
        known = sorted(RunOptions.model_fields if loc[:1] == ["run"] else ConfigModel.model_fields)
        return f"{key}: unknown key{did_you_mean(str(loc[-1]), known)}; the keys are: {', '.join(known)}"
    if loc[:1] == ["size"]:
        return f"size: expected two positive integers [width, height], got {show_value(data.get('size'))}"
    if loc[:1] == ["wrappers"] and len(loc) == 2:
        return f"{key}: expected a wrapper name or a table with a name key, got {show_value(error['input'])}"
    if error["type"] == "missing":
        return f"{key}: required key missing"
    if error["type"] == "string_pattern_mismatch" and loc[:1] == ["run"]:
        return f"{key}: expected module:function, got {show_value(error['input'])}"
    return f"{key}: {expected_text(error)}, got {show_value(error['input'])}"


_KNOWN_KEYS = set(ConfigModel.model_fields) | set(RunOptions.model_fields)


def _looks_like_type(part: Any) -> bool:
    return isinstance(part, str) and (
        part in ("int", "str", "bool", "float", "none", "tuple", "list", "dict") or "[" in part
    )


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _split_key(key: str) -> list[str | int]:
    parts: list[str | int] = []
    position = 0
    for match in _PATH_PART.finditer(key):
        if match.start() != position and key[position : match.start()] != ".":
            raise ConfigError(
                f"--set {key!r}: expected a key like num_envs, backend_kwargs.num_workers or "
                "wrappers[1].stack_size"
            )
        parts.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        position = match.end()
    if position != len(key) or not parts or isinstance(parts[0], int):
        raise ConfigError(
            f"--set {key!r}: expected a key like num_envs, backend_kwargs.num_workers or "
            "wrappers[1].stack_size"
        )
    return parts


def _key_text(parts: Sequence[Any]) -> str:
    text = ""
    for part in parts:
        text = f"{text}[{part}]" if isinstance(part, int) else _join(text, part)
    return text


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def warn_versions(written: Mapping[str, str | None]) -> None:
    installed = package_versions()
    differ = [
        f"{name} {written[name]} (installed: {installed.get(name)})"
        for name in written
        if name in installed and written[name] != installed[name]
    ]
    if differ:
        warnings.warn(
            f"the config was written with {', '.join(differ)}; trajectories may differ", stacklevel=4
        )
