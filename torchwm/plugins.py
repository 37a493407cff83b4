"""The plugin manager: which plugins are loaded, and the registries they fill.

Built-in sources, backends and wrappers are ordinary modules listed in
`DEFAULT_PLUGINS`, registered through the same ``@hookimpl`` path as
third-party plugins, which come from the entry-point group ``torchwm``.
Loading is lazy (the first `registry()` call) and runs once.
``TORCHWM_DISABLE_PLUGINS=a,b`` blocks plugins by name: an entry-point name,
or a built-in module name such as ``torchwm.vector.shmem``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import threading
from typing import Any

import pluggy

from torchwm import hookspecs
from torchwm.registry import Registry

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

_lock = threading.RLock()
_manager: pluggy.PluginManager | None = None
_registries: dict[str, Registry] | None = None


def disabled_plugins() -> set[str]:
    raw = os.environ.get("TORCHWM_DISABLE_PLUGINS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def _torchwm_version() -> str | None:
    try:
        return importlib.metadata.version("torchwm")
    except importlib.metadata.PackageNotFoundError:
        return None


def plugin_manager() -> pluggy.PluginManager:
    """The plugin manager, loaded on first use."""
    global _manager
    with _lock:
        if _manager is None:
            manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
            manager.add_hookspecs(hookspecs)
            for name in disabled_plugins():
                manager.set_blocked(name)
            for module_name in DEFAULT_PLUGINS:
                if manager.is_blocked(module_name):
                    continue
                manager.register(importlib.import_module(module_name), name=module_name)
            manager.load_setuptools_entrypoints(hookspecs.PROJECT_NAME)
            _manager = manager
        return _manager


def _distributions(manager: pluggy.PluginManager) -> dict[str, tuple[str | None, str | None]]:
    """plugin name -> (distribution name, version)."""
    found: dict[str, tuple[str | None, str | None]] = {}
    version = _torchwm_version()
    for name in DEFAULT_PLUGINS:
        found[name] = ("torchwm", version)
    for plugin, dist in manager.list_plugin_distinfo():
        found[manager.get_name(plugin) or ""] = (dist.metadata["name"], dist.version)
    return found


def _collect(manager: pluggy.PluginManager) -> dict[str, Registry]:
    registries = {kind: Registry(kind) for kind in HOOK_KINDS.values()}
    dists = _distributions(manager)
    for hook_name, kind in HOOK_KINDS.items():
        # Calling each implementation on its own lets the register callback know
        # which plugin is registering. get_hookimpls() lists them in registration
        # order, built-ins first, so that a plugin's override=True replaces them.
        for impl in getattr(manager.hook, hook_name).get_hookimpls():
            distribution, version = dists.get(impl.plugin_name, (None, None))
            register = functools.partial(registries[kind].register, plugin=impl.plugin_name,
                                         distribution=distribution, version=version)
            impl.function(register=register)
    return registries


def registry(kind: str) -> Registry:
    """The registry of ``kind`` (``"backend"``, ``"wrapper"`` or ``"source"``), built once."""
    global _registries
    with _lock:
        if _registries is None:
            _registries = _collect(plugin_manager())
        return _registries[kind]


def register_plugin(plugin: Any, name: str | None = None) -> None:
    """Register a plugin object at run time (tests, notebooks) and rebuild the registries."""
    global _registries
    with _lock:
        plugin_manager().register(plugin, name=name)
        _registries = None


def unregister_plugin(name: str) -> None:
    """Remove a plugin registered with `register_plugin` and rebuild the registries."""
    global _registries
    with _lock:
        plugin_manager().unregister(name=name)
        _registries = None


def reset() -> None:
    """Forget everything loaded, so the next use loads plugins again (tests use this)."""
    global _manager, _registries
    with _lock:
        _manager = None
        _registries = None


def plugin_names() -> list[str]:
    return sorted(name for name, _ in plugin_manager().list_name_plugin())
