"""torchwm: fast, correct vectorized RL environments from a name, a backend and a wrapper stack.

    >>> import torchwm
    >>> envs = torchwm.make_vec("ALE/Pong-v5", num_envs=4, backend="sync", seed=0)  # doctest: +SKIP

``torchwm.to_torch`` and ``torchwm.ToTorch`` (torch tensors out) import torch on first use only.
"""

from typing import Any

from torchwm import envs as _envs  # noqa: F401  (registers torchwm/Synthetic-v0 with Gymnasium)
from torchwm.ale_vector import make_atari_vector_env
from torchwm.config import load_config, make_vec_from_config
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
from torchwm.factory import make_env, make_vec, make_vec_from_fns, make_vec_from_spec
from torchwm.hookspecs import hookimpl
from torchwm.listing import list_backends, list_sources, list_wrappers
from torchwm.spec import VecSpec, WrapperSpec
from torchwm.torch_vectorized import TorchVectorizedEnv
from torchwm.vector.base import VectorEnv

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
    """``to_torch`` and ``ToTorch``, imported on first use, so that ``import torchwm`` does not import
    torch; ``__version__``, read on first use."""
    if name in ("to_torch", "ToTorch"):
        import torchwm.to_torch as module  # the module is callable as to_torch

        return module if name == "to_torch" else module.ToTorch
    if name == "__version__":
        version = globals()["__version__"] = _version()  # later reads find it without this hook
        return version
    raise AttributeError(f"module 'torchwm' has no attribute {name!r}")


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
