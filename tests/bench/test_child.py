"""`torchwm.bench.child`: one measurement in a child process: killed at its deadline, started with the
parent's ``-P``, and out of memory while building told as bad input.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import torchwm
from torchwm.envs import SYNTHETIC_ID


def test_a_measuring_child_that_stops_answering_is_killed_at_its_deadline():
    from torchwm.bench.child import BenchChildError, Child

    job = {"env_id": SYNTHETIC_ID, "backend": "sync", "num_envs": 1, "kwargs": {}, "spec": None}
    child = Child(job)
    try:
        child.wait_ready()
        child.answer_seconds = 2
        # 200000 steps of 400 us of CPU: minutes, far beyond the 2 s the child has to answer.
        with pytest.raises(BenchChildError, match="said nothing for 2 s and was killed"):
            child.ask("run 200000")
        assert child.process.poll() is not None  # killed, not left running
    finally:
        child.close()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is new in Python 3.11")
def test_a_bench_started_with_minus_p_measures_its_own_torchwm_in_the_children(tmp_path):
    """``PYTHONPATH=tree python -P -m torchwm.bench`` from another checkout measures the tree's torchwm: the
    children are started with -P too, so the folder they start in does not come first on their path."""
    decoy = tmp_path / "torchwm"
    decoy.mkdir()
    (decoy / "__init__.py").write_text(
        "raise ImportError('the torchwm of the current folder was imported')\n"
    )
    tree = pathlib.Path(torchwm.__file__).parent.parent
    command = [sys.executable, "-P", "-m", "torchwm.bench", "--env", "CartPole-v1", "--num-envs", "2"]
    done = subprocess.run(
        [*command, "--steps", "20", "--repeats", "1", "--backends", "sync"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "current folder" not in done.stderr and "CartPole-v1" in done.stdout


def test_a_child_out_of_memory_while_building_is_bad_input_not_a_failure():
    from torchwm.bench.child import BenchChildError

    job = {"env_id": "CartPole-v1", "backend": "sync", "num_envs": 4096, "kwargs": {}, "spec": None}
    stderr = (
        "Traceback (most recent call last):\n  ...\nMemoryError: Unable to allocate 14.9 GiB for an array"
    )
    # torchwm bench exits 2 with the child's one line for it (status_of), as torchwm run does.
    assert BenchChildError(job, stderr, building=True).input_error
    assert not BenchChildError(job, stderr, building=False).input_error  # while measuring: a failure
