"""Benchmark torchwm backends beside their peers, on the same envs, in one run.

``python -m torchwm.bench --env CartPole-v1 --num-envs 32`` steps each
backend for a fixed number of batched steps with pre-drawn random actions and
prints steps/s (the median of ``--repeats`` runs) and the ratio to a baseline.
Every measurement runs in its own child process (``python -m torchwm.bench
--one ...``), so one backend's processes and memory never weigh on the next,
and the PSS of that child's whole process tree can be read from
``/proc/<pid>/smaps_rollup``.

What can be measured (``backends``):

- ``gym-sync``, ``gym-async``: Gymnasium's SyncVectorEnv and AsyncVectorEnv
  (``shared_memory=True``) over the same env and wrapper stack torchwm builds;
- ``ale-direct``: ale_py's AtariVectorEnv called directly (ALE ids only), with
  the arguments equivalent to torchwm's default Atari stack;
- ``ceiling``: the cores times the steps/s of one env stepped alone in a loop,
  what perfect parallel scaling would give;
- ``ale-emulator``: the cores times the steps/s of one ALE emulator alone, doing
  only the ``frame_skip`` emulated frames of a step (no screen read, no
  preprocessing): the bound for any backend that emulates the same frames;
- any registered torchwm backend by name (``sync``, ``subproc``, ``shmem``, a plugin's),
  and the peers a backend plugin registers as ``bench_peers`` (``envpool-direct``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PEERS = ("gym-sync", "gym-async", "ale-direct", "ceiling", "ale-emulator")
WARMUP_STEPS = 20


@dataclass
class BenchResult:
    """One (env, backend, num_envs) measurement.

    Attributes:
        steps_per_second: env steps per second (batched steps x num_envs / s), the median of ``samples``.
        samples: steps/s of each repeat.
        pss_mb: proportional set size of the process tree (the measuring child and its descendants), MB.
        ratio: steps/s over the baseline's at the same env and num_envs (set by `add_ratios`).
    """

    env_id: str
    backend: str
    num_envs: int
    steps_per_second: float
    samples: list[float] = field(default_factory=list)
    pss_mb: float | None = None
    ratio: float | None = None


def add_ratios(results: list[BenchResult], baseline: str) -> list[BenchResult]:
    """Set ``ratio`` of each result against ``baseline`` at the same env and num_envs (None without one)."""
    base = {(r.env_id, r.num_envs): r.steps_per_second for r in results if r.backend == baseline}
    for r in results:
        reference = base.get((r.env_id, r.num_envs))
        r.ratio = r.steps_per_second / reference if reference else None
    return results


def format_table(results: list[BenchResult], baseline: str) -> str:
    """A plain-text table: env, num_envs, backend, steps/s, ratio to ``baseline``, PSS."""
    add_ratios(results, baseline)
    width = max([12] + [len(r.backend) for r in results])
    header = f"{'env':<24} {'envs':>5} {'backend':<{width}} {'steps/s':>12} {'x ' + baseline:>14} {'PSS MB':>8}"
    lines = [header, "-" * len(header)]
    for r in results:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        pss = f"{r.pss_mb:.0f}" if r.pss_mb is not None else "-"
        lines.append(f"{r.env_id:<24} {r.num_envs:>5} {r.backend:<{width}} {r.steps_per_second:>12,.0f} {ratio:>14} {pss:>8}")
    return "\n".join(lines)


def plot(results: list[BenchResult], path: str) -> None:
    """Steps/s against num_envs, one line per backend (one figure per env, side by side)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env_ids = sorted({r.env_id for r in results})
    fig, axes = plt.subplots(1, len(env_ids), figsize=(6 * len(env_ids), 4.5), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids, strict=True):
        for backend in dict.fromkeys(r.backend for r in results if r.env_id == env_id):
            points = sorted((r.num_envs, r.steps_per_second) for r in results
                            if r.env_id == env_id and r.backend == backend)
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=backend)
        ax.set_xlabel("num_envs")
        ax.set_ylabel("env steps per second")
        ax.set_title(f"{env_id}: throughput by backend")
        ax.legend()
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- measuring ----------------------------------------------------------------------------------


def process_tree_pss_mb(pid: int | None = None) -> float:
    """PSS of ``pid`` (default: this process) and all its descendants, in MB."""
    total_kb = 0
    for p in _tree(pid or os.getpid()):
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total_kb += int(line.split()[1])
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass  # exited meanwhile
    return total_kb / 1024


def _tree(pid: int) -> list[int]:
    found = [pid]
    for p in found:
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except FileNotFoundError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    found.extend(int(c) for c in f.read().split())
            except FileNotFoundError:
                pass
    return found


def _spec(env_id: str, num_envs: int):
    from torchwm.factory import resolve_spec

    return resolve_spec(env_id, num_envs)


def plugin_peers() -> dict[str, Any]:
    """The bench peers backend plugins register (metadata ``bench_peers={name: factory}``): name -> (backend, factory)."""
    from torchwm.plugins import registry

    return {name: (entry.name, factory) for entry in registry("backend")
            for name, factory in entry.metadata.get("bench_peers", {}).items()}


def _build(env_id: str, backend: str, num_envs: int, kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    import torchwm
    from torchwm.factory import env_fn

    peers = plugin_peers()
    if backend in peers:
        from torchwm.factory import resolve_spec

        # The spec the peer's own backend would get, so that both run the same work.
        owner, factory = peers[backend]
        return factory(resolve_spec(env_id, num_envs, backend=owner, seed=0), **kwargs)

    if backend in ("gym-sync", "gym-async"):
        # Gymnasium's own wrapper chain (fused=False): the peer is what a Gymnasium user runs.
        fns = [env_fn(_spec(env_id, num_envs).replace(fused=False))] * num_envs
        if backend == "gym-sync":
            return gym.vector.SyncVectorEnv(fns, **kwargs)
        return gym.vector.AsyncVectorEnv(fns, shared_memory=True, **kwargs)
    if backend == "ale-direct":
        from ale_py.vector_env import AtariVectorEnv

        from torchwm.vector.ale_native import ale_vector_kwargs

        spec = _spec(env_id, num_envs)
        if spec.family != "atari":
            raise ValueError(f"ale-direct measures ALE ids only, got {env_id!r}")
        # The very arguments ale-native passes, so the two differ only by torchwm's own layer.
        return AtariVectorEnv(**ale_vector_kwargs(spec), **kwargs)
    return torchwm.make_vec(env_id, num_envs, backend=backend, backend_kwargs=kwargs or None)


def _time_steps(step: Any, actions: np.ndarray, steps: int) -> float:
    start = time.perf_counter()
    for t in range(steps):
        step(actions[t % len(actions)])
    return time.perf_counter() - start


class AleEmulator:
    """One ALE emulator doing just the ``frame_skip`` emulated frames of each step: no screen read,
    no preprocessing. Its steps/s bounds any backend that emulates the same frames."""

    def __init__(self, env_id: str) -> None:
        from torchwm.wrappers.atari_fused import FusedAtariEnv, build_fused_atari

        spec = _spec(env_id, 1)
        env = build_fused_atari(spec)
        if not isinstance(env, FusedAtariEnv):
            raise ValueError(f"ale-emulator measures ALE ids under atari_preprocessing, got {env_id!r}")
        self.env = env
        self.env.reset(seed=0)
        self.ale = self.env.ale
        self.action_space = self.env.action_space
        self._action_set = self.env.atari_env._action_set
        self._frames = range(spec.wrappers[0].kwargs["frame_skip"])

    def step(self, action: Any) -> None:
        ale, ale_action = self.ale, self._action_set[action]
        for _ in self._frames:
            ale.act(ale_action, 1.0)
        if ale.game_over():
            ale.reset_game()

    def close(self) -> None:
        self.env.close()


class Runner:
    """One backend built and warmed up; `sample` times ``steps`` batched steps and returns steps/s."""

    def __init__(self, env_id: str, backend: str, num_envs: int, kwargs: dict[str, Any]) -> None:
        self.num_envs = num_envs
        if backend == "ale-emulator":
            from torchwm.vector.processes import default_num_workers

            emulator = AleEmulator(env_id)
            self._step, self._close, space = emulator.step, emulator.close, emulator.action_space
            space.seed(0)
            self._envs_per_step = default_num_workers()  # every core emulating, as fast as this one
        elif backend == "ceiling":
            from torchwm.factory import build_env
            from torchwm.vector.processes import default_num_workers

            env = build_env(_spec(env_id, 1))
            env.reset(seed=0)
            env.action_space.seed(0)

            def step_one(action: Any) -> None:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()

            self._step, self._close, space = step_one, env.close, env.action_space
            # Perfect scaling: every core steps one env alone, as fast as this one.
            self._envs_per_step = default_num_workers()
        else:
            envs = _build(env_id, backend, num_envs, kwargs)
            envs.reset(seed=0)
            envs.action_space.seed(0)
            self._step, self._close, space = envs.step, envs.close, envs.action_space
            self._envs_per_step = num_envs
        self._actions = np.stack([space.sample() for _ in range(64)])
        _time_steps(self._step, self._actions, WARMUP_STEPS)

    def sample(self, steps: int) -> float:
        return steps * self._envs_per_step / _time_steps(self._step, self._actions, steps)

    def close(self) -> None:
        self._close()


def measure_one(env_id: str, backend: str, num_envs: int, steps: int, repeats: int,
                kwargs: dict[str, Any], measure_memory: bool) -> BenchResult:
    """Measure ``backend`` in this process, its repeats back to back."""
    runner = Runner(env_id, backend, num_envs, kwargs)
    try:
        samples = [runner.sample(steps) for _ in range(repeats)]
        pss = process_tree_pss_mb() if measure_memory else None
    finally:
        runner.close()
    return BenchResult(env_id, backend, num_envs, statistics.median(samples), samples, pss)


def run_bench(
    env_id: str,
    backends: list[str],
    num_envs: list[int],
    steps: int = 1000,
    repeats: int = 3,
    backend_kwargs: dict[str, dict] | None = None,
    measure_memory: bool = False,
    isolate: bool = True,
) -> list[BenchResult]:
    """Measure every backend at every num_envs on ``env_id``.

    With ``isolate=True`` (the default) each backend lives in its own child process, all of them
    built first, then their repeats are interleaved (repeat 1 of every backend, then repeat 2, ...),
    so that a change in the machine's load weighs on every backend alike.

    Args:
        env_id: a Gymnasium/ALE id (with torchwm's default stack), or ``"torchwm/Synthetic-v0"``.
        backends: peers (``gym-sync``, ``gym-async``, ``ale-direct``, ``ceiling``, ``ale-emulator``, plugins'
            ``bench_peers``) and torchwm backend names.
        num_envs: the batch sizes to try.
        steps: batched steps timed per repeat.
        repeats: timed repeats; the result is their median.
        backend_kwargs: options per backend name (``{"shmem": {"num_workers": 2}}``).
        measure_memory: read the PSS of each backend's process tree (its child and the child's descendants).
        isolate: measure in child processes (default); ``False`` measures in this process, one backend
            after the other.

    Example:
        >>> from torchwm.bench import run_bench, format_table
        >>> results = run_bench("CartPole-v1", ["gym-sync", "sync"], [4], steps=50, isolate=False)
        >>> [r.backend for r in results]
        ['gym-sync', 'sync']
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    from torchwm.plugins import registry

    peers = plugin_peers()
    for backend in backends:
        if backend not in PEERS and backend not in peers:
            registry("backend").get(backend)  # UnknownNameError with suggestions
    results = []
    for n in num_envs:
        jobs: list[dict[str, Any]] = [{"env_id": env_id, "backend": backend, "num_envs": n,
                                       "kwargs": dict((backend_kwargs or {}).get(backend, {}))}
                                      for backend in backends]
        if not isolate:
            results += [measure_one(**job, steps=steps, repeats=repeats, measure_memory=measure_memory) for job in jobs]
            continue
        children = [_Child(job) for job in jobs]
        try:
            for child in children:
                child.wait_ready()
            samples: list[list[float]] = [[] for _ in children]
            for _ in range(repeats):
                for child, mine in zip(children, samples, strict=True):
                    mine.append(float(child.ask(f"run {steps}")))
            pss = [float(child.ask("memory")) if measure_memory else None for child in children]
        finally:
            for child in children:
                child.close()
        results += [BenchResult(env_id, job["backend"], n, statistics.median(mine), mine, mb)
                    for job, mine, mb in zip(jobs, samples, pss, strict=True)]
    return results


class _Child:
    """A child process serving one `Runner` (``python -m torchwm.bench --serve JOB``), line by line."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.process = subprocess.Popen(
            [sys.executable, "-m", "torchwm.bench", "--serve", json.dumps(job)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        assert self.process.stdin is not None and self.process.stdout is not None and self.process.stderr is not None
        self.stdin, self.stdout, self.stderr = self.process.stdin, self.process.stdout, self.process.stderr

    def _line(self) -> str:
        line = self.stdout.readline()
        if not line:
            self.process.wait(timeout=60)
            raise RuntimeError(f"measuring {self.job['backend']} on {self.job['env_id']} failed:\n"
                               f"{self.stderr.read()[-3000:]}")
        return line.strip()

    def wait_ready(self) -> None:
        while self._line() != "ready":
            pass

    def ask(self, command: str) -> str:
        self.stdin.write(command + "\n")
        self.stdin.flush()
        while True:
            # Answers start with "= ": envs may print to the same stdout (ALE's banner does).
            line = self._line()
            if line.startswith("= "):
                return line[2:]

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.stdin.write("quit\n")
                self.stdin.flush()
                self.process.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def serve(job: dict[str, Any]) -> None:
    """The child side of `_Child`: build, say ``ready``, answer ``run <steps>``, ``memory``, ``quit``."""
    runner = Runner(**job)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "run":
                print("=", runner.sample(int(args[0])), flush=True)
            elif command == "memory":
                print("=", process_tree_pss_mb(), flush=True)
            elif command == "quit":
                break
    finally:
        runner.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchwm.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--env", default="CartPole-v1", help="env id (default CartPole-v1)")
    parser.add_argument("--backends", default="gym-sync,gym-async,sync,subproc,shmem",
                        help="comma-separated peers and torchwm backends")
    parser.add_argument("--num-envs", default="32", help="comma-separated batch sizes")
    parser.add_argument("--steps", type=int, default=1000, help="batched steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="backend the ratios are against (default: the first)")
    parser.add_argument("--backend-kwargs", default="{}",
                        help='JSON options per backend, e.g. \'{"shmem": {"num_workers": 2}}\'')
    parser.add_argument("--memory", action="store_true", help="measure the PSS of each process tree")
    parser.add_argument("--plot", default=None, help="write a PNG plot to this path")
    parser.add_argument("--json", default=None, help="write the results as JSON to this path")
    args = parser.parse_args(argv)
    if args.serve:
        serve(json.loads(args.serve))
        return 0
    backends = [b for b in args.backends.split(",") if b]
    results = run_bench(args.env, backends, [int(n) for n in args.num_envs.split(",")], steps=args.steps,
                        repeats=args.repeats, backend_kwargs=json.loads(args.backend_kwargs),
                        measure_memory=args.memory)
    print(format_table(results, args.baseline or backends[0]))
    if args.plot:
        plot(results, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
