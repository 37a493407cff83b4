"""Where one Atari env step's time goes, in one process: the emulator's frames alone, then the fused
env's whole step (frames, screen reads, gray lookup, max, resize, frame stack, infos) with each C
kernel path this CPU has.

The ratio ``emulator / fused`` bounds what any backend that runs the fused env can reach against
``torchwm bench``'s ``ale-emulator`` peer (the cores times the emulator alone): even with free
hand-offs and a parent that costs nothing, each core runs whole steps, not bare frames.

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


def measure(env_id: str, steps: int, repeats: int) -> dict[str, object]:
    """Medians of µs a step: the emulator's frames alone and the fused env's step (this process's path)."""
    import numpy as np

    import torchwm
    from torchwm import native
    from torchwm.bench.measure import AleEmulator

    emulator = AleEmulator(env_id)
    env = torchwm.make_env(env_id)
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(env.action_space.n, size=steps).tolist()

    def time_emulator() -> float:
        started = time.perf_counter()
        for action in actions:
            emulator.step(action)
        return (time.perf_counter() - started) / steps * 1e6

    def time_fused() -> float:
        started = time.perf_counter()
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        return (time.perf_counter() - started) / steps * 1e6

    time_emulator(), time_fused()  # warm-up
    emulator_us, fused_us = [], []
    for _ in range(repeats):
        emulator_us.append(time_emulator())
        fused_us.append(time_fused())
    emulator.close()
    env.close()
    return {
        "path": native.kernel_path(),
        "emulator_us": statistics.median(emulator_us),
        "fused_us": statistics.median(fused_us),
    }


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
    print(f"{'path':>6} {'emulator us':>12} {'fused us':>10} {'emulator/fused':>15}")
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
        ratio = result["emulator_us"] / result["fused_us"]
        print(f"{result['path']:>6} {result['emulator_us']:12.1f} {result['fused_us']:10.1f} {ratio:15.2f}")


if __name__ == "__main__":
    main()
