"""The plugin manager: which plugins are loaded, and the registries they fill.

Built-in sources, backends and wrappers are ordinary modules listed in
`DEFAULT_PLUGINS`, registered through the same ``@hookimpl`` path as
third-party plugins, which come from the entry-point group ``torchwm``.
Loading is lazy (the first `registry()` call) and runs once.
``TORCHWM_DISABLE_PLUGINS=a,b`` blocks plugins by name: an entry-point name,
or a built-in module name such as ``torchwm.vector.shmem``.

A third-party plugin that cannot be used (its import fails, its name or one of
the names it registers is taken, a hook is misspelt or has the wrong
arguments, its hook raises) is left out, and everything else works: it is
reported once, in one line on stderr that names its distribution, what failed
and how to disable it, and ``torchwm list`` shows it with its error
(`failed_plugins`). Worker processes inherit the fact that it was reported
and stay quiet. A plugin registered at run time (`register_plugin`) raises
instead (pluggy's ``PluginValidationError`` for a misspelt hook): the caller is
right there to fix it.

"Cannot be used" includes a plugin that calls ``sys.exit()`` or raises another
``BaseException`` while it loads; only ``KeyboardInterrupt`` propagates (the user
pressed Ctrl-C). Each entry point is imported in a daemon thread with a deadline
(``TORCHWM_PLUGIN_IMPORT_TIMEOUT`` seconds): a plugin whose import does not
return in time is left out too, and a slow one is named in a warning. Plugins
load in the process that calls `make_vec`: a worker process builds its envs
from the entries its spec uses (`RegistrySnapshot`, carried in its payload)
and loads no plugin.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import importlib.metadata
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pluggy

from torchwm import hookspecs
from torchwm.registry import Entry, Registry, options_of

DEFAULT_PLUGINS = (
    "torchwm.sources",
    "torchwm.vector.sync",
    "torchwm.vector.subproc",
    "torchwm.vector.shmem",
    "torchwm.vector.ale_native",
    "torchwm.wrappers",
)

# hook name -> registry kind
HOOK_KINDS = {
    "register_sources": "source",
    "register_backends": "backend",
    "register_wrappers": "wrapper",
}

# Set once the broken plugins were reported, so that worker processes (which inherit the environment
# and load the plugins again) do not report them again.
REPORTED_ENV = "TORCHWM_PLUGIN_ERRORS_REPORTED"

# Seconds one entry point's import may take before its plugin is left out (``inf``: no deadline). Generous:
# a plugin that imports a large framework (torch, Ray) on a cold disk is slow, not broken.
IMPORT_TIMEOUT_ENV = "TORCHWM_PLUGIN_IMPORT_TIMEOUT"
DEFAULT_IMPORT_TIMEOUT = 60.0
# An import slower than this is named in a warning: every program that makes an env pays it.
SLOW_IMPORT_SECONDS = 5.0


def import_timeout() -> float | None:
    """The deadline of one plugin's import, from ``TORCHWM_PLUGIN_IMPORT_TIMEOUT`` (None: no deadline).

    Raises:
        ValueError: the variable is set to something other than a positive number of seconds.
    """
    raw = os.environ.get(IMPORT_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_IMPORT_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not seconds > 0:
        raise ValueError(
            f"{IMPORT_TIMEOUT_ENV} must be a positive number of seconds (or inf for no deadline), got {raw!r}"
        )
    return None if math.isinf(seconds) else seconds


class _EntryPointImport(threading.Thread):
    """Imports one entry point, so that the loading thread can stop waiting for it.

    A daemon thread: one whose import never returns does not keep the program alive. `register_plugin`
    calls its import makes are kept here and registered once the import is done in time.
    """

    def __init__(self, ep: importlib.metadata.EntryPoint) -> None:
        super().__init__(name=f"torchwm-plugin-import-{ep.name}", daemon=True)
        self.ep = ep
        self.plugin: Any = None
        self.error: BaseException | None = None
        self.registered: list[tuple[Any, str | None]] = []
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.plugin = self.ep.load()
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: the loading thread decides
            self.error = exc
        finally:
            self.done.set()


@dataclass(frozen=True)
class FailedPlugin:
    """A plugin left out because it could not be used."""

    name: str  # the entry-point name (what TORCHWM_DISABLE_PLUGINS takes)
    distribution: str | None
    version: str | None
    error: str  # what failed, one line

    def message(self) -> str:
        dist = (
            f"{self.distribution} {self.version or ''}".strip()
            if self.distribution
            else "an unknown distribution"
        )
        fix = f"uninstall it or set TORCHWM_DISABLE_PLUGINS={self.name}"
        if self.name in DEFAULT_PLUGINS:  # disabling the name would disable torchwm's own plugin
            fix = "uninstall it, or ask its authors to rename its entry point"
        return (
            f"torchwm: plugin {self.name!r} (from {dist}) is not loaded: {self.error.rstrip('.')}. "
            f"The rest of torchwm works; to silence this, {fix}"
        )


class PluginManager(pluggy.PluginManager):
    """pluggy's manager, loading entry points one at a time so that a broken one is left out."""

    def __init__(self, project_name: str) -> None:
        super().__init__(project_name)
        self.entry_point_dists: list[tuple[Any, importlib.metadata.Distribution]] = []
        self.failed: dict[str, FailedPlugin] = {}
        # register_plugin() calls made while entry points load (a module that registers itself on import),
        # with the distribution being loaded; they are registered after the entry points, unless the
        # object already is (its entry point registered it).
        self.deferred: list[tuple[Any, str | None, importlib.metadata.Distribution]] = []

    def list_plugin_distinfo(self) -> list[tuple[Any, Any]]:  # type: ignore[override]
        """(plugin, distribution) for every plugin loaded from an entry point."""
        return list(self.entry_point_dists)

    def load_entry_points(self, group: str) -> None:
        """Load every entry point of ``group``; one that fails is recorded in `failed` and left out."""
        timeout = import_timeout()
        for dist in list(importlib.metadata.distributions()):
            for ep in dist.entry_points:
                if ep.group != group or self.is_blocked(ep.name) or ep.name in self.failed:
                    continue
                if self.has_plugin(ep.name):
                    # Another copy of the same distribution is skipped, as pluggy does; another one's is an
                    # error.
                    owner = self._distribution_of(ep.name)
                    if owner != dist.metadata["name"]:
                        self._fail(ep.name, dist, f"the plugin name {ep.name!r} is taken by {owner}")
                    continue
                self._load_entry_point(ep, dist, timeout)
        for plugin, name, dist in self.deferred:
            if plugin not in (p for _, p in self.list_name_plugin()):
                self._register_checked(plugin, name or self.get_canonical_name(plugin), dist)
        self.deferred.clear()

    def _distribution_of(self, name: str) -> str:
        if name in DEFAULT_PLUGINS:
            return "torchwm"
        plugin = self.get_plugin(name)
        return next(
            (d.metadata["name"] for p, d in self.entry_point_dists if p is plugin),
            "a plugin registered at run time",
        )

    def _load_entry_point(
        self, ep: importlib.metadata.EntryPoint, dist: importlib.metadata.Distribution, timeout: float | None
    ) -> None:
        started = time.monotonic()
        loader = _EntryPointImport(ep)
        loader.start()
        if not loader.done.wait(timeout):
            # The thread goes on importing (a thread cannot be stopped); its plugin is never registered.
            self._fail(
                ep.name,
                dist,
                f"importing {ep.value!r} did not finish within {timeout:g} s (set {IMPORT_TIMEOUT_ENV} "
                f"to wait longer)",
            )
            return
        elapsed = time.monotonic() - started
        if isinstance(loader.error, KeyboardInterrupt):
            raise loader.error  # Ctrl-C while a plugin loaded: the user wants to stop, not to go on
        if loader.error is not None:
            self._fail(ep.name, dist, f"importing {ep.value!r} failed: {_one_line(loader.error)}")
            return
        if elapsed >= SLOW_IMPORT_SECONDS:
            warnings.warn(
                f"torchwm: importing plugin {ep.name!r} (from {dist.metadata['name']} {dist.version}) "
                f"took {elapsed:.1f} s, which every program that makes an env pays; if you do not use it, "
                f"set TORCHWM_DISABLE_PLUGINS={ep.name}",
                RuntimeWarning,
                stacklevel=2,
            )
        self.deferred.extend((plugin, name, dist) for plugin, name in loader.registered)
        self._register_checked(loader.plugin, ep.name, dist)

    def _register_checked(self, plugin: Any, name: str, dist: importlib.metadata.Distribution) -> None:
        try:
            self.register(plugin, name=name)  # pluggy's ValueError (a taken name), PluginValidationError
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - whatever pluggy refuses is the plugin's problem
            self._fail(name, dist, _one_line(exc))
            return
        try:
            self.check_pending()  # a hook name that no spec has: a misspelt hook
        except pluggy.PluginValidationError as exc:
            self.unregister(plugin)
            self._fail(name, dist, _one_line(exc))
            return
        self.entry_point_dists.append((plugin, dist))

    def _fail(self, name: str, dist: importlib.metadata.Distribution | None, error: str) -> None:
        self.failed[name] = FailedPlugin(
            name, dist.metadata["name"] if dist else None, dist.version if dist else None, error
        )

    def fail_plugin(self, name: str, error: str) -> None:
        """Leave out the loaded plugin ``name``: its hook failed while the registries were built."""
        plugin = self.get_plugin(name)
        dist = next((d for p, d in self.entry_point_dists if p is plugin), None)
        self.entry_point_dists = [(p, d) for p, d in self.entry_point_dists if p is not plugin]
        self.unregister(name=name)
        self._fail(name, dist, error)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(exc).__name__}: {text}"


_lock = threading.RLock()
_manager: PluginManager | None = None
_registries: dict[str, Registry] | None = None


def disabled_plugins() -> set[str]:
    raw = os.environ.get("TORCHWM_DISABLE_PLUGINS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def _torchwm_version() -> str | None:
    try:
        return importlib.metadata.version("torchwm")
    except importlib.metadata.PackageNotFoundError:
        return None


def plugin_manager() -> PluginManager:
    """The plugin manager, loaded on first use."""
    global _manager
    with _lock:
        if _manager is None:
            manager = PluginManager(hookspecs.PROJECT_NAME)
            manager.add_hookspecs(hookspecs)
            for name in disabled_plugins():
                manager.set_blocked(name)
            for module_name in DEFAULT_PLUGINS:
                if manager.is_blocked(module_name):
                    continue
                manager.register(importlib.import_module(module_name), name=module_name)
            # torchwm's own hooks are checked first, so that a later check_pending() failure is the
            # entry-point plugin's being loaded, never blamed on it for a built-in's.
            manager.check_pending()
            manager.load_entry_points(hookspecs.PROJECT_NAME)
            _manager = manager
        return _manager


def failed_plugins() -> list[FailedPlugin]:
    """The plugins left out because they could not be used (loads the plugins and registries first)."""
    with _lock:
        for kind in HOOK_KINDS.values():
            _loaded_registry(kind)
        return sorted(plugin_manager().failed.values(), key=lambda f: f.name)


def _report(failed: list[FailedPlugin]) -> None:
    """One line on stderr per broken plugin, once per process tree."""
    if not failed or os.environ.get(REPORTED_ENV):
        return
    for plugin in failed:
        print(plugin.message(), file=sys.stderr)
    os.environ[REPORTED_ENV] = ",".join(f.name for f in failed)


def _distributions(manager: pluggy.PluginManager) -> dict[str, tuple[str | None, str | None]]:
    """plugin name -> (distribution name, version)."""
    found: dict[str, tuple[str | None, str | None]] = {}
    version = _torchwm_version()
    for name in DEFAULT_PLUGINS:
        found[name] = ("torchwm", version)
    for plugin, dist in manager.list_plugin_distinfo():
        found[manager.get_name(plugin) or ""] = (dist.metadata["name"], dist.version)
    return found


def _collect(manager: PluginManager) -> dict[str, Registry]:
    """The registries, from every plugin's hooks. A plugin loaded from an entry point whose hook fails
    (it raises, or registers a name another plugin has) is left out and the registries are built
    again without it; the failure of any other plugin (built-in, registered at run time) raises."""
    while True:
        try:
            return _collect_once(manager)
        except _PluginHookError as failure:
            manager.fail_plugin(failure.plugin, _one_line(failure.error))


class _PluginHookError(Exception):
    """The hook of an entry-point plugin failed."""

    def __init__(self, plugin: str, error: BaseException) -> None:
        super().__init__(plugin, error)
        self.plugin, self.error = plugin, error


def _collect_once(manager: PluginManager) -> dict[str, Registry]:
    registries = {kind: Registry(kind) for kind in HOOK_KINDS.values()}
    dists = _distributions(manager)
    from_entry_points = {manager.get_name(plugin) for plugin, _ in manager.entry_point_dists}
    for hook_name, kind in HOOK_KINDS.items():
        # Calling each implementation on its own lets the register callback know
        # which plugin is registering. get_hookimpls() lists them in registration
        # order, built-ins first, so that a plugin's override=True replaces them.
        for impl in getattr(manager.hook, hook_name).get_hookimpls():
            distribution, version = dists.get(impl.plugin_name, (None, None))
            register = functools.partial(
                registries[kind].register, plugin=impl.plugin_name, distribution=distribution, version=version
            )
            try:
                impl.function(register=register)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # sys.exit() in a hook leaves its plugin out, as an exception does
                if impl.plugin_name in from_entry_points:
                    raise _PluginHookError(impl.plugin_name, exc) from exc
                raise
    return registries


def registry(kind: str) -> Registry:
    """The registry of ``kind`` (``"backend"``, ``"wrapper"`` or ``"source"``), built once.

    Inside `using_snapshot`, the snapshot's entries first: names it does not hold load the plugins.
    """
    snapshot = _snapshot.get()
    if snapshot is not None:
        return snapshot.registry(kind)
    return _loaded_registry(kind)


def _loaded_registry(kind: str) -> Registry:
    global _registries
    with _lock:
        if _registries is None:
            manager = plugin_manager()
            _registries = _collect(manager)
            _report(sorted(manager.failed.values(), key=lambda f: f.name))
        return _registries[kind]


class _SnapshotRegistry(Registry):
    """A registry of a snapshot's entries; any other name, and a listing, is the loaded registry's."""

    def get(self, name: str) -> Entry:
        entry = self._entries.get(name)
        return entry if entry is not None else _loaded_registry(self.kind).get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in _loaded_registry(self.kind)

    def __iter__(self) -> Iterator[Entry]:
        return iter(_loaded_registry(self.kind))

    def names(self) -> list[str]:
        return _loaded_registry(self.kind).names()


class RegistrySnapshot:
    """The registry entries that building one spec's envs looks up, resolved in the process that loaded
    the plugins.

    A process backend's worker gets it in its payload (cloudpickle carries each factory, by reference to
    its module when it can be imported): under `using_snapshot` the worker builds its envs without
    loading plugins, so a plugin's import (and its failure, or its slowness) is paid once, in the process
    that calls `make_vec`, and a plugin whose factory the spec does not use is never imported there.
    An entry that cannot be pickled is left out of the pickled snapshot: the worker looks its name up by
    loading the plugins, as it would without a snapshot.
    """

    def __init__(self, entries: dict[str, list[Entry]]) -> None:
        self.entries = {kind: list(found) for kind, found in entries.items()}

    @classmethod
    def of(cls, names: dict[str, list[str]]) -> RegistrySnapshot:
        """The entries of ``names`` ({kind: [name, ...]}) from the loaded registries.

        Raises:
            UnknownNameError: a name nothing registered.
        """
        return cls(
            {
                kind: [registry(kind).get(name) for name in dict.fromkeys(found)]
                for kind, found in names.items()
            }
        )

    def registry(self, kind: str) -> Registry:
        view = _SnapshotRegistry(kind)
        for entry in self.entries.get(kind, ()):
            view._entries[entry.name] = entry
        return view

    def __reduce__(self) -> tuple[Any, ...]:
        import cloudpickle

        portable: dict[str, list[Entry]] = {}
        for kind, found in self.entries.items():
            for entry in found:
                try:
                    cloudpickle.dumps(entry)
                except Exception:  # noqa: BLE001 - a factory pickle cannot carry: the worker loads it
                    continue
                portable.setdefault(kind, []).append(entry)
        return (RegistrySnapshot, (portable,))


_snapshot: contextvars.ContextVar[RegistrySnapshot | None] = contextvars.ContextVar(
    "torchwm_registry_snapshot", default=None
)


@contextlib.contextmanager
def using_snapshot(snapshot: RegistrySnapshot | None) -> Iterator[None]:
    """`registry` answers from ``snapshot`` first inside this block (None: no change)."""
    if snapshot is None:
        yield
        return
    token = _snapshot.set(snapshot)
    try:
        yield
    finally:
        _snapshot.reset(token)


def backend_options(name: str) -> list[str] | None:
    """The option names backend ``name`` takes, or None when it takes any keyword and checks them itself:
    what config files and ``torchwm bench``/``check`` check option names against before anything starts.

    Raises:
        UnknownNameError: no backend of that name (with the closest names).
    """
    options = options_of(registry("backend").get(name))
    if any(key.startswith("**") for key in options):
        return None
    return list(options)


def register_plugin(plugin: Any, name: str | None = None) -> None:
    """Register a plugin object at run time (tests, notebooks) and rebuild the registries.

    Registering the same object under the same name again does nothing, and a module that registers
    itself on import while its entry point loads is registered once, so such a module works both
    imported by hand and installed.
    """
    global _registries
    loader = threading.current_thread()
    if isinstance(loader, _EntryPointImport):
        # Called by a plugin's import, in the thread that imports it while the loading thread holds the
        # lock: registered after the import, if it finishes in time.
        loader.registered.append((plugin, name))
        return
    with _lock:
        manager = plugin_manager()
        if name is not None and manager.get_plugin(name) is plugin:
            return
        manager.register(plugin, name=name)
        try:
            manager.check_pending()  # a hook name no spec has (a misspelt hook) would be ignored silently
        except pluggy.PluginValidationError:
            manager.unregister(plugin)
            raise
        _registries = None


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with `register_plugin` and rebuild the registries."""
    global _registries
    with _lock:
        plugin_manager().unregister(name=name)
        _registries = None


def reset() -> None:
    """Forget every plugin loaded, so that the next use loads them again: after a change of
    ``TORCHWM_DISABLE_PLUGINS`` in a process that has used torchwm already
    (docs/plugins/index.md, "Disabling")."""
    global _manager, _registries
    with _lock:
        _manager = None
        _registries = None
        os.environ.pop(REPORTED_ENV, None)
