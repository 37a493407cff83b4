"""What a step of 8 Pong envs on 2 Ray actors costs at best on this machine, against shmem.

Three figures, each the median of REPEATS runs of STEPS steps:
- compute: 4 fused Pong envs stepped in one process (what each actor must do per step);
- graph round trip: a compiled graph of 2 actors whose method returns what an actor returns for 4
  Pong envs (4x4x84x84 uint8 pickled, plus rewards/flags/infos), with no env step at all;
- shmem: torchwm's shmem backend on Pong 8 (steps/s).
Ray's best possible throughput is 8 / (compute + round trip); its ratio to shmem bounds what the ray
backend can reach with a compiled graph here."""

import os
import pickle
import statistics
import time

import numpy as np
import ray
from ray.dag import InputNode, MultiOutputNode

import torchwm

STEPS, REPEATS = int(os.environ.get("STEPS", 2000)), int(os.environ.get("REPEATS", 3))


def compute_per_step():
    envs = [torchwm.make_env("ALE/Pong-v5") for _ in range(4)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for s in range(STEPS // 4):
            for e in envs:
                _, _, te, tr, _ = e.step(s % 6)
                if te or tr:
                    e.reset()
        times.append((time.perf_counter() - t) / (STEPS // 4))
    return statistics.median(times)


@ray.remote(num_cpus=0)
class Echo:
    def __init__(self):
        self.obs = np.zeros((4, 4, 84, 84), np.uint8)
        self.rest = (np.zeros(4), np.zeros(4, bool), np.zeros(4, bool), [{"lives": 0, "frame_number": 1}] * 4)

    def step_all(self, actions):
        return pickle.dumps((self.obs, *self.rest), protocol=5)


def graph_round_trip():
    actors = [Echo.remote() for _ in range(2)]
    with InputNode() as inp:
        dag = MultiOutputNode([a.step_all.bind(inp[k]) for k, a in enumerate(actors)])
    graph = dag.experimental_compile()
    actions = np.zeros(4, np.int64)
    for _ in range(200):
        [pickle.loads(ray.get(r)) for r in graph.execute(actions, actions)]
    times = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(STEPS):
            [pickle.loads(ray.get(r)) for r in graph.execute(actions, actions)]
        times.append((time.perf_counter() - t) / STEPS)
    graph.teardown()
    return statistics.median(times)


def shmem_steps_per_second():
    envs = torchwm.make_vec("ALE/Pong-v5", num_envs=8, backend="shmem")
    envs.reset(seed=0)
    actions = np.zeros(8, np.int64)
    for _ in range(200):
        envs.step(actions)
    rates = []
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(STEPS):
            envs.step(actions)
        rates.append(8 * STEPS / (time.perf_counter() - t))
    envs.close()
    return statistics.median(rates)


if __name__ == "__main__":
    compute = compute_per_step()
    shmem = shmem_steps_per_second()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    trip = graph_round_trip()
    ray.shutdown()
    best = 8 / (compute + trip)
    print(
        f"compute of 4 envs {compute * 1e6:.0f} us, graph round trip {trip * 1e6:.0f} us, "
        f"ray at best {best:.0f} steps/s, shmem {shmem:.0f} steps/s: ceiling {best / shmem:.2f}x shmem"
    )
