"""Copies of a vector env: a forked copy (a data loader's worker) never touches the owner's workers, and
``copy.copy``/``copy.deepcopy`` of a pool are refused, leaving the original working."""

from __future__ import annotations

import gc
import json

import pytest
from fault_envs import PROCESS_BACKENDS, assert_same_as_sync, run_script

import torchwm

FORK_SCRIPT = r"""
import gc, json, os, sys
import numpy as np, torchwm
from support.processes import process_running

backend, what = sys.argv[1], sys.argv[2]
envs = torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs={"num_workers": 2, "timeout": 60})
envs.reset(seed=0)
envs.step(np.ones(4, dtype=np.int64))
pids = envs.worker_pids
child = os.fork()
if child == 0:  # a data loader's worker, an evaluator: it exits normally (atexit, finalizers, GC)
    outcome = "exited"
    if what == "close":
        envs.close()
    elif what == "drop":
        del envs
        gc.collect()
    elif what == "step":
        try:
            envs.step(np.ones(4, dtype=np.int64))
            outcome = "stepped"
        except Exception as error:
            outcome = f"{type(error).__name__}: {error}"
        envs.close()
    with open(sys.argv[3], "w") as f:
        f.write(outcome)
    sys.exit(0)
_, status = os.waitpid(child, 0)
report = {"child_status": status, "child": open(sys.argv[3]).read()}
report["alive"] = [os.path.exists(f"/proc/{pid}") for pid in pids]
obs, rewards, *_ = envs.step(np.ones(4, dtype=np.int64))
with torchwm.make_vec("CartPole-v1", 4, backend="sync") as reference:
    reference.reset(seed=0)
    reference.step(np.ones(4, dtype=np.int64))
    expected = reference.step(np.ones(4, dtype=np.int64))[0]
report["same_as_sync"] = bool((obs == expected).all())
envs.close()
report["left"] = [pid for pid in pids if process_running(pid)]
print(json.dumps(report))
"""


@pytest.mark.parametrize("backend", PROCESS_BACKENDS)
@pytest.mark.parametrize("what", ["exit", "close", "drop", "step"])
def test_a_forked_copy_never_touches_the_parents_workers(backend, what, tmp_path):
    done = run_script(tmp_path, FORK_SCRIPT, backend, what, tmp_path / "child")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "can only join" not in done.stderr, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["child_status"] == 0 and report["alive"] == [True, True], report
    if what == "step":  # the copy refuses to step the parent's workers, and says why
        assert report["child"].startswith("ClosedEnvironmentError") and "forked copy" in report["child"], (
            report
        )
    else:
        assert report["child"] == "exited", report
    assert report["same_as_sync"] and report["left"] == [], report


@pytest.mark.parametrize("backend", ["sync", *PROCESS_BACKENDS])
def test_copy_copy_is_refused_and_the_original_keeps_working(backend):
    import copy

    options = {} if backend == "sync" else {"num_workers": 2, "timeout": 60}
    with torchwm.make_vec("CartPole-v1", 4, backend=backend, backend_kwargs=options) as vec:
        pids = getattr(vec, "worker_pids", [])
        with pytest.raises(TypeError, match="cannot be copied.*share"):
            copy.copy(vec)
        if backend != "sync":
            with pytest.raises(TypeError, match="cannot be deep-copied"):
                copy.deepcopy(vec)
        gc.collect()
        assert_same_as_sync(vec)
        assert getattr(vec, "worker_pids", []) == pids


def test_a_deep_copy_of_a_sync_env_has_envs_of_its_own():
    import copy

    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as vec:
        vec.reset(seed=0)
        twin = copy.deepcopy(vec)
        assert twin.envs[0] is not vec.envs[0]
        twin.close()
        assert_same_as_sync(vec)
