"""The main thread's own CPU time per step of Pong 8 between ALE's ``recv`` returning and the next
``send``: ``ale-native`` (torchwm's contract over ALE's C++ vector env) against ``ale-direct`` (ALE's own
Python `AtariVectorEnv`), each in a fresh process, interleaved. ALE's two C++ threads poll for work on
every core while the main thread runs, so this part of the step is what the wrapper costs.

    PYTHONPATH=/path/to/tree python -P benchmarks/ale_native_part.py [--runs 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

MEASURE = r"""
import time
import numpy as np
import torchwm
from ale_py.vector_env import AtariVectorEnv
from torchwm.factory import resolve_spec
from torchwm.vector.ale_native_spec import ale_vector_kwargs

class Timed:
    '''ALE's C++ env, timing the main thread's CPU from each recv's return to the next send.'''
    def __init__(self, ale):
        self.ale, self.returned, self.between, self.steps = ale, None, 0, 0
    def send(self, *args):
        if self.returned is not None:
            self.between += time.thread_time_ns() - self.returned
            self.steps += 1
        return self.ale.send(*args)
    def recv(self, *args):
        result = self.ale.recv(*args)
        self.returned = time.thread_time_ns()
        return result
    def __getattr__(self, name):
        return getattr(self.ale, name)

if BACKEND == "ale-native":
    envs = torchwm.make_vec("ALE/Pong-v5", 8, backend="ale-native", seed=0)
    owner = envs._stepper
else:
    envs = AtariVectorEnv(**ale_vector_kwargs(resolve_spec("ALE/Pong-v5", 8, backend="ale-native", seed=0)))
    owner = envs
envs.reset(seed=0)
actions = np.random.default_rng(0).integers(0, 6, size=(64, 8))
for t in range(300):
    envs.step(actions[t % 64])
owner.ale = timed = Timed(owner.ale)
for t in range(3000):
    envs.step(actions[t % 64])
envs.close()
print(timed.between / timed.steps / 1e3)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(1, args.runs + 1):
        figures = []
        for backend in ("ale-direct", "ale-native"):
            done = subprocess.run(
                [sys.executable, "-c", MEASURE.replace("BACKEND", repr(backend))],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            figures.append(f"{backend} {float(done.stdout.split()[-1]):.1f} µs")
        print(f"run {run}: main thread's CPU from recv to the next send, a step: {', '.join(figures)}")


if __name__ == "__main__":
    main()
