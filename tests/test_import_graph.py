"""torchwm's modules import one another without circles.

The graph is read from the source with `ast`: every import of a torchwm module, at the top of a module or
inside a function (a lazy import that hides a circle is still a circle), except those under
`if TYPE_CHECKING:`, which never run. `from torchwm import X` is an edge to the submodule `torchwm.X` when X
is one, else to the package `torchwm`. A circle is a strongly connected set of two or more modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# torchwm and the two plugins of this repository, each a graph of its own.
PACKAGE_DIRS = [
    ROOT / "torchwm",
    ROOT / "plugins/torchwm-ray/torchwm_ray",
    ROOT / "plugins/torchwm-envpool/torchwm_envpool",
]


def module_name(package_dir: Path, path: Path) -> str:
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(inner) for inner in ast.walk(child))
    return skipped


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    modules = {module_name(package_dir, path): path for path in package_dir.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
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
                # A name that is no Python module here (the C kernel, another package) is no edge.
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


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
    graph = import_graph(PACKAGE_DIRS[0])
    assert "torchwm.errors" in graph["torchwm.vector.base"]  # at the top of the module
    assert "torchwm.wrappers.record_video" in graph["torchwm.cli"]  # inside a function


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package_dir", PACKAGE_DIRS, ids=lambda path: path.name)
def test_no_import_circles(package_dir):
    assert circles(import_graph(package_dir)) == []


if __name__ == "__main__":
    for package_dir in PACKAGE_DIRS:
        for component in circles(import_graph(package_dir)):
            print(" <-> ".join(component))
