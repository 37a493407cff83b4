"""The parent's own part of a Pong 8 shmem step: the step's wall time less the time in the pool's wait for
its workers (the same definition as `torchwm bench`'s note). Works on trees with the stepper, with the
group (the backend contract in two parts) and before it, where the wait was a classmethod of the shmem
transport (`SharedMemoryWorker.wait`).

    PYTHONPATH=/path/to/tree python -P benchmarks/parent_part.py
"""

import json
import statistics
import time

import torchwm

waited = [0.0]


def timed(wait):
    def wrapper(*args):
        began = time.perf_counter()
        try:
            return wait(*args)
        finally:
            waited[0] += time.perf_counter() - began

    return wrapper


env = torchwm.make_vec("ALE/Pong-v5", 8, backend="shmem", seed=0)
if hasattr(env, "_stepper"):
    env._stepper.group.wait = timed(env._stepper.group.wait)
elif hasattr(env, "_group") and hasattr(env._group, "wait"):
    env._group.wait = timed(env._group.wait)
else:
    from torchwm.vector.transports.shared_memory import SharedMemoryWorker

    SharedMemoryWorker.wait = classmethod(timed(SharedMemoryWorker.wait.__func__))
env.reset(seed=0)
env.action_space.seed(0)
actions = [env.action_space.sample() for _ in range(64)]
for t in range(200):
    env.step(actions[t % 64])
parents, steps = [], []
for _ in range(5):
    waited[0] = 0.0
    began = time.perf_counter()
    for t in range(400):
        env.step(actions[t % 64])
    elapsed = time.perf_counter() - began
    parents.append((elapsed - waited[0]) / 400 * 1e6)
    steps.append(elapsed / 400 * 1e6)
env.close()
print(
    json.dumps(
        {
            "tree": torchwm.__file__,
            "parent_us": statistics.median(parents),
            "step_us": statistics.median(steps),
            "parents": [round(p) for p in parents],
        }
    )
)
