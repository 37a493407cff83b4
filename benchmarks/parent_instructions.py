"""The instructions your process runs for one steady step, counted by Valgrind: a figure the machine's
load does not move, to compare two trees where steps per second spread more than they differ.

Each case runs in a fresh process under ``valgrind --tool=callgrind`` (the workers, started by that
process, run natively) twice, with SHORT and LONG steps; the difference over LONG - SHORT steps is one
step's instructions in this process, without the start. The process backends wait for their workers
before ``recv`` (``send``, a sleep, ``recv``) and sleep at once when they wait (``spin_seconds=0``), so
that the count holds no spinning, which varies with timing: it is your process's part of a step whose
workers are done when ``recv`` looks.

    python benchmarks/parent_instructions.py --trees /path/to/before /path/to/after

Needs ``valgrind`` on PATH; each case takes a minute or two under it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

SHORT, LONG = 100, 300

# One case: (name, env id, number of envs, backend, backend options).
CASES = [
    ("Pong 8 shmem", "ALE/Pong-v5", 8, "shmem", {"num_workers": 2, "spin_seconds": 0.0}),
    ("CartPole 32 shmem", "CartPole-v1", 32, "shmem", {"num_workers": 2, "spin_seconds": 0.0}),
    ("CartPole 32 sync", "CartPole-v1", 32, "sync", {}),
]

SCRIPT = r"""
import sys, time
import numpy as np
import torchwm

env_id, backend, options = sys.argv[1], sys.argv[3], eval(sys.argv[4])
num_envs, steps = int(sys.argv[2]), int(sys.argv[5])
envs = torchwm.make_vec(env_id, num_envs, backend=backend, backend_kwargs=options)
envs.reset(seed=0)
actions = np.zeros(num_envs, dtype=np.int64)
for _ in range(steps):
    if backend == "sync":
        envs.step(actions)
    else:
        envs.send(actions)
        time.sleep(0.03)  # the workers are done when recv looks
        envs.recv()
envs.close()
"""


def count(tree: str, case: tuple, steps: int) -> int:
    """The instructions of one process running ``steps`` steps of ``case`` with ``tree``'s torchwm."""
    _, env_id, num_envs, backend, options = case
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out")
        done = subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                sys.executable, "-P", "-c", SCRIPT, env_id, str(num_envs), backend, repr(options), str(steps),
            ],
            capture_output=True, text=True, check=False, timeout=1800,
            # One OpenBLAS thread: Valgrind counts every thread of the process, and NumPy's idle BLAS threads
            # poll a varying number of times.
            env={**os.environ, "PYTHONPATH": tree, "TORCHWM_CACHE_DIR": folder, "OPENBLAS_NUM_THREADS": "1"},
        )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{case[0]} with {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=[os.getcwd()], help="torchwm checkouts to compare")
    parser.add_argument("--cases", nargs="*", help="names of CASES to run (default: all)")
    args = parser.parse_args()
    for case in CASES:
        if args.cases and case[0] not in args.cases:
            continue
        for tree in args.trees:
            per_step = (count(tree, case, LONG) - count(tree, case, SHORT)) / (LONG - SHORT)
            print(f"{case[0]}: {per_step:,.0f} instructions a step in your process ({tree})", flush=True)


if __name__ == "__main__":
    main()
