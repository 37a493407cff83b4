"""Where one Atari env step's time goes, in one process: the emulator's frames alone, ALE's own C++
vector env with one env on one thread, then the fused env's whole step (frames, screen reads, gray
lookup, max, resize, frame stack, infos) with each C kernel path this CPU has.

The ratio ``emulator / fused`` bounds what any backend that runs the fused env can reach against
``torchwm bench``'s ``ale-emulator`` peer (the cores times the emulator alone): even with free
hand-offs and a parent that costs nothing, each core runs whole steps, not bare frames. Likewise
``ale-direct / fused`` roughly bounds ``shmem`` against ``ale-direct`` when both keep every core busy
(from above: ALE's one-env step includes a hand-off to its thread, which several envs a thread share).

    python benchmarks/atari_split.py --env ALE/Pong-v5 --steps 3000 --repeats 5

Each kernel path runs in a child process (the path is chosen when torchwm's kernel loads, by
``TORCHWM_ATARI_KERNEL``); the emulator and the fused env are timed interleaved, repeat by repeat,
and the medians printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def measure(env_id: str, steps: int, repeats: int) -> dict[str, object]:
    """Medians of µs a step: the emulator's frames alone, ALE's vector env of one env, and the fused
    env's step (this process's kernel path)."""
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    import torchwm
    from torchwm import native
    from torchwm.bench.measure import AleEmulator
    from torchwm.factory import resolve_spec
    from torchwm.vector.ale_native import ale_vector_kwargs

    emulator = AleEmulator(env_id)
    env = torchwm.make_env(env_id)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=steps).tolist()
    # ALE's C++ vector env, one env on one thread, with the arguments torchwm bench's ale-direct passes.
    spec = resolve_spec(env_id, 1, backend="ale-native")
    ale_direct = AtariVectorEnv(**{**ale_vector_kwargs(spec), "num_threads": 1})
    ale_direct.reset(seed=0)

    def step_fused(action: int) -> None:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()

    # The same actions for each (ALE's vector env takes them as arrays, made here, not in the timed loop;
    # it resets ended episodes itself).
    steppers: dict[str, tuple[Callable[[Any], object], list]] = {
        "emulator_us": (emulator.step, actions),
        "ale_direct_us": (ale_direct.step, [np.array([action]) for action in actions]),
        "fused_us": (step_fused, actions),
    }

    def time_us(step: Callable[[Any], object], step_actions: list) -> float:
        started = time.perf_counter()
        for action in step_actions:
            step(action)
        return (time.perf_counter() - started) / steps * 1e6

    times: dict[str, list[float]] = {name: [] for name in steppers}
    for stepper in steppers.values():
        time_us(*stepper)  # warm-up
    for _ in range(repeats):
        for name, stepper in steppers.items():
            times[name].append(time_us(*stepper))
    emulator.close()
    ale_direct.close()
    env.close()
    return {"path": native.kernel_path(), **{name: statistics.median(t) for name, t in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--paths", default="vbmi,avx2,plain", help="kernel paths to try (missing: left out)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.env, args.steps, args.repeats)))
        return
    from torchwm.bench.machine import describe_cpu, machine_info

    print(describe_cpu(machine_info()))
    print(
        f"{'path':>6} {'emulator us':>12} {'ale-direct us':>14} {'fused us':>10} {'emulator/fused':>15} "
        f"{'ale-direct/fused':>17}"
    )
    for path in args.paths.split(","):
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--env", args.env, "--steps", str(args.steps)]
            + ["--repeats", str(args.repeats)],
            env={**os.environ, "TORCHWM_ATARI_KERNEL": path},
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(f"{path:>6} left out: {done.stderr.strip().splitlines()[-1]}")
            continue
        result = json.loads(done.stdout.splitlines()[-1])
        emulator, ale_direct, fused = result["emulator_us"], result["ale_direct_us"], result["fused_us"]
        print(
            f"{result['path']:>6} {emulator:12.1f} {ale_direct:14.1f} {fused:10.1f} {emulator / fused:15.2f} "
            f"{ale_direct / fused:17.2f}"
        )


if __name__ == "__main__":
    main()
