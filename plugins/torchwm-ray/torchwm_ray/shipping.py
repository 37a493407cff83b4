"""Env factories shipped to the actors: user code that the nodes cannot import travels by value.

Ray sends an actor's arguments with its cloudpickle, which pickles a function or class by
reference (module and name) unless it comes from ``__main__``. The ``subproc`` and ``shmem``
backends get away with that because their workers share the parent's ``sys.path``; Ray's
workers do not (other nodes cannot even see this machine's files), so a factory defined in a
test module, a helper module beside the script or a notebook's directory would fail to load in
the actor (``No module named ...``). `ship_by_value` registers such modules with Ray's
cloudpickle to be pickled by value, as ``__main__`` is. A module of an installed distribution
(torchwm, gymnasium, ale_py, an env package installed on the nodes) keeps travelling by reference;
code that the nodes need beyond the factories' own modules is shipped with ``runtime_env``
(``py_modules``), see docs/cluster.md.
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from types import ModuleType
from typing import Any

from ray import cloudpickle


def factory_modules(fn: Any) -> set[str]:
    """The modules that define ``fn``: a function's or class's, a callable object's class's, and for a
    `functools.partial` those of its function and arguments."""
    if isinstance(fn, functools.partial):
        modules = factory_modules(fn.func)
        for arg in (*fn.args, *fn.keywords.values()):
            if callable(arg):
                modules |= factory_modules(arg)
        return modules
    owner = fn if isinstance(fn, type) or hasattr(fn, "__code__") else type(fn)
    name = getattr(owner, "__module__", None)
    return {name} if isinstance(name, str) else set()


def is_loose(module: ModuleType) -> bool:
    """Whether ``module`` is user code outside any installed distribution (by value), not ``__main__``
    (already by value), the standard library or an installed package."""
    top = module.__name__.partition(".")[0]
    if module.__name__ == "__main__" or top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return False
    if getattr(module, "__file__", None) is None:
        return False
    return top not in _installed_packages()


@functools.lru_cache(maxsize=1)
def _installed_packages() -> frozenset[str]:
    return frozenset(importlib.metadata.packages_distributions())


def ship_by_value(env_fns: list[Any]) -> list[str]:
    """Register the factories' loose modules (`is_loose`) to be pickled by value; their names."""
    shipped = []
    for name in sorted(set().union(*(factory_modules(fn) for fn in env_fns))):
        module = sys.modules.get(name)
        if module is not None and is_loose(module):
            cloudpickle.register_pickle_by_value(module)
            shipped.append(name)
    return shipped
