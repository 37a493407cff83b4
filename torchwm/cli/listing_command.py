"""``torchwm list``: every registered backend, wrapper and source with the plugin behind it and its
options, the loaded plugins (and those that failed to load), and the shipped configs."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from torchwm import listing
from torchwm.atari_kernel import kernel_status
from torchwm.command_line import EXIT_OK, Commands, UsageError, version
from torchwm.errors import did_you_mean
from torchwm.plugins import DEFAULT_PLUGINS, failed_plugins, plugin_manager, registry

KINDS = ("backends", "wrappers", "sources", "plugins", "configs")


def register(commands: Commands) -> None:
    parser = commands.add_command(
        "list", "registered backends, wrappers, sources, plugins and the shipped configs", cmd_list
    )
    parser.add_argument("kind", nargs="?", metavar="KIND", help=f"one of {', '.join(KINDS)} (default: all)")


def cmd_list(args: argparse.Namespace) -> int:
    if args.kind is not None and args.kind not in KINDS:
        raise UsageError(
            f"list {args.kind!r}: expected one of {', '.join(KINDS)}{did_you_mean(args.kind, KINDS)}"
        )
    kinds = [args.kind] if args.kind else list(KINDS)
    describe = {
        "backends": listing.list_backends,
        "wrappers": listing.list_wrappers,
        "sources": listing.list_sources,
    }
    for n, kind in enumerate(kinds):
        if n:
            print()
        print(f"{kind}:")
        rows: list[tuple[str, ...]]
        if kind == "plugins":
            rows = [(name, dist, ", ".join(provides)) for name, dist, provides in _plugins()]
        elif kind == "configs":
            rows = [(c.name, c.description) for c in listing.list_configs()]
        else:
            rows = []
            for info in describe[kind]():
                dist = f"{info.distribution or '?'} {info.version or ''}".strip()
                options = ", ".join(
                    k if v is listing.REQUIRED else f"{k}={v!r}" for k, v in info.options.items()
                )
                rows.append(
                    (
                        info.name,
                        f"{info.plugin} ({dist})",
                        f"options: {options or '(none)'}"
                        + (f"; {info.description}" if info.description else ""),
                    )
                )
        _print_rows(rows)
    if args.kind is None:
        print(f"\nfused Atari env, after the emulator: {kernel_status()}")
    return EXIT_OK


def _plugins() -> list[tuple[str, str, list[str]]]:
    """(plugin name, "distribution version", what it registered) for every loaded plugin."""
    manager = plugin_manager()
    dists = {
        manager.get_name(plugin): f"{d.metadata['name']} {d.version}"
        for plugin, d in manager.list_plugin_distinfo()
    }
    provided: dict[str, list[str]] = {}
    for kind in ("backend", "wrapper", "source"):
        for entry in registry(kind):
            provided.setdefault(entry.plugin, []).append(f"{kind} {entry.name}")
    rows = []
    for name, plugin in sorted(manager.list_name_plugin()):
        if plugin is None:
            rows.append((name, "blocked", ["(disabled by TORCHWM_DISABLE_PLUGINS)"]))
            continue
        dist = dists.get(name) or (
            f"torchwm {version('torchwm')}" if name in DEFAULT_PLUGINS else "(registered at run time)"
        )
        rows.append((name, dist, provided.get(name, ["(nothing)"])))
    for failed in failed_plugins():
        rows.append(
            (
                failed.name,
                f"{failed.distribution or '?'} {failed.version or ''}".strip(),
                [f"NOT LOADED: {failed.error}"],
            )
        )
    return rows


def _print_rows(rows: Sequence[tuple[str, ...]]) -> None:
    if not rows:
        print("  (none)")
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths)]
        print("  " + "  ".join([*cells, row[-1]]))
