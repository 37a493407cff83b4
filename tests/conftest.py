"""Shared fixtures: a clean plugin state around tests that change it; the Ray tests kept together.

tests/conformance also runs installed plugin backends (Ray's among them): the Ray it starts
asks for no auth token and sends no usage stats, as the ray plugin's own tests (which run in
the same pytest process) expect. Set before Ray is imported.

Under pytest-xdist (``-n``), the tests of one module that run on the ``ray`` backend, and each of the
ray plugin's test modules, are one unit of work (``ray:<module>``, `xdist_scope`): one worker runs
them one after another, so that the module's Ray (or 3-node cluster) starts once. Every other test
is a unit of its own. Units run in parallel, each worker with its own Ray.
"""

import os
import re
from pathlib import Path

import pytest

from torchwm import plugins
from torchwm.vector.transports import start_methods

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Every test measures what it measures: nothing is read from or written to the user's cache of shmem's
# measurements (torchwm.vector.transports.worker_count.kept_path); the tests of that file set their own.
os.environ["TORCHWM_CACHE_DIR"] = ""

# The suite's env factories live in test modules, which import pytest: every worker process would
# import it again, most of the process backends' test time. The forkserver, started by the first
# process-backend env of each pytest process, imports it once instead.
start_methods.FORKSERVER_PRELOAD.append("pytest")


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Plugins load again from scratch for this test, and once more after it."""
    plugins.reset()
    yield monkeypatch
    plugins.reset()


@pytest.fixture
def no_ale_start(monkeypatch):
    """Fails the test if a refused spec got as far as building ALE's vector env (the refusals of
    ``make_atari_vector_env`` and of the ``ale-native`` backend)."""
    import ale_py.vector_env

    def boom(*args, **kwargs):
        raise AssertionError("AtariVectorEnv was built for a spec that should have been refused")

    monkeypatch.setattr(ale_py.vector_env.AtariVectorEnv, "__init__", boom)


def xdist_scope(nodeid: str) -> str:
    """The unit of work pytest-xdist gives one worker for the test ``nodeid``."""
    path, _, name = nodeid.partition("::")
    # The test id's parameters name the backend ("[ray]", "[ray:check_...]", "[ray-0-...]").
    if "torchwm-ray/tests/" in path or re.search(r"\bray\b", name.partition("[")[2]):
        return f"ray:{Path(path).stem}"
    return nodeid


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: pytest without it (-p no:xdist) runs too
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``, grouping by `xdist_scope`: pytest-xdist's own grouping (``xdist_group`` marks)
    renames items' node ids, which pytest 9 no longer reads, so that every test ran alone (and each
    Ray-using module started its Ray or cluster again on every worker)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RayModules(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return RayModules(config, log)
