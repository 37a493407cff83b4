"""What is registered, and by whom: `list_backends`, `list_wrappers`, `list_sources`, `list_configs`.

``torchwm list`` prints exactly these. A name's options come from what its
plugin declared (``register(..., options={...})``) or else from the
signature of its factory; `backend_options` is the list config files and
``torchwm bench``/``check`` check option names against before anything starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchwm.plugins import registry
from torchwm.spec import wrapper_options

# Shown for an option without a default and for a factory that takes any keyword (``**options``).
REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class PluginInfo:
    """One registered name, the plugin that registered it and that plugin's distribution."""

    name: str
    plugin: str
    distribution: str | None
    version: str | None
    description: str
    options: dict[str, Any]


@dataclass(frozen=True)
class ConfigInfo:
    """One example config shipped in the package: its name (``torchwm run NAME``), file and first comment line."""

    name: str
    path: Path
    description: str


def backend_options(name: str) -> list[str] | None:
    """The option names backend ``name`` takes, or None when it takes any keyword and checks them itself.

    Raises:
        UnknownNameError: no backend of that name (with the closest names).
    """
    options = _options("backend", registry("backend").get(name))
    if any(key.startswith("**") for key in options):
        return None
    return list(options)


def _options(kind: str, entry: Any) -> dict[str, Any]:
    """Keyword options and their defaults: declared by the plugin, else a wrapper's after ``env``,
    a backend's after ``spec``; a ``**name`` key when the factory takes any keyword."""
    declared = entry.metadata.get("options")
    if isinstance(declared, dict):
        return dict(declared)
    if kind == "source":
        return {}
    if kind == "wrapper":
        return {k: p.default for k, p in wrapper_options(entry.factory).items()}
    return _signature_options(entry.factory)


def _signature_options(factory: Callable[..., Any]) -> dict[str, Any]:
    try:
        params = list(inspect.signature(factory).parameters.values())[1:]  # after spec
    except (TypeError, ValueError):
        return {"**options": REQUIRED}
    options: dict[str, Any] = {p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            options["**" + p.name] = REQUIRED
    return options


def _describe(kind: str) -> list[PluginInfo]:
    return [PluginInfo(entry.name, entry.plugin, entry.distribution, entry.version,
                       entry.metadata.get("description", ""), _options(kind, entry))
            for entry in registry(kind)]


def list_backends() -> list[PluginInfo]:
    """Every backend, with its options and their defaults (``**options``: any keyword, checked by the backend)."""
    return _describe("backend")


def list_wrappers() -> list[PluginInfo]:
    """Every wrapper, with its options and their defaults."""
    return _describe("wrapper")


def list_sources() -> list[PluginInfo]:
    return _describe("source")


def list_configs() -> list[ConfigInfo]:
    """The example configs shipped in the package (``torchwm run pong`` runs ``pong.toml``).

    Example:
        >>> from torchwm.listing import list_configs
        >>> [c.name for c in list_configs()][:2]
        ['breakout', 'cartpole']
    """
    from torchwm.config import shipped_configs

    found = []
    for name, path in shipped_configs().items():
        comment = next((line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")), "#")
        found.append(ConfigInfo(name, path, comment.lstrip("#").strip()))
    return found
