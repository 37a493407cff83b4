"""The cost of `episode_statistics` on the fused Atari path: one env with it, one without, measured in turns.

    python benchmarks/episode_statistics.py [ENV_ID] [NUM_ENVS] [STEPS] [REPEATS] [BACKEND]

Both vector envs are built first, then their repeats alternate (with, without, with, ...), so that a
change in the machine's load weighs on both alike; the medians and their ratio are printed.
"""

import statistics
import sys
import time

import numpy as np

import torchwm

env_id, num_envs, steps, repeats, backend = (
    sys.argv[1:] + ["ALE/Pong-v5", "8", "400", "5", "shmem"][len(sys.argv) - 1 :]
)[:5]
num_envs, steps, repeats = int(num_envs), int(steps), int(repeats)
STACK = ["atari_preprocessing", "frame_stack"]
envs = {
    "without": torchwm.make_vec(env_id, num_envs, backend=backend, wrappers=STACK),
    "with episode_statistics": torchwm.make_vec(
        env_id, num_envs, backend=backend, wrappers=[*STACK, "episode_statistics"]
    ),
}
assert all(vec.spec.fused for vec in envs.values())
rng = np.random.default_rng(0)
actions = [rng.integers(0, envs["without"].single_action_space.n, size=num_envs) for _ in range(64)]
samples: dict[str, list[float]] = {name: [] for name in envs}
for vec in envs.values():
    vec.reset(seed=0)
    for t in range(50):  # warm-up
        vec.step(actions[t % 64])
for _ in range(repeats):
    for name, vec in envs.items():
        start = time.perf_counter()
        for t in range(steps):
            vec.step(actions[t % 64])
        samples[name].append(steps * num_envs / (time.perf_counter() - start))
for vec in envs.values():
    vec.close()
medians = {name: statistics.median(values) for name, values in samples.items()}
for name, median in medians.items():
    print(f"{env_id} x {num_envs} on {backend}, {name}: {median:,.0f} steps/s")
print(f"ratio with / without: {medians['with episode_statistics'] / medians['without']:.3f}")
