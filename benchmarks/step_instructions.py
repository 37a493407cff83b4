"""The instructions one steady step runs in your process (and, with ``--workers``, in the workers), counted
by Valgrind: a figure the machine's load does not move, to compare two trees where steps per second
spread more than they differ.

Each case runs in a fresh process under ``valgrind --tool=callgrind`` (the workers natively, or with
``--workers`` under Valgrind too) twice, with SHORT and LONG steps; the difference over LONG - SHORT
steps is one step's instructions, without the start. The process backends wait for their workers
before ``recv`` (``send``, a sleep, ``recv``) and sleep at once when they wait (``spin_seconds=0``), so
that the count holds no spinning, which varies with timing: it is your process's part of a step whose
workers are done when ``recv`` looks. With ``--workers`` there is no sleep (your process then waits in
``recv``; take its count from a run without ``--workers``), so that the workers idle only while your
process does its part.

    python benchmarks/step_instructions.py --trees /path/to/before /path/to/after [--workers]

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
num_envs, steps, pause = int(sys.argv[2]), int(sys.argv[5]), float(sys.argv[6])
envs = torchwm.make_vec(env_id, num_envs, backend=backend, backend_kwargs=options)
envs.reset(seed=0)
actions = np.zeros(num_envs, dtype=np.int64)
for _ in range(steps):
    if backend == "sync":
        envs.step(actions)
    else:
        envs.send(actions)
        time.sleep(pause)  # the workers are done when recv looks
        envs.recv()
envs.close()
"""


def count(tree: str, case: tuple, steps: int, workers: bool = False) -> tuple[int, int]:
    """The instructions of your process, and of the processes it started (0 without ``workers``), running
    ``steps`` steps of ``case`` with ``tree``'s torchwm."""
    _, env_id, num_envs, backend, options = case
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "callgrind.out.%p")
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            f"--trace-children={'yes' if workers else 'no'}",
            sys.executable, "-P", "-c", SCRIPT, env_id, str(num_envs), backend, repr(options), str(steps),
            # No pause under Valgrind: your process waits for the workers, which wait for it only as long as
            # its own part (an idle worker looks up every 5 ms).
            "0" if workers else "0.03",
        ]  # fmt: skip
        # One OpenBLAS thread: Valgrind counts every thread of a process, and NumPy's idle BLAS threads poll
        # a varying number of times.
        env = {**os.environ, "PYTHONPATH": tree, "TORCHWM_CACHE_DIR": folder, "OPENBLAS_NUM_THREADS": "1"}
        with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env) as process:
            _, stderr = process.communicate(timeout=1800)
        if process.returncode != 0:
            raise RuntimeError(f"{case[0]} with {tree} failed (exit {process.returncode}):\n{stderr[-3000:]}")
        mine = others = 0
        for name in os.listdir(folder):
            if name.startswith("callgrind.out."):
                with open(os.path.join(folder, name)) as file:
                    total = int(re.search(r"^(?:summary|totals): (\d+)", file.read(), re.M).group(1))  # type: ignore[union-attr]
                # Valgrind runs your process under its own pid; the others are the forkserver, the workers
                # and multiprocessing's resource tracker.
                if name == f"callgrind.out.{process.pid}":
                    mine += total
                else:
                    others += total
    return mine, others


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=[os.getcwd()], help="torchwm checkouts to compare")
    parser.add_argument("--cases", nargs="*", help="names of CASES to run (default: all)")
    parser.add_argument("--workers", action="store_true", help="count the workers' instructions too")
    args = parser.parse_args()
    for case in CASES:
        if args.cases and case[0] not in args.cases:
            continue
        for tree in args.trees:
            (mine, others), (mine_short, others_short) = (
                count(tree, case, LONG, args.workers),
                count(tree, case, SHORT, args.workers),
            )
            line = (
                f"{case[0]}: {(mine - mine_short) / (LONG - SHORT):,.0f} instructions a step in your process"
            )
            if args.workers and case[3] != "sync":
                line += f", {(others - others_short) / (LONG - SHORT):,.0f} in the workers"
            print(f"{line} ({tree})", flush=True)


if __name__ == "__main__":
    main()
