"""torchwm's modules import one another without circles, and only their own layer or lower ones.

The graph is read from the source with `ast`, over the whole tree: torchwm and the two plugins of this
repository, one graph, so that an import of a plugin from torchwm is an edge too. Every import of a module
of the tree counts: at the top of a module, inside a function (a lazy import that hides a circle is still
a circle) or under ``if TYPE_CHECKING:`` (a type-only circle is still one, and tools that evaluate
annotations follow it). `from torchwm import X` is an edge to the submodule `torchwm.X` when X is one,
else to the package `torchwm`. A circle is a strongly connected set of two or more modules.

The layers, lowest first (`LAYERS`); a module may import its own layer or lower ones only:

- ``core``: what every other layer, and every worker, stands on: the errors, the spec (plain data and the
  input checks), the plugin registry a spec's names are looked up in (a worker's `RegistrySnapshot` falls
  back to loading plugins), the hook markers, the kinds of space batched as arrays, an env's state.
- ``building``: building one env from a spec (`torchwm.building`) and what that imports: the sources, the
  wrappers (among them the fused Atari env and its stack parser), the seeding of each episode, ALE's
  names and vector env, the C kernel's loader.
- ``vector``: the vector envs, all of `torchwm/vector`: the base class, the pool, the backends, the
  messages, batching and env group they share, the transports.
- ``top``: what turns a user's words into a vector env and what sits on it: ``make_vec`` (`torchwm.factory`),
  config files, the listing, the command line, the benchmark, the plugin API, the conformance kit, the
  torch glue and the integrations, the multi-agent layouts (`torchwm/multiagent`), and the package itself.
- ``plugins``: the plugins, which stand on torchwm and which torchwm never imports.

Each folder is one layer: every module of a subpackage (`torchwm/wrappers`, `torchwm/vector` with its
`transports`, ...) is in its package's layer, so the tree says where a module may import from. Folders
import one another one way: the graph of folders (each first-level subpackage one node, each top-level
module its own) has no circle either, so two folders of one layer cannot lean on each other, and no import
runs back up from a folder to one that stands on it. A package's ``__main__`` (what ``python -m package``
runs) is a module of its folder like any other: ``python -m torchwm.bench`` runs the bench's own command
(`torchwm.bench.command`), not the command line above it; and nothing imports an entry point.

Every module must be in exactly one layer: a new module fails `test_every_module_has_one_layer` until it is
placed.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# torchwm and the two plugins of this repository: the tree, read as one graph.
PACKAGE_DIRS = (
    ROOT / "torchwm",
    ROOT / "plugins/torchwm-ray/torchwm_ray",
    ROOT / "plugins/torchwm-envpool/torchwm_envpool",
)


def module_name(package_dir: Path, path: Path) -> str:
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def import_graph(package_dirs: tuple[Path, ...] = PACKAGE_DIRS) -> dict[str, set[str]]:
    modules = {
        module_name(package_dir, path): path
        for package_dir in package_dirs
        for path in package_dir.rglob("*.py")
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base])
                    base = base.rstrip(".")
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                # A name that is no Python module of the tree (the C kernel, another package) is no edge.
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


# Layer -> the module names in it (fnmatch patterns), lowest layer first. A subpackage is placed whole.
LAYERS: dict[str, list[str]] = {
    "core": [
        "torchwm.errors",
        "torchwm.spec",
        "torchwm.registry",
        "torchwm.plugins",
        "torchwm.hookspecs",
        "torchwm.extras",
        "torchwm.spaces",
        "torchwm.env_state",
    ],
    "building": [
        "torchwm.building",
        "torchwm.sources",
        "torchwm.envs",
        "torchwm.names",
        "torchwm.atari_kernel",
        "torchwm.native",
        "torchwm.atari_stack",
        "torchwm.atari_vector_env",
        "torchwm.wrappers",
        "torchwm.wrappers.*",
    ],
    "vector": [
        "torchwm.vector",
        "torchwm.vector.*",
    ],
    "top": [
        "torchwm",
        "torchwm.__main__",
        "torchwm.factory",
        "torchwm.config",
        "torchwm.setup_config",
        "torchwm.listing",
        "torchwm.cli",
        "torchwm.cli.*",
        "torchwm.bench",
        "torchwm.bench.*",
        "torchwm.plugin_api",
        "torchwm.testing",
        "torchwm.testing.*",
        "torchwm.torch_tensors",
        "torchwm.evaluation",
        "torchwm.command_line",
        "torchwm.rollout",
        "torchwm.multiprocessing_env",
        "torchwm.integrations",
        "torchwm.integrations.*",
        "torchwm.multiagent",
        "torchwm.multiagent.*",
    ],
    "plugins": [
        "torchwm_ray",
        "torchwm_ray.*",
        "torchwm_envpool",
        "torchwm_envpool.*",
    ],
}

# Loops between folders still to remove (none): test_no_loop_between_folders fails on a new one.
FOLDER_LOOPS_TO_REMOVE: list[list[str]] = []


def layers_of(module: str, layers: dict[str, list[str]]) -> list[str]:
    """The layers whose patterns match ``module`` (exactly one, in a well-placed tree)."""
    return [
        layer for layer, patterns in layers.items() if any(fnmatch.fnmatchcase(module, p) for p in patterns)
    ]


def upward_imports(graph: dict[str, set[str]], layers: dict[str, list[str]]) -> list[str]:
    """Every import of a module of a higher layer than the importer's, as ``"a (layer) -> b (layer)"``."""
    rank = {layer: i for i, layer in enumerate(layers)}
    found = []
    for module in sorted(graph):
        (own,) = layers_of(module, layers)
        for target in sorted(graph[module]):
            (theirs,) = layers_of(target, layers)
            if rank[theirs] > rank[own]:
                found.append(f"{module} ({own}) -> {target} ({theirs})")
    return found


def folder_of(module: str, graph: dict[str, set[str]]) -> str:
    """The folder ``module`` is in: its first-level subpackage (``torchwm.vector`` for
    ``torchwm.vector.transports.pipe``, ``torchwm.bench`` for ``torchwm.bench.__main__``), or itself for a
    top-level module or a package of the tree."""
    first = ".".join(module.split(".")[:2])
    is_subpackage = first != module.split(".")[0] and any(name.startswith(f"{first}.") for name in graph)
    return first if is_subpackage else module


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with each folder one node: an edge between two folders for any import between them."""
    folders: dict[str, set[str]] = {folder_of(module, graph): set() for module in graph}
    for module, targets in graph.items():
        own = folder_of(module, graph)
        folders[own] |= {folder_of(target, graph) for target in targets} - {own}
    return folders


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_top_level_and_lazy_imports():
    graph = import_graph()
    assert "torchwm.errors" in graph["torchwm.vector.thread_hold"]  # at the top of the module
    # inside a function; the command line is a package, one module a command
    assert any(
        "torchwm.wrappers.record_video" in targets
        for module, targets in graph.items()
        if module.startswith("torchwm.cli")
    )
    assert "torchwm.vector.base" in graph["torchwm"]  # under `if TYPE_CHECKING:`
    assert "torchwm.plugin_api" in graph["torchwm_ray.actor"]  # from a plugin into torchwm


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_every_module_has_one_layer():
    misplaced = {
        module: layers_of(module, LAYERS) for module in import_graph() if len(layers_of(module, LAYERS)) != 1
    }
    assert misplaced == {}, "give each of these modules one layer in LAYERS"


def test_an_upward_import_is_found():
    layers = {"low": ["pkg.low", "pkg.low.*"], "high": ["pkg.high"]}
    graph = {"pkg.low": {"pkg.low.util"}, "pkg.low.util": {"pkg.high"}, "pkg.high": {"pkg.low"}}
    assert upward_imports(graph, layers) == ["pkg.low.util (low) -> pkg.high (high)"]
    assert layers_of("pkg.other", layers) == []  # what test_every_module_has_one_layer reports


def test_an_import_of_a_plugin_runs_up():
    graph = {"torchwm.spec": {"torchwm_ray.group"}, "torchwm_ray.group": {"torchwm.spec"}}
    assert upward_imports(graph, LAYERS) == ["torchwm.spec (core) -> torchwm_ray.group (plugins)"]


def test_no_upward_imports():
    assert upward_imports(import_graph(), LAYERS) == []


def test_each_folder_is_one_layer():
    graph = import_graph()
    apart = {
        module: (layers_of(module, LAYERS), layers_of(folder_of(module, graph), LAYERS))
        for module in graph
        if layers_of(module, LAYERS) != layers_of(folder_of(module, graph), LAYERS)
    }
    assert apart == {}, "each module of a subpackage belongs in its package's layer: move it, or the package"


def test_a_loop_between_folders_is_found():
    # No circle of modules, but the folders pkg.a and pkg.b lean on each other through pkg.top.
    graph = {
        "pkg": set(),
        "pkg.a": {"pkg.top"},
        "pkg.a.one": set(),
        "pkg.b": set(),
        "pkg.b.two": {"pkg.a.one"},
        "pkg.top": {"pkg.b"},
    }
    assert circles(graph) == []
    assert [folder_of(module, graph) for module in ("pkg", "pkg.a", "pkg.a.one", "pkg.top")] == [
        "pkg",
        "pkg.a",
        "pkg.a",
        "pkg.top",
    ]
    assert circles(folder_graph(graph)) == [["pkg.a", "pkg.b", "pkg.top"]]


@pytest.mark.parametrize("importer", ["pkg.low.__main__", "pkg.low.command"])
def test_an_arrow_back_up_from_a_main_module_is_found(importer):
    # pkg.high stands on pkg.low; pkg.low's __main__ running pkg.high's command is an arrow back up, as the
    # same import from any other module of pkg.low is (torchwm.bench.__main__ ran torchwm.cli's main).
    graph = {"pkg.low": set(), importer: {"pkg.high"}, "pkg.high": {"pkg.low"}}
    assert folder_of(importer, graph) == "pkg.low"
    # Either import closes the loop: both are named, the one to remove is the one against the layering.
    assert arrows_back_up(graph) == ["pkg.high -> pkg.low", f"{importer} -> pkg.high"]


def arrows_back_up(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of another folder that stands, directly or not, on the importer's folder:
    the imports that close a loop between folders, ``__main__`` modules' included."""
    folders = folder_graph(graph)

    def stands_on(folder: str, lower: str) -> bool:
        seen, todo = set(), [folder]
        while todo:
            current = todo.pop()
            if current == lower:
                return True
            if current not in seen:
                seen.add(current)
                todo += folders[current]
        return False

    return [
        f"{module} -> {target}"
        for module in sorted(graph)
        for target in sorted(graph[module])
        if folder_of(target, graph) != folder_of(module, graph)
        and stands_on(folder_of(target, graph), folder_of(module, graph))
    ]


def test_no_arrow_back_up_in_the_tree():
    assert arrows_back_up(import_graph()) == []


def test_nothing_imports_an_entry_point():
    graph = import_graph()
    assert {
        module: sorted(t for t in targets if t.endswith(".__main__"))
        for module, targets in graph.items()
        if any(t.endswith(".__main__") for t in targets)
    } == {}


def test_no_loop_between_folders():
    assert circles(folder_graph(import_graph())) == FOLDER_LOOPS_TO_REMOVE


def test_importing_a_transport_imports_no_upper_layer():
    """Importing a transport (what every worker the forkserver starts does) runs ``torchwm/__init__`` first:
    nothing of make_vec's checks, config files (pydantic), OpenCV or torch comes with it."""
    heavy = ["torchwm.config", "torchwm.factory", "torchwm.listing", "pydantic", "cv2", "torch"]
    code = (
        "import sys, torchwm.vector.transports.shared_memory; "
        f"print([name for name in {heavy!r} if name in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"


def test_every_public_name_is_importable_and_listed():
    import torchwm

    namespace: dict[str, object] = {}
    exec(f"from torchwm import {', '.join(torchwm.__all__)}", namespace)
    assert [name for name in torchwm.__all__ if name not in dir(torchwm)] == []
    assert namespace["make_vec"].__module__ == "torchwm.factory"
    assert namespace["VecSpec"].__module__ == "torchwm.spec"
    assert namespace["to_torch"] is sys.modules["torchwm.torch_tensors"].to_torch
    assert namespace["evaluate"] is sys.modules["torchwm.evaluation"].evaluate
    assert torchwm.factory is sys.modules["torchwm.factory"]  # a submodule is an attribute, not imported
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        torchwm.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("torchwm.atari_stack.parse_atari_stack", "torchwm.wrappers.atari_stack.parse_atari_stack"),
        ("torchwm.atari_stack.PATH_LIMITS", "torchwm.wrappers.atari_stack.PATH_LIMITS"),
        ("torchwm.native.kernel_status", "torchwm.atari_kernel.kernel_status"),
        ("torchwm.native.KERNEL", "torchwm.atari_kernel.KERNEL"),
        ("torchwm.vector.batching.ARRAY_SPACES", "torchwm.spaces.ARRAY_SPACES"),
        ("torchwm.vector.stepper.check_batch_size", "torchwm.vector.stepper.checked_batch_size"),
        ("torchwm.TorchVectorizedEnv", "torchwm.multiprocessing_env.TorchVectorizedEnv"),
    ],
)
def test_a_name_by_its_earlier_path_is_the_same_object(old, new):
    def lookup(path: str) -> object:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)

    assert lookup(old) is lookup(new)


def test_a_module_kept_under_its_earlier_path_exports_every_name_it_had():
    import torchwm.atari_stack
    import torchwm.native

    assert set(torchwm.atari_stack.__all__) == {
        "LAYERS",
        "PATH_LIMITS",
        "AtariStack",
        "parse_atari_stack",
        "parse_for",
        "path_refusal",
    }
    assert {"KERNEL", "FORCED", "kernel_status", "kernel_path", "fast_gray_lookup"} <= set(
        torchwm.native.__all__
    )


if __name__ == "__main__":
    for component in circles(import_graph()) + circles(folder_graph(import_graph())):
        print(" <-> ".join(component))
    for line in upward_imports(import_graph(), LAYERS):
        print(line)
