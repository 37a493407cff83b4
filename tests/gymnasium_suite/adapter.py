"""Gymnasium's vector-env constructors, mapped onto torchwm's backends: the only adapted part of the suite.

The ported tests build their vector envs through `make_vector_env` (for
Gymnasium's ``SyncVectorEnv(env_fns, ...)`` and ``AsyncVectorEnv(env_fns, ...)``)
and `make_vec` (for ``gymnasium.make_vec(id, ...)`` where a test only needs a
vector env to wrap). The backend comes from the test's ``backend`` parameter;
every other argument is translated here, once, so that a difference between
torchwm and Gymnasium shows up as a failing test and never as a quiet change
in a test. An argument torchwm has no equivalent for is passed on to torchwm
unchanged (torchwm then refuses it, visibly), not dropped. Every env built here
is remembered so that the suite's conftest can close it after the test, even
when the test fails half-way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gymnasium as gym
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

import torchwm
import torchwm.errors

BACKENDS = ("sync", "subproc", "shmem")
PROCESS_BACKENDS = ("subproc", "shmem")

_built: list[Any] = []  # every vector env built by this module since the last close_all()


# -- deliberate differences: marks ---------------------------------------------------------------
# Each place where torchwm differs from Gymnasium on purpose is marked xfail(strict=True) with the
# exception the test meets, on the backends where it differs only, and listed in docs/from-gymnasium.md
# ("Where torchwm differs from Gymnasium, and why"). A strict xfail that passes fails the run, so a
# difference that goes away must be unmarked, and one that changes its exception is seen.


def deliberate(raises: type[BaseException], reason: str) -> pytest.MarkDecorator:
    """The mark of a deliberate difference: the test must fail, with ``raises``."""
    return pytest.mark.xfail(strict=True, raises=raises,
                             reason=f"deliberate (docs/from-gymnasium.md): {reason}")


def backends(differs_on: Sequence[str] = (), mark: pytest.MarkDecorator | None = None,
             among: Sequence[str] = BACKENDS) -> list[Any]:
    """``backend`` parameters for a test that differs on ``differs_on`` (marked with ``mark``) only."""
    return [pytest.param(backend, marks=mark) if backend in differs_on else backend for backend in among]


def backends_and_values(values: Sequence[Any], ids: Sequence[str],
                        mark_for: Callable[[str, Any], pytest.MarkDecorator | None]) -> list[Any]:
    """``(backend, value)`` parameters, ids ``backend-value`` as the fixture's would be, and the mark
    ``mark_for(backend, value)`` gives (None: none)."""
    params = []
    for backend in BACKENDS:
        for value, value_id in zip(values, ids, strict=True):
            mark = mark_for(backend, value)
            marks = () if mark is None else mark
            params.append(pytest.param(backend, value, id=f"{backend}-{value_id}", marks=marks))
    return params


_FIXED_SHAPE = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def _leaf_spaces(space: gym.Space) -> list[gym.Space]:
    if isinstance(space, spaces.Dict):
        return [leaf for sub in space.spaces.values() for leaf in _leaf_spaces(sub)]
    if isinstance(space, spaces.Tuple):
        return [leaf for sub in space.spaces for leaf in _leaf_spaces(sub)]
    return [space]


def dynamic_shape(space: gym.Space) -> bool:
    """Whether ``space`` holds a Graph or Sequence: Gymnasium's shared memory refuses it (a TypeError)."""
    return any(isinstance(leaf, (spaces.Graph, spaces.Sequence)) for leaf in _leaf_spaces(space))


def fixed_shape(space: gym.Space) -> bool:
    """Whether ``space`` is made of Box, Discrete, MultiDiscrete and MultiBinary only (in Dict and Tuple):
    what torchwm's ``shmem`` holds. Gymnasium's shared memory also holds Text and OneOf."""
    return all(isinstance(leaf, _FIXED_SHAPE) for leaf in _leaf_spaces(space))


SHMEM_NO_TEXT_ONEOF = deliberate(
    torchwm.errors.UnsupportedStackError,
    "shmem holds fixed-shape arrays only and refuses Text and OneOf (UnsupportedStackError, naming subproc), "
    "which Gymnasium's shared memory encodes; subproc batches them as Gymnasium does",
)
SHMEM_NO_NON_ARRAY_SPACE = deliberate(
    torchwm.errors.UnsupportedStackError,
    "a test Gymnasium runs on SyncVectorEnv only, here on shmem too: shared memory cannot hold Graph, "
    "Sequence or custom spaces (Gymnasium's AsyncVectorEnv(shared_memory=True) refuses them too), so shmem "
    "refuses them when built",
)


def shmem_difference(space: gym.Space) -> pytest.MarkDecorator | None:
    """The mark of a test that builds ``shmem`` over ``space``: None where shmem holds it, the Text/OneOf
    difference where only Gymnasium's shared memory holds it, else the refusal both make."""
    if fixed_shape(space):
        return None
    gymnasium_holds = (*_FIXED_SHAPE, spaces.Text, spaces.OneOf)
    if all(isinstance(leaf, gymnasium_holds) for leaf in _leaf_spaces(space)):
        return SHMEM_NO_TEXT_ONEOF
    return SHMEM_NO_NON_ARRAY_SPACE


def _backend_kwargs(
    backend: str,
    *,
    shared_memory: bool | None = None,
    copy: bool = True,
    context: str | None = None,
    daemon: bool = True,
    worker: Callable | None = None,
    observation_mode: Any = None,
    **others: Any,
) -> dict[str, Any]:
    """torchwm's ``backend_kwargs`` for the keyword arguments of Gymnasium's vector-env constructors.

    Args:
        backend: the torchwm backend the test runs on.
        shared_memory: AsyncVectorEnv's choice between shared memory and pipes; on torchwm the backend is
            that choice (``shmem`` / ``subproc``), so a value that contradicts the backend is a bug in
            the port.
        copy: the same option on every torchwm backend.
        context: the multiprocessing start method; ``None`` keeps torchwm's default.
        daemon: torchwm's workers are always daemonic (Gymnasium's default); ``False`` is passed on.
        worker: a custom worker function (Gymnasium only); passed on when given.
        observation_mode: the same option on every torchwm backend; passed on when given.
        **others: passed on unchanged.
    """
    if shared_memory is not None and backend in PROCESS_BACKENDS and shared_memory != (backend == "shmem"):
        raise ValueError(f"port bug: shared_memory={shared_memory} asked of torchwm's {backend!r} backend")
    kwargs: dict[str, Any] = {"copy": copy, **others}
    if context is not None:
        kwargs["context"] = context
    if daemon is not True:
        kwargs["daemon"] = daemon
    if worker is not None:
        kwargs["worker"] = worker
    if observation_mode is not None:
        kwargs["observation_mode"] = observation_mode
    return kwargs


def make_vector_env(
    env_fns: Iterable[Callable[[], gym.Env]],
    *,
    backend: str,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    **gymnasium_kwargs: Any,
) -> Any:
    """``SyncVectorEnv(env_fns, ...)`` / ``AsyncVectorEnv(env_fns, ...)`` as a torchwm vector env on
    ``backend``.

    Args:
        env_fns: one callable per env, each returning a ``gymnasium.Env``.
        backend: ``sync``, ``subproc`` or ``shmem``.
        autoreset_mode: Gymnasium's autoreset mode (enum or its value).
        **gymnasium_kwargs: the other keyword arguments of Gymnasium's constructors (see `_backend_kwargs`).
    """
    envs = torchwm.make_vec_from_fns(
        list(env_fns), backend=backend, autoreset_mode=autoreset_mode,
        backend_kwargs=_backend_kwargs(backend, **gymnasium_kwargs),
    )
    _built.append(envs)
    return envs


def make_vec(
    id: str,
    num_envs: int = 1,
    vectorization_mode: Any = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    *,
    backend: str,
    **env_kwargs: Any,
) -> Any:
    """``gymnasium.make_vec(id, num_envs, ...)`` as ``torchwm.make_vec(id, num_envs, backend=backend, ...)``.

    Used where a Gymnasium test calls ``gymnasium.make_vec`` only to get a vector env to test something
    else with. ``vectorization_mode`` is replaced by the test's backend; ``vector_kwargs`` are the
    constructor's keyword arguments (mapped as in `make_vector_env`); ``wrappers`` wrap each env, and
    ``None`` means none, as in Gymnasium (torchwm's ``None`` would mean the family's default stack).
    """
    del vectorization_mode  # the test's backend parameter takes its place
    vector_kwargs = dict(vector_kwargs or {})
    autoreset_mode = vector_kwargs.pop("autoreset_mode", AutoresetMode.NEXT_STEP)
    envs = torchwm.make_vec(
        id, num_envs, backend=backend, wrappers=list(wrappers or ()), autoreset_mode=autoreset_mode,
        backend_kwargs=_backend_kwargs(backend, **vector_kwargs), **env_kwargs,
    )
    _built.append(envs)
    return envs


def close_all() -> None:
    """Close every vector env built since the last call; raise the first error a close gave, after closing
    all."""
    errors = []
    while _built:
        envs = _built.pop()
        try:
            envs.close()
        except Exception as error:  # noqa: BLE001 - reported after every env is closed
            errors.append(error)
    if errors:
        raise errors[0]
