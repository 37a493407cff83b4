"""What the ``envpool`` backend costs on top of EnvPool itself, on the same task and options.

Both sides make the pool with the options the backend derives from the spec (so they run the
same C++ work), then step it with the same actions; short rounds alternate between them so that
a noisy machine slows both alike, and the median of the per-round ratios is kept::

    python plugins/torchwm-envpool/benchmarks/overhead.py --env ALE/Pong-v5 --num-envs 8

Prints steps per second of each and their ratio (the plugin's target is >= 0.95).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import envpool
import numpy as np
from torchwm_envpool.translate import translate

import torchwm
from torchwm.factory import resolve_spec


def steps_per_second(step, actions: list[np.ndarray], num_envs: int) -> float:
    start = time.perf_counter()
    for a in actions:
        step(a)
    return len(actions) * num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-threads", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100, help="batched steps per round")
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument(
        "--copy", action="store_true", help="the backend returns copies (its default); else copy=False"
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    backend_kwargs = {"num_threads": args.num_threads, "copy": args.copy}
    plan = translate(resolve_spec(args.env, args.num_envs, backend="envpool", backend_kwargs=backend_kwargs))
    direct = envpool.make_gymnasium(
        plan.task_id, num_envs=args.num_envs, seed=0, num_threads=args.num_threads, **plan.kwargs
    )
    envs = torchwm.make_vec(args.env, args.num_envs, backend="envpool", seed=0, backend_kwargs=backend_kwargs)
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, envs.single_action_space.n, size=args.num_envs) for _ in range(args.steps)]
    direct.reset()
    envs.reset()
    ours, theirs = [], []
    for _ in range(args.rounds):
        theirs.append(steps_per_second(direct.step, actions, args.num_envs))
        ours.append(steps_per_second(envs.step, actions, args.num_envs))
    direct.close()
    envs.close()
    a, b = statistics.median(theirs), statistics.median(ours)
    ratio = statistics.median(o / t for o, t in zip(ours, theirs))
    print(f"{args.env}  {args.num_envs} envs  num_threads={args.num_threads}  copy={args.copy}")
    print(f"envpool directly       {a:10,.0f} steps/s (median of {args.rounds} rounds)")
    print(f"torchwm envpool        {b:10,.0f} steps/s")
    print(f"median ratio of the rounds: {ratio:.3f}")


if __name__ == "__main__":
    main()
