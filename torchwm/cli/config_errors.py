"""Every error of a config, each with its key path, for ``torchwm check CONFIG``.

The loader stops at the first error; `config_errors` sets the key at fault aside and validates the rest
again. Beyond the loader's checks, `preflight_problem` finds what building the vector env would refuse
(a backend option, a wrapper option an env refuses) without starting a worker process; for a multi-agent
config (a ``[multiagent]`` table), `multiagent_problem` does, with what `torchwm.multiagent.make_vec` checks
of one env before its workers start.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium

from torchwm.command_line import INPUT_ERRORS, explain, first_line
from torchwm.config import (
    MULTIAGENT_TABLE,
    apply_overrides,
    check_expansion,
    find_config,
    interpolate_env,
    memory_message,
    read_config,
    validate_config,
)
from torchwm.errors import ConfigError
from torchwm.factory import RECORDERS, build_env, spec_env_fns
from torchwm.multiagent.config import validate_multiagent_config
from torchwm.multiagent.make import check_agents
from torchwm.multiagent.sources import env_sources, probe
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.plugins import backend_options, registry
from torchwm.setup_config import load_setup_config
from torchwm.spec import resolve_wrapper, with_env_fn
from torchwm.vector.pool import WorkerPool, check_pool_options
from torchwm.vector.transports.processes import ProcessGroup
from torchwm.wrappers.record_video import check_recording

# The key path an error message starts with: "wrappers[1].stack_size: expected ...".
_ERROR_KEY = re.compile(r"^([A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*): ")
_KEY_PART = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")
# Errors after which nothing else can be checked: every other key is read against the env id.
_FATAL_KEYS = ("id", "config")
MAX_CONFIG_ERRORS = 50


def config_errors(target: str, overrides: Sequence[str] = ()) -> tuple[Any, Any, list[str]]:
    """The resolved `VecSpec` of a config and its ``[run]`` table (both None if it has errors), and every
    error in it, each with its key path.

    The loader stops at the first error; to find the next, the key at fault is set aside (a bad
    option, an unknown key, a bad wrapper item) and the rest validated again, until the rest is
    valid or an error leaves nothing to check (a missing or unknown ``id``, an unreadable file).
    Each message starts with the file's name, then the key as the file writes it (wrapper indexes
    are those of the file, whatever was set aside before).
    """
    try:
        spec, run = load_setup_config(target, overrides)
        if isinstance(spec, MultiAgentSpec):
            said = multiagent_problem(spec)
            if said is None:
                return spec, run, []
            first = f"{target}: {said}"
        else:
            problem = preflight_problem(spec)
            if problem is None:
                return spec, run, []
            first = f"{target}: {problem[1]}"
    except ConfigError as exc:
        first = str(exc)
    try:
        path = find_config(target)
        label = f"{target}: " if path == Path(target) else f"{target} ({path}): "
        data = read_config(path)
        check_expansion(data)
        data = apply_overrides(interpolate_env(data), overrides)
    except ConfigError:
        return None, None, [first]  # the file itself (missing, unreadable, not a table): one error
    wrappers = data.get("wrappers")
    positions = list(range(len(wrappers))) if isinstance(wrappers, list) else []
    errors: list[str] = []
    multiagent = MULTIAGENT_TABLE in data
    for _ in range(MAX_CONFIG_ERRORS):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a version note is no error, and the loader gave it once
                spec = (validate_multiagent_config if multiagent else validate_config)(data)[0]
        except ConfigError as exc:
            message = str(exc)
        else:
            if isinstance(spec, MultiAgentSpec):
                said = multiagent_problem(spec)
                if said is None:
                    break
                message = said
            else:
                problem = preflight_problem(spec)
                if problem is None:
                    break
                message = _keyed(problem, spec, data)
        key = _ERROR_KEY.match(message)
        parts = _key_parts(key.group(1)) if key else []
        if (
            parts[:1] == ["wrappers"]
            and len(parts) > 1
            and isinstance(parts[1], int)
            and parts[1] < len(positions)
        ):
            message = message.replace(f"wrappers[{parts[1]}]", f"wrappers[{positions[parts[1]]}]", 1)
        if f"{label}{message}" in errors:
            break
        errors.append(f"{label}{message}")
        if (
            not parts
            or parts[0] in _FATAL_KEYS
            or parts[:2] == [MULTIAGENT_TABLE, "env"]
            or not _set_aside(data, parts, positions)
        ):
            break
    return None, None, errors or [first]


# What building a vector env refuses as bad input (as `torchwm run` takes it), and a MemoryError (an option
# asking for too much).
_BUILD_ERRORS = (TypeError, ValueError, MemoryError, gymnasium.error.Error, *INPUT_ERRORS)


def preflight_problem(spec: Any) -> tuple[str | int | None, str] | None:
    """What building ``spec``'s vector env would refuse, found without starting a process: ``(where,
    message)``, ``where`` the backend option (a str) or the index in ``spec.wrappers`` (an int) at fault,
    or None.

    The same checks, not copies: the ``record_video`` checks ``torchwm run`` makes (`check_recording`);
    a worker pool's option checks (`check_pool_options`) and a process group's (making a `ProcessGroup`
    checks and starts nothing; Ray's group connects to Ray, so a plugin's is left to the build); and
    one env of the spec built and closed here, as a worker would build it (the wrappers check their
    options when they wrap an env).
    """
    try:
        check_recording(spec)
    except (OSError, ValueError) as exc:
        return next(i for i, w in enumerate(spec.wrappers) if w.name in RECORDERS), str(exc)
    factory = registry("backend").get(spec.backend).factory
    options = dict(spec.backend_kwargs)
    if isinstance(factory, type) and issubclass(factory, WorkerPool):
        try:
            settings = check_pool_options(
                spec.backend, spec.num_envs, options, tuple(factory.worker_group.OPTIONS), factory.unit
            )
            if issubclass(factory.worker_group, ProcessGroup):
                pooled = with_env_fn(spec, settings.env_fn, spec.backend)
                factory.worker_group(
                    spec.backend, pooled, spec_env_fns(pooled), settings.transport_options, settings
                )
        except (TypeError, ValueError) as exc:
            # The pool's messages start with "<backend>: <option> ...".
            named = re.match(rf"{re.escape(spec.backend)}: (\w+)", str(exc))
            return (named.group(1) if named and named.group(1) in options else None), str(exc)
    accepted = backend_options(spec.backend)
    if spec.env_fns is not None or (accepted is not None and "env_fn" not in accepted):
        return None  # the user's factories (built in the workers only), or a backend that builds from the id
    return _one_env_problem(spec)


def multiagent_problem(spec: MultiAgentSpec) -> str | None:
    """What building a multi-agent setup would refuse, found without starting a process, as a config error
    (``key.path: message``), or None: the backend's pool options, and what `torchwm.multiagent.make_vec`
    checks of one env before any worker starts (it builds, its agents share their spaces under the
    ``agents`` layout, ``group_map`` places them, a turn-based env under ``aec`` only)."""
    factory = registry("backend").get(spec.backend).factory
    if isinstance(factory, type) and issubclass(factory, WorkerPool):
        options = dict(spec.backend_kwargs)
        try:
            check_pool_options(
                spec.backend, spec.num_envs, options, tuple(factory.worker_group.OPTIONS), factory.unit
            )
        except (TypeError, ValueError) as exc:
            named = re.match(rf"{re.escape(spec.backend)}: (\w+)", str(exc))
            where = named.group(1) if named and named.group(1) in options else None
            return f"backend_kwargs.{where}: {exc}" if where else str(exc)
    table = MULTIAGENT_TABLE
    try:
        (env_fn,) = env_sources(spec.env, 1, dict(spec.env_kwargs), spec.layout)
        if spec.layout == "aec":
            probe(env_fn, spec.layout)
        else:
            check_agents(env_fn, spec.layout, spec.pad_spaces, spec.group_map)
    except AssertionError as exc:  # the agents' spaces differ under layout="agents"
        return f"{table}.pad_spaces: {first_line(str(exc))}"
    except _BUILD_ERRORS as exc:
        message = first_line(explain(exc))
        if message.startswith("group_map"):
            return f"{table}.group_map: {message}"
        if "layout=" in message:  # a turn-based env asked to step all its agents at once
            return f"{table}.layout: {message}"
        key = "env_kwargs" if spec.env_kwargs and isinstance(exc, TypeError) else "env"
        return f"{table}.{key}: building the env {spec.env!r} failed: {message}"
    return None


def _one_env_problem(spec: Any) -> tuple[int | None, str] | None:
    """Build one env of ``spec`` here (its recorders left out: `check_recording` checked them, and a recorder
    would make its folder) and close it; what went wrong, with the wrapper at fault."""
    core = spec.replace(num_envs=1, wrappers=tuple(w for w in spec.wrappers if w.name not in RECORDERS))
    if spec.family == "atari" and importlib.util.find_spec("ale_py") is not None:
        import ale_py

        # Check's stderr holds its errors, one a line: not the banner ALE prints for its first emulator.
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
    error = _build_error(core)
    if error is None:
        return None
    # The first stack prefix that fails shows the wrapper at fault (0: the env itself).
    prefix = core.replace(fused=False)
    for end in range(len(core.wrappers) + 1):
        if _build_error(prefix.replace(wrappers=core.wrappers[:end])) is not None:
            if end == 0:
                return None, f"building the env {spec.id} failed: {error}"
            at_fault = core.wrappers[end - 1]
            named = error if repr(at_fault.name) in error else f"wrapper {at_fault.name!r}: {error}"
            return spec.wrappers.index(at_fault), named
    return None, f"building one env of {spec.id} with its stack failed: {error}"


def _build_error(spec: Any) -> str | None:
    try:
        env = build_env(spec, index=0)
    except _BUILD_ERRORS as exc:
        return memory_message(spec, exc) if isinstance(exc, MemoryError) else first_line(explain(exc))
    env.close()
    return None


def _keyed(problem: tuple[str | int | None, str], spec: Any, data: dict[str, Any]) -> str:
    """A `preflight_problem` as a config error: ``key.path: message``, the key as the file writes it."""
    where, message = problem
    key: str | None = None
    if isinstance(where, str):
        flat = data.get("backend_kwargs")
        key = (
            f"backend_kwargs.{where}"
            if isinstance(flat, dict) and where in flat
            else f"backends.{spec.backend}.{where}"
        )
    elif isinstance(where, int):
        at_fault = spec.wrappers[where]
        items = data.get("wrappers")
        for index, item in enumerate(items if isinstance(items, list) else []):
            try:
                if resolve_wrapper(item, family=spec.family, env_id=spec.id) == at_fault:
                    key = f"wrappers[{index}]"
                    break
            except Exception:  # noqa: BLE001 - an item that does not resolve is not the one at fault
                continue
        else:
            key = "size" if at_fault.name == "pixels" and data.get("size") is not None else "wrappers"
    return f"{key}: {message}" if key else message


def _key_parts(key: str) -> list[str | int]:
    return [m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _KEY_PART.finditer(key)]


def _set_aside(data: dict[str, Any], parts: list[str | int], positions: list[int]) -> bool:
    """Remove the key an error is about from ``data`` so that the rest can be checked; False if it is not
    there."""
    if parts[0] == "backend":
        # The options were for the unknown backend: checked against the default one they would all be errors.
        data.pop("backend_kwargs", None)
        return data.pop("backend", None) is not None
    if parts[0] == "wrappers" and len(parts) > 1 and isinstance(parts[1], int):
        items, index = data.get("wrappers"), parts[1]
        if not isinstance(items, list) or index >= len(items):
            return False
        item = items[index]
        if len(parts) > 2 and parts[2] != "name" and isinstance(item, dict) and parts[2] in item:
            del item[parts[2]]  # a bad option: the wrapper is still checked with its other options
        else:
            del items[index]
            del positions[index]
        return True
    parent: Any = data
    for part in parts[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return False
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
        return True
    if isinstance(parent, list) and isinstance(last, int) and last < len(parent):
        del parent[last]
        return True
    return False
