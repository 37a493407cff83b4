"""`list_backends`, `list_wrappers`, `list_sources`: what is registered, and by whom."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchwm.plugins import registry
from torchwm.spec import wrapper_options


@dataclass(frozen=True)
class PluginInfo:
    """One registered name, the plugin that registered it and that plugin's distribution."""

    name: str
    plugin: str
    distribution: str | None
    version: str | None
    description: str
    options: dict[str, Any]


def _describe(kind: str) -> list[PluginInfo]:
    found = []
    for entry in registry(kind):
        if kind == "wrapper":
            options = {k: p.default for k, p in wrapper_options(entry.factory).items()}
        else:
            options = {}
        found.append(PluginInfo(entry.name, entry.plugin, entry.distribution, entry.version,
                                entry.metadata.get("description", ""), options))
    return found


def list_backends() -> list[PluginInfo]:
    return _describe("backend")


def list_wrappers() -> list[PluginInfo]:
    """Every wrapper, with its options and their defaults."""
    return _describe("wrapper")


def list_sources() -> list[PluginInfo]:
    return _describe("source")
