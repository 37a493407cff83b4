"""Agent steps per second of PettingZoo envs vectorized by torchwm and by SuperSuit, side by side in one run.

Each case is one PettingZoo parallel env (pistonball, MPE's simple_spread) at ``--num-envs`` envs, agents
as rows (SuperSuit's layout, torchwm's ``layout="agents"``), stepped with random actions drawn before the
timing. Every measurement runs in a fresh process, and the rounds alternate between the vectorizers, so
that the machine's drift weighs on all of them; each prints the best of ``--blocks`` blocks of
``--steps`` steps. The peers: SuperSuit's ``concat_vec_envs_v1`` with ``num_cpus`` 0 (in this process), 1
and 2 (its multiprocessing vector env). PufferLib 3.0 is measured where it imports. ``by-hand`` is the envs
stepped one after another in one process with no vectorizer: that rate times the number of cores is the
most any vectorizer can reach on this machine, so the run says how far above SuperSuit a vectorizer can
be here at all.

    python benchmarks/multiagent_speed.py --rounds 3

The ratios printed: torchwm ``shmem`` against the best SuperSuit of the same round, and that ceiling
against the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

ENVS = {
    "pistonball": "pettingzoo.butterfly.pistonball_v6",
    "simple_spread": "mpe2.simple_spread_v3",
}

SCRIPT = r"""
import importlib, sys, time
import numpy as np

module, kind = sys.argv[1], sys.argv[3]
num_envs, steps, blocks = int(sys.argv[2]), int(sys.argv[4]), int(sys.argv[5])
make = importlib.import_module(module).parallel_env
if kind == "by-hand":
    # The envs alone, stepped one after the other in this process: no vectorizer can beat this rate times
    # the number of cores.
    envs_by_hand = [make() for _ in range(num_envs)]
    for k, env in enumerate(envs_by_hand):
        env.reset(seed=k)
    agents = envs_by_hand[0].possible_agents
    plans = [[{a: env.action_space(a).sample() for a in agents} for env in envs_by_hand] for _ in range(16)]
    best = float("inf")
    for _ in range(blocks):
        start = time.perf_counter()
        for k in range(steps):
            for env, actions in zip(envs_by_hand, plans[k % 16]):
                if not env.agents:
                    env.reset()
                env.step({a: actions[a] for a in env.agents})
        best = min(best, (time.perf_counter() - start) / steps)
    print(num_envs * len(agents) / best)
    raise SystemExit
if kind.startswith("supersuit"):
    import supersuit
    cpus = int(kind.rsplit("-", 1)[1])
    envs = supersuit.concat_vec_envs_v1(
        supersuit.pettingzoo_env_to_vec_env_v1(make()), num_envs, num_cpus=cpus, base_class="gymnasium"
    )
    space = envs.action_space
elif kind == "pufferlib":
    import pufferlib.emulation, pufferlib.vector
    creator = lambda **kw: pufferlib.emulation.PettingZooPufferEnv(env=make())
    envs = pufferlib.vector.make(creator, num_envs=num_envs, backend=pufferlib.vector.Multiprocessing,
                                 num_workers=2)
    space = envs.single_action_space
else:
    import torchwm.multiagent
    backend = kind.rsplit("-", 1)[1]
    options = {"num_workers": 2} if backend != "sync" else None
    envs = torchwm.multiagent.make_vec(make, num_envs, backend=backend, backend_kwargs=options)
    space = envs.single_action_space
rows = envs.num_envs
envs.reset(seed=0)
actions = [np.stack([space.sample() for _ in range(rows)]) for _ in range(16)]
best = float("inf")
for _ in range(blocks):
    start = time.perf_counter()
    for k in range(steps):
        envs.step(actions[k % 16])
    best = min(best, (time.perf_counter() - start) / steps)
envs.close()
print(rows / best)
"""

CORES = len(os.sched_getaffinity(0))

KINDS = ["by-hand", "torchwm-shmem", "torchwm-sync", "supersuit-0", "supersuit-1", "supersuit-2", "pufferlib"]


def measure(module: str, num_envs: int, kind: str, steps: int, blocks: int) -> float | None:
    """Agent steps per second of one fresh process; None where the vectorizer cannot run here."""
    command = [sys.executable, "-c", SCRIPT, module, str(num_envs), kind, str(steps), str(blocks)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        if kind == "pufferlib" and "ModuleNotFoundError" in done.stderr:
            return None
        raise RuntimeError(f"{kind} on {module} failed:\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="*", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for name in args.envs:
        results: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for round_ in range(args.rounds):
            for kind in KINDS:
                rate = measure(ENVS[name], args.num_envs, kind, args.steps, args.blocks)
                if rate is not None:
                    results[kind].append(rate)
            peer = max(results[kind][-1] for kind in KINDS if kind.startswith("supersuit"))
            ceiling = results["by-hand"][-1] * CORES
            line = ", ".join(f"{kind} {values[-1]:,.0f}" for kind, values in results.items() if values)
            print(
                f"{name} x{args.num_envs} round {round_ + 1}: {line} agent steps/s; "
                f"torchwm-shmem / best SuperSuit {results['torchwm-shmem'][-1] / peer:.2f}x; the most any "
                f"vectorizer can reach here (by hand x {CORES} cores) / best SuperSuit {ceiling / peer:.2f}x",
                flush=True,
            )
        medians = {kind: statistics.median(values) for kind, values in results.items() if values}
        print(f"{name}: medians " + ", ".join(f"{kind} {value:,.0f}" for kind, value in medians.items()))
        if not results["pufferlib"]:
            print(f"{name}: PufferLib not measured (not installed here)")


if __name__ == "__main__":
    main()
