"""From the start of a script to the first step of Pong 16: torchwm's ``shmem`` against Gymnasium's
``AsyncVectorEnv`` (fork context) over the same stack (AtariPreprocessing with frame_skip=4 on a
frameskip=1 env, then FrameStackObservation(4)), each measurement in a fresh Python process, so that
imports count, and the two interleaved, so that the machine's load weighs on both.

For torchwm it also says where the start went: ``import torchwm``; resolving the spec and checking the
options; the worker-count measurement (`torchwm.vector.transports.worker_count.measure`); starting
the workers until every one has built its envs (``build`` is the slowest worker's own time, imports
included, and what it imported); the shared block and its attach; the reset; the step.

    PYTHONPATH=/path/to/tree python benchmarks/start_time.py --runs 3 [--json FILE]

``--fresh-cache`` gives each torchwm run an empty measurement cache (``TORCHWM_CACHE_DIR``), as on a
machine torchwm never ran on: it then measures its worker count before the workers start.
``--context fork`` starts torchwm's workers with that start method (default: shmem's own, forkserver).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

NUM_ENVS = 16

# Each script prints one JSON line: seconds since its first line, per phase.
TORCHWM = r"""
import time
began = time.perf_counter()
import json
import torchwm
imported = time.perf_counter()
import numpy as np
from torchwm.vector.transports import processes, shared_memory, worker_count

phases = {"measure": 0.0, "start workers": 0.0, "block": 0.0}
builds = []

def timed(owner, name, phase):
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            phases[phase] += time.perf_counter() - start
    setattr(owner, name, wrapper)

timed(worker_count, "measure", "measure")
timed(processes.ProcessHandle, "start", "start workers")
timed(processes.ProcessHandle, "started", "start workers")
timed(shared_memory.SharedMemoryGroup, "create_batch", "block")
note = processes.note_slow_start
def noted(ready, *args, **kwargs):
    builds.append((ready.build_seconds, ready.imported))
    return note(ready, *args, **kwargs)
processes.note_slow_start = noted

envs = torchwm.make_vec("ALE/Pong-v5", NUM_ENVS, backend="shmem", backend_kwargs=BACKEND_KWARGS)
made = time.perf_counter()
envs.reset(seed=0)
reset = time.perf_counter()
envs.step(np.zeros(NUM_ENVS, dtype=np.int64))
stepped = time.perf_counter()
choice = envs.worker_choice
envs.close()
rest = made - imported - sum(phases.values())
slowest = max(builds, default=(0.0, ()))
print(json.dumps({
    "first step": stepped - began,
    "import torchwm": imported - began,
    "spec and options": rest,
    **phases,
    "reset": reset - made,
    "step": stepped - reset,
    "build": slowest[0],
    "worker imported": list(slowest[1]),
    "workers": envs.num_workers,
    "choice": None if choice is None else str(choice),
}))
""".replace("NUM_ENVS", str(NUM_ENVS))

GYMNASIUM = r"""
import time
began = time.perf_counter()
import json
import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

gym.register_envs(ale_py)
imported = time.perf_counter()

def make():
    env = gym.make("ALE/Pong-v5", frameskip=1)
    return FrameStackObservation(AtariPreprocessing(env, frame_skip=4), 4, padding_type="zero")

envs = gym.vector.AsyncVectorEnv([make] * NUM_ENVS, context="fork")
made = time.perf_counter()
envs.reset(seed=0)
reset = time.perf_counter()
envs.step(np.zeros(NUM_ENVS, dtype=np.int64))
stepped = time.perf_counter()
envs.close()
print(json.dumps({
    "first step": stepped - began,
    "import": imported - began,
    "start workers": made - imported,
    "reset": reset - made,
    "step": stepped - reset,
}))
""".replace("NUM_ENVS", str(NUM_ENVS))


def run(script: str, env: dict[str, str] | None = None) -> dict:
    """One fresh process running ``script``; its JSON line."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the script failed (exit {done.returncode}):\n{done.stderr}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    notes = [line for line in done.stderr.splitlines() if "Warning" in line]
    figures["warnings"] = notes
    return figures


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write every run's figures to this file")
    parser.add_argument("--fresh-cache", action="store_true", help="an empty measurement cache per run")
    parser.add_argument("--context", help="torchwm's start method (backend_kwargs context=)")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; Pong {NUM_ENVS} envs")
    backend_kwargs = {} if args.context is None else {"context": args.context}
    results: dict[str, list[dict]] = {"torchwm shmem": [], "Gymnasium AsyncVectorEnv (fork)": []}
    for i in range(args.runs):
        for name, script in zip(results, (TORCHWM, GYMNASIUM), strict=True):
            load = os.getloadavg()[0]
            env = None
            if script is TORCHWM:
                if args.fresh_cache:
                    env = {**os.environ, "TORCHWM_CACHE_DIR": tempfile.mkdtemp(prefix="torchwm-start-")}
                script = script.replace("BACKEND_KWARGS", repr(backend_kwargs))
            figures = run(script, env)
            figures["load"] = load
            results[name].append(figures)
            parts = ", ".join(
                f"{key} {value:.2f}"
                for key, value in figures.items()
                if isinstance(value, float) and key not in ("first step", "load")
            )
            print(f"run {i + 1} {name}: first step {figures['first step']:.2f} s (load {load:.1f}; {parts})")
            extra = {k: figures[k] for k in ("workers", "worker imported") if k in figures}
            if figures.get("choice"):
                extra["choice kept from an earlier run"] = "kept from an earlier run" in figures["choice"]
            if extra or figures["warnings"]:
                print(f"    {extra} {figures['warnings']}")
    for name, runs in results.items():
        firsts = [r["first step"] for r in runs]
        print(f"{name}: {', '.join(f'{t:.2f}' for t in firsts)} s (median {statistics.median(firsts):.2f})")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"cpu": cpu_model(), "results": results}, file, indent=1)


if __name__ == "__main__":
    main()
