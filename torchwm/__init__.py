"""torchwm: fast, correct vectorized RL environments from a name, a backend and a wrapper stack.

    >>> import torchwm
    >>> envs = torchwm.make_vec("ALE/Pong-v5", num_envs=4, backend="sync", seed=0)  # doctest: +SKIP

Most public names are imported on first use (`_LAZY`): importing a transport, or any other torchwm
module, does not import ``make_vec``'s checks, config files, the listing, ALE's vector env or torch
(``torchwm.to_torch``, ``torchwm.ToTorch``). ``torchwm.evaluate(envs, policy, n_episodes)`` evaluates a
policy over exactly ``n_episodes`` episodes (both plain functions, of `torchwm.torch_tensors` and
`torchwm.evaluation`).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from torchwm import envs as _envs  # noqa: F401  (registers torchwm/Synthetic-v0 with Gymnasium)
from torchwm.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    ConfigError,
    EnvTimeoutError,
    InvalidSeedError,
    NoAsyncCallError,
    UnknownNameError,
    UnsupportedStackError,
    WorkerError,
)
from torchwm.hookspecs import hookimpl

if TYPE_CHECKING:
    from torchwm.atari_vector_env import make_atari_vector_env
    from torchwm.evaluation import evaluate
    from torchwm.factory import make_env, make_vec, make_vec_from_fns, make_vec_from_spec
    from torchwm.listing import list_backends, list_sources, list_wrappers
    from torchwm.multiprocessing_env import TorchVectorizedEnv
    from torchwm.setup_config import load_config, make_vec_from_config
    from torchwm.spec import VecSpec, WrapperSpec
    from torchwm.torch_tensors import ToTorch, to_torch
    from torchwm.vector.base import VectorEnv

# Public names imported on first use, and the module each comes from: importing any torchwm module runs
# this file first, so that a transport, and every worker the forkserver starts, would otherwise import
# make_vec's checks, config files (pydantic), the listing, OpenCV and torch.
_LAZY = {
    "make_atari_vector_env": "torchwm.atari_vector_env",
    # either kind of setup: a single-agent config's, or a [multiagent] table's
    "load_config": "torchwm.setup_config",
    "make_vec_from_config": "torchwm.setup_config",
    "evaluate": "torchwm.evaluation",
    "make_env": "torchwm.factory",
    "make_vec": "torchwm.factory",
    "make_vec_from_fns": "torchwm.factory",
    "make_vec_from_spec": "torchwm.factory",
    "list_backends": "torchwm.listing",
    "list_sources": "torchwm.listing",
    "list_wrappers": "torchwm.listing",
    "VecSpec": "torchwm.spec",
    "WrapperSpec": "torchwm.spec",
    "ToTorch": "torchwm.torch_tensors",
    "to_torch": "torchwm.torch_tensors",
    "TorchVectorizedEnv": "torchwm.multiprocessing_env",
    "VectorEnv": "torchwm.vector.base",
}

__all__ = [
    "__version__",
    "AlreadyPendingCallError",
    "ClosedEnvironmentError",
    "ConfigError",
    "EnvTimeoutError",
    "InvalidSeedError",
    "NoAsyncCallError",
    "TorchVectorizedEnv",
    "UnknownNameError",
    "UnsupportedStackError",
    "VecSpec",
    "VectorEnv",
    "WorkerError",
    "WrapperSpec",
    "evaluate",
    "hookimpl",
    "list_backends",
    "list_sources",
    "list_wrappers",
    "load_config",
    "make_atari_vector_env",
    "make_env",
    "make_vec",
    "make_vec_from_config",
    "make_vec_from_fns",
    "make_vec_from_spec",
    "to_torch",
    "ToTorch",
]


def __getattr__(name: str) -> Any:
    """The names of `_LAZY`, imported on first use; ``__version__``, read on first use; and a submodule not
    imported yet (``torchwm.factory``), as an attribute, so that ``import torchwm`` alone gives every
    submodule by its dotted name as a package whose modules are all imported would."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "__version__":
        value = _version()
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # the import binds it here
    else:
        raise AttributeError(f"module 'torchwm' has no attribute {name!r}")
    globals()[name] = value  # later reads find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    """The installed distribution's version (what ``torchwm --version`` prints); in a source tree that
    was never installed, the version its pyproject.toml gives."""
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    try:
        return version("torchwm")
    except PackageNotFoundError:
        pass
    try:
        pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    except OSError:
        return "0+unknown"
    # The [project] table's name and version lines, read by hand: tomllib is Python 3.11 and later only.
    section, project = "", dict[str, str]()
    for line in pyproject.splitlines():
        key, _, value = (part.strip() for part in line.partition("="))
        if line.startswith("["):
            section = line.strip()
        elif section == "[project]" and key in ("name", "version"):
            project[key] = value.strip("\"'")
    return project.get("version", "0+unknown") if project.get("name") == "torchwm" else "0+unknown"
