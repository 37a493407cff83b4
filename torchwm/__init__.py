"""torchwm: fast, correct vectorized RL environments from a name, a backend and a wrapper stack.

    >>> import torchwm
    >>> envs = torchwm.make_vec("ALE/Pong-v5", num_envs=4, backend="sync", seed=0)  # doctest: +SKIP
"""

from torchwm.errors import (
    ClosedEnvironmentError,
    ConfigError,
    EnvTimeoutError,
    UnknownNameError,
    UnsupportedStackError,
    WorkerError,
)
from torchwm.factory import make_env, make_vec, make_vec_from_spec
from torchwm.hookspecs import hookimpl
from torchwm.listing import list_backends, list_sources, list_wrappers
from torchwm.spec import VecSpec, WrapperSpec
from torchwm.vector.base import VectorEnv

__all__ = [
    "ClosedEnvironmentError",
    "ConfigError",
    "EnvTimeoutError",
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
    "make_env",
    "make_vec",
    "make_vec_from_spec",
]
