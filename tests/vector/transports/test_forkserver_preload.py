"""How a process backend starts its workers: what the forkserver imports once for all of them
(torchwm/vector/transports/start_methods.py), checked in fresh processes, since the server keeps the
preload of the first vector env that started it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# What each worker imported while it built its envs (`Ready.imported`), under the default forkserver.
WORKER_IMPORTS = r"""
import json, sys
import torchwm
from torchwm.vector.transports import processes

seen = []
note = processes.note_slow_start
def noted(ready, *args, **kwargs):
    seen.append(list(ready.imported))
    return note(ready, *args, **kwargs)
processes.note_slow_start = noted
envs = torchwm.make_vec(sys.argv[1], 2, backend=sys.argv[2], backend_kwargs={"num_workers": 1})
envs.reset(seed=0)
envs.close()
print(json.dumps(seen))
"""


def worker_imports(env_id: str, backend: str) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", WORKER_IMPORTS, env_id, backend],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["shmem", "subproc"])
def test_an_atari_worker_under_forkserver_imports_nothing_the_server_could_have(backend):
    # Before, each worker imported OpenCV and the fused Atari env itself: most of its start, and the
    # slow-start note on the README's `torchwm run pong`.
    assert worker_imports("ALE/Pong-v5", backend) == [[]]


PARENT_IMPORTS = r"""
import sys
import torchwm
from torchwm.vector.transports import worker_count

worker_count.measured_worker_choice = lambda *args, **kwargs: None  # the parent's own start only
envs = torchwm.make_vec("ALE/Pong-v5", 2, backend="shmem")
envs.close()
print(" ".join(sorted(name for name in sys.modules if name.split(".")[0] in ("pydantic", "cv2"))))
"""


def test_making_pong_with_its_default_stack_imports_neither_pydantic_nor_opencv():
    # Its wrapper options are plain ints, bools and literals, checked without pydantic (0.05 s of every
    # start); an option pydantic must check imports it then (tests/test_factory.py, tests/wrappers). OpenCV
    # (0.1-0.15 s) is the workers' (the forkserver imports it for them), not the parent's.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", PARENT_IMPORTS],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
