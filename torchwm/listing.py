"""What is registered, and by whom: `list_backends`, `list_wrappers`, `list_sources`, `list_configs`.

``torchwm list`` prints exactly these. A name's options come from what its
plugin declared (``register(..., options={...})``) or else from the
signature of its factory (`torchwm.registry.options_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchwm.config import shipped_configs
from torchwm.plugins import registry
from torchwm.registry import REQUIRED, options_of
from torchwm.spec import wrapper_options

__all__ = [
    "REQUIRED",
    "ConfigInfo",
    "PluginInfo",
    "list_backends",
    "list_configs",
    "list_sources",
    "list_wrappers",
]


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
    """One example config shipped in the package: its name (``torchwm run NAME``), file and first comment
    line."""

    name: str
    path: Path
    description: str


def _options(kind: str, entry: Any) -> dict[str, Any]:
    """Keyword options and their defaults: declared by the plugin, else a wrapper's after ``env``,
    a backend's after ``spec`` (`options_of`); a ``**name`` key when the factory takes any keyword."""
    if isinstance(entry.metadata.get("options"), dict) or kind == "backend":
        return options_of(entry)
    if kind == "wrapper":
        return {k: p.default for k, p in wrapper_options(entry.factory).items()}
    return {}


def _describe(kind: str) -> list[PluginInfo]:
    return [
        PluginInfo(
            entry.name,
            entry.plugin,
            entry.distribution,
            entry.version,
            entry.metadata.get("description", ""),
            _options(kind, entry),
        )
        for entry in registry(kind)
    ]


def list_backends() -> list[PluginInfo]:
    """Every backend, with its options and their defaults (``**options``: any keyword, checked by the
    backend)."""
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
    found = []
    for name, path in shipped_configs().items():
        comment = next(
            (line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")), "#"
        )
        found.append(ConfigInfo(name, path, comment.lstrip("#").strip()))
    return found
