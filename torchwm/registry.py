"""Named entries of one plugin kind: sources, backends or wrappers.

A `Registry` is the collection the ``register`` callback of a hook fills. It
keeps, for every name, the factory, the plugin that registered it and that
plugin's distribution, so that ``torchwm list`` can say where a name comes
from and an unknown name can be answered with close matches. An entry's
options (`options_of`) are those its plugin declared, else the keyword
parameters of its factory.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torchwm.errors import DuplicateNameError, UnknownNameError

# Shown for an option without a default and for a factory that takes any keyword (``**options``).
REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Entry:
    """One registered name."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: str
    distribution: str | None = None
    version: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


class Registry:
    """The entries of one kind (``"backend"``, ``"wrapper"`` or ``"source"``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(
        self,
        name: str,
        factory: Callable[..., Any],
        *,
        override: bool = False,
        plugin: str = "<direct>",
        distribution: str | None = None,
        version: str | None = None,
        **metadata: Any,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(
                f"a {self.kind} name must be a non-empty string, got {name!r} from plugin {plugin!r}"
            )
        if not callable(factory):
            raise TypeError(
                f"the {self.kind} {name!r} from plugin {plugin!r} must be callable, got {factory!r}"
            )
        previous = self._entries.get(name)
        if previous is not None and not override:
            raise DuplicateNameError(
                f"the {self.kind} {name!r} is registered twice: by plugin {previous.plugin!r} and by "
                f"{plugin!r}. Pass override=True to register() to replace it on purpose, or disable one "
                f"plugin with TORCHWM_DISABLE_PLUGINS."
            )
        self._entries[name] = Entry(self.kind, name, factory, plugin, distribution, version, dict(metadata))

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self._entries) from None

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def names(self) -> list[str]:
        return sorted(self._entries)


def options_of(entry: Entry) -> dict[str, Any]:
    """Keyword options of ``entry`` and their defaults: declared by its plugin (``register(...,
    options={...})``),
    else those of its factory after the first argument (a backend's ``spec``), with a ``**name`` key when the
    factory takes any keyword."""
    declared = entry.metadata.get("options")
    if isinstance(declared, dict):
        return dict(declared)
    return signature_options(entry.factory)


def signature_options(factory: Callable[..., Any]) -> dict[str, Any]:
    """The keyword parameters of ``factory`` after its first, with their defaults (`REQUIRED` for none)."""
    try:
        params = list(inspect.signature(factory).parameters.values())[1:]
    except (TypeError, ValueError):
        return {"**options": REQUIRED}
    options: dict[str, Any] = {
        p.name: p.default for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            options["**" + p.name] = REQUIRED
    return options
