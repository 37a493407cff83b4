"""Fixtures of the ported Gymnasium suite: the backend each test runs on, and the constructors bound to it.

Every test that builds a vector env takes ``backend`` (``sync``, ``subproc``,
``shmem``); a test that applies to some backends only parametrizes ``backend``
itself, which overrides the fixture. ``vectoriser`` and ``make_vec`` stand in
for Gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv`` and ``gymnasium.make_vec``
(see `adapter`). Every vector env a test built is closed after it, pass or fail,
so that no worker process or shared-memory segment outlives its test.
"""

from __future__ import annotations

import functools
import os

import pytest

from gymnasium_suite import adapter

# MuJoCo renders offscreen through EGL here: its default (GLFW) needs a display and aborts the process without
# one.
os.environ.setdefault("MUJOCO_GL", "egl")


@pytest.fixture(params=adapter.BACKENDS)
def backend(request):
    """The torchwm backend the test runs on."""
    return request.param


@pytest.fixture
def vectoriser(backend):
    """Gymnasium's ``SyncVectorEnv(env_fns, ...)`` / ``AsyncVectorEnv(env_fns, ...)``, on ``backend``."""
    return functools.partial(adapter.make_vector_env, backend=backend)


@pytest.fixture
def make_vec(backend):
    """``gymnasium.make_vec(id, num_envs, ...)``, on ``backend``."""
    return functools.partial(adapter.make_vec, backend=backend)


@pytest.fixture(autouse=True)
def _close_vector_envs():
    yield
    adapter.close_all()
