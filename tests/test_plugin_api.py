"""The plugins of this repository build on torchwm's declared plugin API only (`torchwm.plugin_api`).

Every .py under plugins/*/torchwm_*/ is parsed with `ast`, its doctests too: an import of a torchwm
module other than ``torchwm.plugin_api`` and ``torchwm.errors`` fails, naming file and line. A doctest
shows a user's call and may also import ``torchwm`` (``torchwm.make_vec(..., backend="ray")``). The
plugin code of docs/plugins/ (a block that imports ``torchwm.plugin_api``) keeps to the same two
modules; the pages' other blocks are a user's, and may also use ``torchwm``, ``torchwm.plugins``
(register a plugin at run time) and ``torchwm.testing`` (the conformance kit). Neither reads a
private attribute of a torchwm object (`private_reads`). The API itself is small (at most `MOST_NAMES`
names), each name documented and used by a plugin or by the plugin pages.
"""

from __future__ import annotations

import ast
import doctest
import functools
import inspect
import re
import types
from pathlib import Path

import pytest

import torchwm
import torchwm.errors
import torchwm.plugin_api

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_FILES = sorted(ROOT.glob("plugins/*/torchwm_*/**/*.py"))
ALLOWED = {"torchwm.plugin_api", "torchwm.errors"}
# A user's code: the doctests of a plugin, the blocks of the plugin pages that are not plugin code (make a
# vector env, register a plugin at run time, run the conformance kit).
ALLOWED_FOR_USERS = ALLOWED | {"torchwm", "torchwm.plugins", "torchwm.testing"}
PLUGIN_PAGES = sorted(ROOT.glob("docs/plugins/*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
MOST_NAMES = 20
# What `torchwm.plugin_api.messages` declares (the module holds internal names too).
MESSAGES = (
    "Step",
    "Reset",
    "Call",
    "SetAttr",
    "NeedsReset",
    "CloneStates",
    "RestoreStates",
    "Close",
    "ControlCommand",
    "ErrorReply",
    "error_reply",
    "ShareDescription",
    "describe_share",
)
# The public methods of a named tuple (``reply._replace(...)``), whose names begin with an underscore.
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_field_defaults", "_make"}


def torchwm_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import of a torchwm module in ``tree`` (``from torchwm import x``: the module
    ``torchwm.x`` when x is a submodule, else ``torchwm``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "torchwm":
                found += [
                    (
                        node.lineno,
                        f"torchwm.{alias.name}" if _is_module(f"torchwm.{alias.name}") else "torchwm",
                    )
                    for alias in node.names
                ]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name == "torchwm" or name.startswith("torchwm.")]


def _is_module(name: str) -> bool:
    return (ROOT / Path(*name.split("."))).is_dir() or (ROOT / Path(*name.split("."))).with_suffix(
        ".py"
    ).is_file()


def forbidden_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: module`` for each import of ``path`` (its code and its doctests) outside `ALLOWED`."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    found = torchwm_imports(tree)
    parser = doctest.DocTestParser()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if not docstring:
                continue
            # The docstring's first line in the file: the line of its string constant.
            first_line = node.body[0].lineno
            for example in parser.get_examples(docstring):
                try:
                    example_tree = ast.parse(example.source)
                except SyntaxError:
                    continue
                found += [
                    (first_line + example.lineno, name)
                    for _, name in torchwm_imports(example_tree)
                    if name not in ALLOWED_FOR_USERS
                ]
    relative = path.relative_to(root)
    return [f"{relative}:{line}: imports {name}" for line, name in sorted(found) if name not in ALLOWED]


def test_the_check_finds_an_internal_import(tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        '"""A plugin.\n\n>>> from torchwm.vector.pool import WorkerPool\n"""\n\n'
        "import torchwm\nfrom torchwm.plugin_api import WorkerHandle\nfrom torchwm.spec import VecSpec\n"
        "from torchwm import factory\n"
    )
    found = torchwm_imports(ast.parse(plugin.read_text()))
    assert (8, "torchwm.spec") in found and (9, "torchwm.factory") in found and (6, "torchwm") in found
    assert forbidden_imports(plugin, root=tmp_path) == [
        "plugin.py:3: imports torchwm.vector.pool",
        "plugin.py:6: imports torchwm",
        "plugin.py:8: imports torchwm.spec",
        "plugin.py:9: imports torchwm.factory",
    ]


def test_there_are_plugins_to_check():
    assert {path.parent.name for path in PLUGIN_FILES} == {"torchwm_ray", "torchwm_envpool"}


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_import_only_the_plugin_api(path):
    assert forbidden_imports(path) == []


@pytest.mark.parametrize("page", PLUGIN_PAGES, ids=lambda path: path.name)
def test_the_plugin_pages_import_only_the_plugin_api(page):
    wrong = []
    for block in FENCE.findall(page.read_text(encoding="utf-8")):
        names = {name for _, name in torchwm_imports(ast.parse(block))}
        allowed = ALLOWED if "torchwm.plugin_api" in names else ALLOWED_FOR_USERS
        wrong += sorted(names - allowed)
    assert wrong == []


def test_every_declared_name_exists():
    missing = [name for name in torchwm.plugin_api.__all__ if not hasattr(torchwm.plugin_api, name)]
    assert missing == []
    assert len(set(torchwm.plugin_api.__all__)) == len(torchwm.plugin_api.__all__)


def test_the_api_holds_what_a_transport_author_needs():
    api = torchwm.plugin_api
    needed = {
        "WorkerGroup",
        "WorkerHandle",
        "Deadline",
        "VecSpec",
        "hookimpl",
        "Batch",
        "WorkerPayload",
        "WorkerPool",
        "checks",
        "messages",
        "rows",
        "EnvGroup",
        "VectorEnv",
        "SharedBlock",
        "parse_for",
    }
    assert needed <= set(api.__all__)
    assert api.VectorEnv is torchwm.VectorEnv
    assert api.VecSpec is torchwm.VecSpec and api.hookimpl is torchwm.hookimpl
    # The types a transport's methods take, through the classes that take them.
    assert api.WorkerHandle.Payload is api.WorkerPayload and api.WorkerHandle.Batch is api.Batch
    assert api.WorkerGroup.Settings.__name__ == "PoolSettings" and callable(api.WorkerGroup.split_evenly)
    # What a handle raises to the pool is with the other errors.
    assert issubclass(torchwm.errors.WorkerGone, Exception)
    assert issubclass(torchwm.errors.StepLost, TimeoutError)
    for name in MESSAGES:
        assert re.search(rf"``(messages\.)?{name}``", api.__doc__) and hasattr(api.messages, name), name
    for name in ("check_count", "check_timeout", "check_batch_size"):
        assert callable(getattr(api.checks, name)), name
    assert {"create_batch", "take_rows", "slice_rows", "ARRAY_SPACES"} <= set(api.rows.__all__)


def test_the_api_holds_what_a_stepper_author_needs():
    """A `Stepper` over `EnvGroup`s seeds autoresets with a book of its own (docs/plugins/tutorial.md): the
    book the vector env reads, from the API, since a plugin imports nothing else of torchwm."""
    from torchwm.vector.episode_seeds import EpisodeSeedBook

    api = torchwm.plugin_api
    assert {"Stepper", "EnvGroup", "EpisodeSeedBook", "build_env", "rows"} <= set(api.__all__)
    assert api.EpisodeSeedBook is EpisodeSeedBook
    assert "`EpisodeSeedBook`" in api.__doc__ and "episode_seeds" in api.__doc__


def test_the_api_is_small():
    assert len(torchwm.plugin_api.__all__) <= MOST_NAMES, torchwm.plugin_api.__all__


def undocumented(module: types.ModuleType) -> list[str]:
    """The names of ``module.__all__`` (and of its namespaces' ``__all__``) without a docstring of their own:
    a class, function or module needs its ``__doc__``; any other value an entry ``` `name` ``` in the
    docstring of the module that lists it."""
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            missing += [f"{name}.{inner}" for inner in undocumented_members(value)]
        if isinstance(value, type):
            documented = bool(vars(value).get("__doc__"))
        elif isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.ModuleType)):
            documented = bool(value.__doc__)
        else:
            documented = f"`{name}`" in (module.__doc__ or "")
        if not documented:
            missing.append(name)
    return missing


def undocumented_members(namespace: types.ModuleType) -> list[str]:
    # A module re-exported whole (`messages`, which has internal names too): the names of the API.
    names = getattr(namespace, "__all__", MESSAGES)
    holder = types.ModuleType(namespace.__name__, namespace.__doc__)
    holder.__dict__.update({name: getattr(namespace, name) for name in names})
    holder.__all__ = list(names)  # type: ignore[attr-defined]
    return undocumented(holder)


def test_the_docstring_check_finds_an_undocumented_name():
    module = types.ModuleType("api", "The API: `LIMIT`, the most there can be.")

    class Documented:
        """Here."""

    class Bare:
        pass

    def bare():
        pass

    module.__dict__.update(Documented=Documented, Bare=Bare, bare=bare, LIMIT=3, OTHER=4)
    module.__all__ = ["Documented", "Bare", "bare", "LIMIT", "OTHER"]  # type: ignore[attr-defined]
    assert undocumented(module) == ["Bare", "bare", "OTHER"]


def test_every_name_has_a_docstring():
    assert undocumented(torchwm.plugin_api) == []


def test_every_name_is_used_by_a_plugin_or_the_plugin_pages():
    """A name no plugin and no example uses is no name a backend author needs (the pages' prose, which
    lists every name, does not count)."""
    code = [path.read_text(encoding="utf-8") for path in PLUGIN_FILES]
    examples = [block for page in PLUGIN_PAGES for block in FENCE.findall(page.read_text(encoding="utf-8"))]
    text = "\n".join(code + examples)
    unused = [name for name in torchwm.plugin_api.__all__ if not re.search(rf"\b{name}\b", text)]
    assert unused == []


# -- private attributes ----------------------------------------------------------------------------


def defined_privates(trees: list[ast.AST]) -> set[str]:
    """The ``_``-prefixed attribute names the code of ``trees`` gives its own objects: methods and class
    attributes of its classes, and ``self._name = ...`` (or annotated) assignments."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(item.target.id)
                    elif isinstance(item, ast.Assign):
                        names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
    return {name for name in names if _private(name)}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# The integrations are left out: their classes implement other libraries' private protocols (TorchRL's
# `_reset`, `_step`), names a plugin meets on those libraries' objects, never on torchwm's.
TORCHWM_PRIVATES = defined_privates(
    [
        ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "torchwm").rglob("*.py"))
        if "integrations" not in path.relative_to(ROOT).parts
    ]
)


def private_reads(tree: ast.AST, own: set[str], torchwm_privates: set[str] = TORCHWM_PRIVATES) -> list[int]:
    """The lines of ``tree`` that read ``x._name`` of a torchwm object: ``x`` is not ``self``/``cls``
    itself, ``_name`` is a private torchwm gives its objects and not one of ``own`` (the privates the
    plugin gives its own objects). Privates of other packages (``os._exit``, EnvPool's ``_reset``) and
    a named tuple's ``_replace`` are not torchwm's."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr in own or node.attr in NAMEDTUPLE_API or node.attr not in torchwm_privates:
            continue
        lines.append(node.lineno)
    return sorted(lines)


def test_the_check_finds_a_private_read():
    plugin = ast.parse(
        "import os\n"
        "class Env:\n"
        "    _mine = 1\n"
        "    def actors(self):\n"
        "        self._own = self._stepper\n"  # on self: allowed
        "        return [h.actor for h in self._stepper._handles]\n"  # 6: the pool's handles
        "    def more(self, other):\n"
        "        os._exit(0); reply._replace(env=1); other._own; other._mine\n"  # not torchwm's, or its own
        "        return other._batch\n"  # 9
    )
    own = defined_privates([plugin])
    assert own == {"_mine", "_own"}
    assert private_reads(plugin, own, {"_stepper", "_handles", "_batch", "_own"}) == [6, 9]


@functools.cache
def _plugin_privates(package: Path) -> set[str]:
    return defined_privates([ast.parse(path.read_text(encoding="utf-8")) for path in package.rglob("*.py")])


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_read_no_private_attribute_of_torchwm(path):
    package = next(parent for parent in path.parents if parent.name.startswith("torchwm_"))
    own = _plugin_privates(package)
    found = private_reads(ast.parse(path.read_text(encoding="utf-8")), own)
    assert found == [], [path.read_text(encoding="utf-8").splitlines()[line - 1].strip() for line in found]


@pytest.mark.parametrize("page", PLUGIN_PAGES, ids=lambda path: path.name)
def test_the_plugin_pages_read_no_private_attribute_of_torchwm(page):
    blocks = [ast.parse(block) for block in FENCE.findall(page.read_text(encoding="utf-8"))]
    own = defined_privates(blocks)
    assert [line for block in blocks for line in private_reads(block, own)] == []


def test_a_pool_shows_its_workers():
    """`WorkerPool.workers`, what a plugin reads of its handles instead of the pool's private list."""
    with torchwm.make_vec("CartPole-v1", 3, backend="subproc", backend_kwargs={"num_workers": 2}) as envs:
        workers = envs.workers
        assert [worker.index for worker in workers] == [0, 1]
        assert [worker.envs for worker in workers] == envs.worker_slices
        assert [worker.pid for worker in workers] == envs.worker_pids
        workers.clear()
        assert len(envs.workers) == 2  # a new list each time


# -- a narrow contract: what a transport implements, what the Ray plugin imports -----------------------

MOST_ABSTRACT_METHODS = 6  # Tianshou's EnvWorker has six
MOST_RAY_NAMES = 10
RAY_FILES = sorted(ROOT.glob("plugins/torchwm-ray/torchwm_ray/**/*.py"))


def test_a_transport_implements_at_most_six_methods_of_the_worker_handle():
    abstract = torchwm.plugin_api.WorkerHandle.__abstractmethods__
    assert len(abstract) <= MOST_ABSTRACT_METHODS, sorted(abstract)
    assert sorted(abstract) == ["attach", "close", "poll", "reply", "send", "start"]


def plugin_api_names(paths: list[Path]) -> set[str]:
    """The names ``paths`` import from `torchwm.plugin_api` (``import torchwm.plugin_api`` counts as its whole
    ``__all__``: the names it reaches are not counted one by one)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "torchwm.plugin_api":
                names |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module == "torchwm":
                if any(alias.name == "plugin_api" for alias in node.names):
                    names |= set(torchwm.plugin_api.__all__)
            elif isinstance(node, ast.Import) and any(a.name == "torchwm.plugin_api" for a in node.names):
                names |= set(torchwm.plugin_api.__all__)
    return names


def test_the_name_count_sees_every_form_of_import(tmp_path):
    one = tmp_path / "one.py"
    one.write_text(
        "from torchwm.plugin_api import Deadline, messages\nfrom torchwm.errors import WorkerGone\n"
    )
    assert plugin_api_names([one]) == {"Deadline", "messages"}
    whole = tmp_path / "whole.py"
    whole.write_text("import torchwm.plugin_api as api\n")
    assert plugin_api_names([one, whole]) == set(torchwm.plugin_api.__all__)


def test_the_ray_plugin_imports_at_most_ten_names_of_the_plugin_api_and_else_only_errors():
    names = plugin_api_names(RAY_FILES)
    assert len(names) <= MOST_RAY_NAMES, sorted(names)
    modules = {name for path in RAY_FILES for _, name in torchwm_imports(ast.parse(path.read_text("utf-8")))}
    assert modules <= {"torchwm.plugin_api", "torchwm.errors"}


def privates_of_torchwm_classes(cls: type) -> set[str]:
    """The ``_``-prefixed attributes the torchwm classes of ``cls``'s MRO give their objects (read from
    their source: class attributes, methods and ``self._name = ...``)."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not base.__module__.startswith("torchwm."):
            continue
        source = Path(inspect.getsourcefile(base) or "")
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name == base.__name__:
                names |= defined_privates([node])
    return names


def inherited_private_reads(tree: ast.AST, api: dict[str, object]) -> list[int]:
    """The lines of ``tree`` where a class reads ``self._name`` (or ``cls._name``) that a torchwm base class
    of it gives its objects: a plugin's subclass reading its base's internals. Bases are resolved in
    ``api`` (the plugin API's names) or among the classes of ``tree``."""
    classes = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}

    def torchwm_bases(node: ast.ClassDef) -> list[type]:
        found: list[type] = []
        for base in node.bases:
            text = ast.unparse(base)
            if text in classes:
                found += torchwm_bases(classes[text])
                continue
            try:
                value = eval(text, dict(api))  # noqa: S307 - a base-class expression of the plugin's code
            except Exception:
                continue
            if isinstance(value, type) and value.__module__.startswith("torchwm."):
                found.append(value)
        return found

    lines = []
    for node in classes.values():
        inherited = set().union(*(privates_of_torchwm_classes(base) for base in torchwm_bases(node)))
        for attribute in ast.walk(node):
            if (
                isinstance(attribute, ast.Attribute)
                and isinstance(attribute.value, ast.Name)
                and attribute.value.id in ("self", "cls")
                and attribute.attr in inherited
            ):
                lines.append(attribute.lineno)
    return sorted(set(lines))


def test_the_check_finds_a_read_of_a_base_classs_private():
    plugin = ast.parse(
        "class Env(VectorEnv):\n"
        "    def engine(self):\n"
        "        self._mine = 1\n"  # its own
        "        return self._stepper.pool\n"  # 4: VectorEnv's
        "class Handle(WorkerHandle):\n"
        "    def start(self, payload):\n"
        "        self._step = None\n"  # not a WorkerHandle private (a transport's of torchwm's own)
    )
    assert inherited_private_reads(plugin, vars(torchwm.plugin_api)) == [4]


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_plugins_read_no_private_attribute_of_their_torchwm_base_classes(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = inherited_private_reads(tree, vars(torchwm.plugin_api))
    assert found == [], [path.read_text(encoding="utf-8").splitlines()[line - 1].strip() for line in found]
