"""A class lives in one file: its parts are objects it holds, not mixins (docs/concepts.md, "The layers
under a vector env").

A *mixin* here is a class without ``__init__`` whose bases are nothing but other mixins, and that declares
attributes it never sets (a bare annotation ``name: type`` at class level that none of its methods assigns
to ``self.name``): attributes of the class it is mixed into. Such a class is one class's methods written in
another file, reading that class's attributes: the class is spread over files. Two rules, read from the
source (no import) of ``torchwm/`` and of each plugin's package:

- no mixin;
- no class whose bases include a mixin.

Records are not mixins (dataclasses, ``NamedTuple``, ``TypedDict``, ``Protocol``, ``Enum``), nor are
annotations of ``ClassVar``; a base class with an ``__init__`` (`torchwm.vector.stepper.Stepper`, whose
subclasses set the spaces it declares) is the primary base of its subclasses, not mixed in.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    ROOT / "torchwm",
    ROOT / "plugins" / "torchwm-ray" / "torchwm_ray",
    ROOT / "plugins" / "torchwm-envpool" / "torchwm_envpool",
]

RECORD_BASES = {"NamedTuple", "TypedDict", "Protocol", "Enum", "IntEnum", "StrEnum", "Flag", "IntFlag"}


@dataclass
class ClassInfo:
    file: str  # relative to the checkout, with "/"
    node: ast.ClassDef
    module: str
    imports: dict[str, str]  # a name in the class's module -> the dotted path it was imported as


@dataclass(frozen=True)
class Finding:
    file: str
    message: str


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.Module, module: str) -> dict[str, str]:
    """Each name the module binds by an import, and the dotted path it stands for."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package
                package = module.split(".")[: -node.level]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def read_classes(packages: list[Path], checkout: Path) -> dict[str, ClassInfo]:
    """Every class of the packages, by its dotted path (``torchwm.vector.base.VectorEnv``)."""
    classes: dict[str, ClassInfo] = {}
    for package in packages:
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            module = module_name(path, package)
            imports = imported_names(tree, module)
            file = path.relative_to(checkout).as_posix()
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    classes[f"{module}.{node.name}"] = ClassInfo(file, node, module, imports)
    return classes


def base_path(base: ast.expr, info: ClassInfo, classes: dict[str, ClassInfo]) -> str | None:
    """The dotted path of a base class expression, if it names a class read here."""
    if isinstance(base, ast.Subscript):  # Generic[T], SomeBase[int]
        base = base.value
    dotted = ast.unparse(base)
    head, _, rest = dotted.partition(".")
    if head in info.imports:
        path = info.imports[head] + (f".{rest}" if rest else "")
    else:
        path = f"{info.module}.{dotted}"
    return path if path in classes else None


def is_record(node: ast.ClassDef) -> bool:
    decorators = [ast.unparse(decorator) for decorator in node.decorator_list]
    bases = [ast.unparse(base).split("[")[0].split(".")[-1] for base in node.bases]
    return any("dataclass" in decorator for decorator in decorators) or any(b in RECORD_BASES for b in bases)


def undeclared_by_self(node: ast.ClassDef) -> list[str]:
    """The attributes the class declares (a bare annotation) and none of its methods sets."""
    declared = [
        statement.target.id
        for statement in node.body
        if isinstance(statement, ast.AnnAssign)
        and statement.value is None
        and isinstance(statement.target, ast.Name)
        and "ClassVar" not in ast.unparse(statement.annotation)
    ]
    assigned: set[str] = set()
    for statement in node.body:
        if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(statement):
            if isinstance(sub, ast.Assign):
                targets = sub.targets
            elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                targets = [sub.target]
            else:
                continue
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name):
                        if part.value.id == "self":
                            assigned.add(part.attr)
    return sorted(name for name in declared if name not in assigned)


def mixins(classes: dict[str, ClassInfo]) -> dict[str, list[str]]:
    """The mixins (see the module docstring), each with the attributes of its host it declares (its own,
    or for a mixin built on mixins, theirs)."""
    found: dict[str, list[str]] = {}
    changed = True
    while changed:  # a class without __init__ on mixins only is a mixin too: to a fixed point
        changed = False
        for path, info in classes.items():
            node = info.node
            if path in found or is_record(node):
                continue
            if any(isinstance(s, ast.FunctionDef) and s.name == "__init__" for s in node.body):
                continue
            bases = [base_path(base, info, classes) for base in node.bases]
            if any(base is None or base not in found for base in bases):
                continue  # a base from outside, or one that is no mixin, may set what it declares
            host = undeclared_by_self(node) + [name for base in bases for name in found[base or ""]]
            if host:
                found[path] = sorted(set(host))
                changed = True
    return found


def findings(packages: list[Path], checkout: Path) -> list[Finding]:
    """Each mixin, and each class that takes methods from one."""
    classes = read_classes(packages, checkout)
    mixed = mixins(classes)
    result = []
    for path, info in classes.items():
        if path in mixed:
            result.append(
                Finding(
                    info.file,
                    f"{info.node.name} is a mixin: it declares attributes of the class it is mixed into "
                    f"({', '.join(mixed[path])}); make it an object that class holds",
                )
            )
            continue
        parts = [base_path(base, info, classes) for base in info.node.bases]
        spread = [f"{classes[base].node.name} ({classes[base].file})" for base in parts if base in mixed]
        if spread:
            result.append(
                Finding(
                    info.file,
                    f"{info.node.name} takes methods from the mixins {', '.join(spread)}: its methods are "
                    f"defined in more than one file",
                )
            )
    return result


def test_no_class_is_spread_over_files_by_mixins():
    assert findings(PACKAGES, ROOT) == []


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))


def test_a_mixin_and_the_class_it_is_mixed_into_are_named(tmp_path):
    hold = """
        import threading

        class Hold:
            _lock: threading.Lock
            closed: bool

            def take(self):
                self._lock.acquire()
        """
    more = """
        from pkg.hold import Hold

        class MoreHold(Hold):
            def give(self):
                pass
        """
    env = """
        import gymnasium as gym
        from pkg import more
        from pkg.hold import Hold

        class Env(Hold, gym.Env):
            def __init__(self):
                self._lock = None

        class Other(more.MoreHold, gym.Env):
            pass
        """
    write(tmp_path, {"pkg/__init__.py": "", "pkg/hold.py": hold, "pkg/more.py": more, "pkg/env.py": env})
    spread = "its methods are defined in more than one file"
    declares = "declares attributes of the class it is mixed into (_lock, closed); make it an object that"
    assert sorted(findings([tmp_path / "pkg"], tmp_path), key=lambda finding: finding.message) == [
        Finding("pkg/env.py", f"Env takes methods from the mixins Hold (pkg/hold.py): {spread}"),
        Finding("pkg/hold.py", f"Hold is a mixin: it {declares} class holds"),
        Finding("pkg/more.py", f"MoreHold is a mixin: it {declares} class holds"),
        Finding("pkg/env.py", f"Other takes methods from the mixins MoreHold (pkg/more.py): {spread}"),
    ]


def test_parts_held_records_and_base_classes_are_no_mixins(tmp_path):
    hold = """
        import threading

        class Hold:
            def __init__(self):
                self.lock = threading.Lock()

        class Book:
            pages: list

            def open(self):
                self.pages = []
        """
    records = """
        from dataclasses import dataclass
        from typing import ClassVar, NamedTuple

        @dataclass
        class Row:
            index: int

        class Pair(NamedTuple):
            a: int

        class Flags:
            limit: ClassVar[int] = 3
        """
    stepper = """
        import abc

        class Stepper(abc.ABC):
            observations: list

            def __init__(self, n):
                self.n = n
        """
    env = """
        from pkg.hold import Hold
        from pkg.stepper import Stepper

        class SyncStepper(Stepper):
            def __init__(self):
                super().__init__(1)
                self.observations = []

        class Env:
            def __init__(self):
                self.hold = Hold()
        """
    files = {"pkg/hold.py": hold, "pkg/records.py": records, "pkg/stepper.py": stepper, "pkg/env.py": env}
    write(tmp_path, {"pkg/__init__.py": "", **files})
    assert findings([tmp_path / "pkg"], tmp_path) == []
