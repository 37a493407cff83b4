"""Microseconds a step of ``envs.step`` in a plain loop, for two or more torchwm checkouts, each measured in
fresh processes that alternate between the trees, so that the machine's drift weighs on all of them.

Each process builds the vector env, steps it, and prints the best of BLOCKS blocks of ``--steps`` steps;
each tree gets ``--processes`` such processes. Paired by round, the figures say which tree is faster
where `torchwm bench`'s ratios against a peer spread more than the trees differ.

    python benchmarks/step_loop.py --trees /path/to/before /path/to/after --backend sync
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

BLOCKS = 7

SCRIPT = r"""
import sys, time
import numpy as np
import torchwm

env_id, num_envs, backend, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
options = {} if backend == "sync" else {"num_workers": 2}
envs = torchwm.make_vec(env_id, num_envs, backend=backend, backend_kwargs=options)
envs.reset(seed=0)
actions = np.zeros(num_envs, dtype=np.int64)
best = float("inf")
for _ in range(BLOCKS):
    start = time.perf_counter()
    for _ in range(steps):
        envs.step(actions)
    best = min(best, (time.perf_counter() - start) / steps)
envs.close()
print(best * 1e6)
""".replace("BLOCKS", str(BLOCKS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", required=True, help="torchwm checkouts to compare")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=32)
    parser.add_argument("--backend", default="sync")
    parser.add_argument("--steps", type=int, default=1000, help="steps a block")
    parser.add_argument("--processes", type=int, default=6, help="processes a tree")
    args = parser.parse_args()
    figures: dict[str, list[float]] = {tree: [] for tree in args.trees}
    for _ in range(args.processes):
        for tree in args.trees:
            # -P and the tree's folder: the checkout measured is the tree's, whatever folder this runs in.
            done = subprocess.run(
                [
                    sys.executable,
                    "-P",
                    "-c",
                    SCRIPT,
                    args.env,
                    str(args.num_envs),
                    args.backend,
                    str(args.steps),
                ],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": tree, "TORCHWM_CACHE_DIR": ""},
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            figures[tree].append(float(done.stdout.split()[-1]))
    for tree, values in figures.items():
        listed = ", ".join(f"{value:.1f}" for value in values)
        print(f"{args.backend} {args.env} x {args.num_envs}: {listed} µs a step "
              f"(median {statistics.median(values):.1f}) ({tree})")  # fmt: skip


if __name__ == "__main__":
    main()
