"""The cost of recording episodes with `VectorDataCollector`: steps per second of a bare vector env and of
the same env through the collector, measured in turns.

    python benchmarks/record_speed.py [ENV_ID] [NUM_ENVS] [STEPS] [REPEATS] [BACKEND]

Defaults: ALE/Pong-v5 (the default Atari stack), 8 envs, shmem, 1000 steps, 5 repeats, with seeded
autoresets on both (the collector records each episode's seed from them). Both vector envs are built
first, then their repeats alternate, so that a change in the machine's load weighs on both alike; the
medians and their ratio are printed (the target is >= 0.8). The recorded episodes are dropped between
repeats (no dataset is written: writing is once per dataset, not per step).
"""

import statistics
import sys
import time

import numpy as np

import torchwm
from torchwm.integrations.minari import VectorDataCollector

env_id, num_envs, steps, repeats, backend = (
    sys.argv[1:] + ["ALE/Pong-v5", "8", "1000", "5", "shmem"][len(sys.argv) - 1 :]
)[:5]
num_envs, steps, repeats = int(num_envs), int(steps), int(repeats)


def make():
    return torchwm.make_vec(env_id, num_envs, backend=backend, seed=0, autoreset_seeds=True)


envs = {"bare": make(), "VectorDataCollector": VectorDataCollector(make())}
rng = np.random.default_rng(0)
actions = [np.array([envs["bare"].single_action_space.sample() for _ in range(num_envs)]) for _ in range(64)]
samples: dict[str, list[float]] = {name: [] for name in envs}
for vec in envs.values():
    vec.reset()
    for t in range(50):  # warm-up
        vec.step(actions[t % 64])
for _ in range(repeats):
    for name, vec in envs.items():
        start = time.perf_counter()
        for t in range(steps):
            vec.step(actions[t % 64])
        samples[name].append(steps * num_envs / (time.perf_counter() - start))
        if isinstance(vec, VectorDataCollector):
            vec._finished.clear()
for vec in envs.values():
    vec.close()
medians = {name: statistics.median(values) for name, values in samples.items()}
for name, value in medians.items():
    print(
        f"{name:>20}: {value:10.0f} steps/s (median of {repeats}: "
        + ", ".join(f"{v:.0f}" for v in samples[name])
        + ")"
    )
print(f"ratio VectorDataCollector / bare: {medians['VectorDataCollector'] / medians['bare']:.3f}")
