"""Benchmark torchwm backends beside their peers, on the same envs, in one run.

``torchwm bench --env CartPole-v1 --num-envs 32``, or ``torchwm bench
my_config.yaml`` for a config's whole setup (its stack, env kwargs, seed,
num_envs and backend options; the peers built over the same stack, and
those that cannot build it listed with the reason), the same command as
``python -m torchwm.bench ...`` (one parser, `add_arguments`), steps each
backend for a fixed number of batched steps with pre-drawn random actions and
prints steps/s (the median of ``--repeats`` runs) and the ratio to a baseline.
Every measurement runs in its own child process (``python -m torchwm.bench
--serve JOB``), so one backend's processes and memory never weigh on the next,
and the PSS of that child's whole process tree can be read from
``/proc/<pid>/smaps_rollup``. Names, options and the env id are checked
before any child starts; progress goes to stderr; ``--json`` and ``--plot``
record the machine (cores, CPU model), the versions, the date and the
repeats next to the figures.

What can be measured (``backends``):

- ``gym-sync``, ``gym-async``: Gymnasium's SyncVectorEnv and AsyncVectorEnv
  (``shared_memory=True``) over the same env and wrapper stack torchwm builds;
- ``ale-direct``: ale_py's AtariVectorEnv called directly (ALE ids only), with
  the arguments equivalent to the stack (torchwm's default Atari stack for an id);
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
import datetime
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, NoReturn

import numpy as np

from torchwm.errors import UnsupportedStackError

PEERS = ("gym-sync", "gym-async", "ale-direct", "ceiling", "ale-emulator")
WARMUP_STEPS = 20
# The packages whose versions a result depends on, recorded in --json and in the plot.
VERSIONED = ("torchwm", "gymnasium", "ale-py", "numpy")


@dataclass
class BenchResult:
    """One (env, backend, num_envs) measurement.

    Attributes:
        steps_per_second: env steps per second (batched steps x num_envs / s), the median of ``samples``.
        samples: steps/s of each repeat.
        pss_mb: proportional set size of the process tree (the measuring child and its descendants), MB.
        ratio: steps/s over the baseline's at the same env and num_envs (set by `add_ratios`).
        note: what the backend chose from what it measured (shmem: its ``worker_choice`` and ``wait_plan``), or "".
        obs_shape: the shape of the observation batch its first reset returned (None for the bounds
            ``ceiling`` and ``ale-emulator``, and for observations that are no array).
        skipped: why it was not measured (it cannot build the stack), or "" (``steps_per_second`` is then NaN).
    """

    env_id: str
    backend: str
    num_envs: int
    steps_per_second: float
    samples: list[float] = field(default_factory=list)
    pss_mb: float | None = None
    ratio: float | None = None
    note: str = ""
    obs_shape: list[int] | None = None
    skipped: str = ""


def add_ratios(results: list[BenchResult], baseline: str) -> list[BenchResult]:
    """Set ``ratio`` of each result against ``baseline`` at the same env and num_envs (None without one)."""
    base = {(r.env_id, r.num_envs): r.steps_per_second for r in results if r.backend == baseline and not r.skipped}
    for r in results:
        reference = base.get((r.env_id, r.num_envs))
        r.ratio = r.steps_per_second / reference if reference and not r.skipped else None
    return results


def format_table(results: list[BenchResult], baseline: str) -> str:
    """A plain-text table: env, num_envs, backend, steps/s, ratio to ``baseline``, PSS.

    Under the table: what each backend chose from what it measured, the backends not measured and
    why, and last, once, the advice some of those measurements gave (``backend='sync' would be faster``).
    """
    add_ratios(results, baseline)
    measured = [r for r in results if not r.skipped]
    width = max([12] + [len(r.backend) for r in measured])
    header = f"{'env':<24} {'envs':>5} {'backend':<{width}} {'steps/s':>12} {'x ' + baseline:>14} {'PSS MB':>8}"
    lines = [header, "-" * len(header)]
    for r in measured:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        pss = f"{r.pss_mb:.0f}" if r.pss_mb is not None else "-"
        lines.append(f"{r.env_id:<24} {r.num_envs:>5} {r.backend:<{width}} {r.steps_per_second:>12,.0f} {ratio:>14} {pss:>8}")
    advice: dict[str, list[str]] = {}
    for r in measured:
        if not r.note:
            continue
        note, said = split_advice(r.note)
        for text in said:
            advice.setdefault(text, []).append(f"{r.backend} x {r.num_envs}")
        lines.append(f"{r.backend} x {r.num_envs}: {note}")
    skipped = {r.backend: r.skipped for r in results if r.skipped}
    lines += [f"not measured: {backend}: {reason}" for backend, reason in skipped.items()]
    lines += [f"note ({', '.join(where)}): {text}" for text, where in advice.items()]
    return "\n".join(lines)


def split_advice(note: str) -> tuple[str, list[str]]:
    """A backend's note without its advice clauses (``...; fewer workers or backend='sync' would be faster``),
    and those clauses: the table says each once, after every row and note."""
    advice = re.findall(r"; ([^;]*would be faster)", note)
    for text in advice:
        note = note.replace(f"; {text}", "")
    return note, advice


def plot(results: list[BenchResult], path: str | os.PathLike[str], info: dict[str, Any] | None = None) -> None:
    """Write `plot_figure` of ``results`` as a PNG (or any format matplotlib knows from the suffix)."""
    import matplotlib.pyplot as plt

    fig = plot_figure(results, info)
    fig.savefig(path)
    plt.close(fig)


def plot_figure(results: list[BenchResult], info: dict[str, Any] | None = None) -> Any:
    """Steps/s against num_envs, one line per backend (one panel per env, side by side): a matplotlib Figure.

    The x ticks are the measured num_envs, the y axis starts at zero, each point is the median with
    the range of its repeats as an error bar, and a subtitle says the machine, the versions, the date
    and the repeats (``info`` as `bench_info` gives it; measured now when not given).
    """
    try:
        import matplotlib
    except ImportError:
        from torchwm.extras import missing_extra

        raise missing_extra("plot", "torchwm bench --plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    info = info or bench_info()
    results = [r for r in results if not r.skipped]
    env_ids = list(dict.fromkeys(r.env_id for r in results))
    fig, axes = plt.subplots(1, len(env_ids), figsize=(max(9.0, 7.0 * len(env_ids)), 5.8), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids, strict=True):
        sizes = sorted({r.num_envs for r in results if r.env_id == env_id})
        for backend in dict.fromkeys(r.backend for r in results if r.env_id == env_id):
            mine = sorted((r for r in results if r.env_id == env_id and r.backend == backend), key=lambda r: r.num_envs)
            medians = [r.steps_per_second for r in mine]
            low = [m - min(r.samples or [m]) for r, m in zip(mine, medians, strict=True)]
            high = [max(r.samples or [m]) - m for r, m in zip(mine, medians, strict=True)]
            ax.errorbar([r.num_envs for r in mine], medians, yerr=[low, high], marker="o", capsize=3, label=backend)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(n) for n in sizes])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("num_envs (the sizes measured)")
        ax.set_ylabel("env steps per second (median; bars: range of the repeats)")
        ax.set_title(f"{env_id}: throughput by backend")
        ax.legend(fontsize="small")
        ax.grid(True, alpha=0.3)
    fig.suptitle(_subtitle(results, info), fontsize="small")
    fig.tight_layout()
    return fig


def _subtitle(results: list[BenchResult], info: dict[str, Any]) -> str:
    machine, versions = info["machine"], info["versions"]
    repeats = sorted({len(r.samples) for r in results if r.samples})
    steps = info.get("settings", {}).get("steps")
    cpus = f"{machine['usable_cores']} of {machine['cores']} cores" if machine["usable_cores"] != machine["cores"] \
        else f"{machine['cores']} cores"
    cpu = machine["cpu_model"]
    if machine.get("cpu_family"):
        # The same model name covers CPUs of different speed (issue: EPYC family 25 vs 26).
        cpu += f" (family {machine['cpu_family']}, model {machine['cpu_model_number']})"
    lines = [
        f"{cpus}, {cpu}",
        f"{machine['system']}, {info['date']}",
        ", ".join(f"{name} {version}" for name, version in versions.items()),
        (f"{'/'.join(map(str, repeats)) or '?'} {'repeat' if repeats == [1] else 'repeats'}"
         + (f" of {steps} batched steps" if steps else "") + " each, median shown"),
    ]
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    """The machine a measurement ran on: cores (all, and those this process may use), CPU model and family, OS."""
    cpu: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() in ("model name", "cpu family", "model") and key.strip() not in cpu:
                    cpu[key.strip()] = value.strip()
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu_model": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_family": cpu.get("cpu family"),
        "cpu_model_number": cpu.get("model"),
        "system": platform.platform(terse=True),
    }


def versions(backends: Sequence[str] = ()) -> dict[str, str | None]:
    """Versions of torchwm, Gymnasium, ale-py, NumPy, Python, and the plugins of ``backends`` measured."""
    found: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    found["python"] = platform.python_version()
    from torchwm.plugins import registry

    for backend in backends:
        owner = plugin_peers().get(backend, (backend, None))[0]
        if owner in registry("backend"):
            entry = registry("backend").get(owner)
            if entry.distribution and entry.distribution != "torchwm":
                found[entry.distribution] = entry.version
    return found


def bench_info(settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a result depends on besides the code: date, machine, versions and the run's settings."""
    settings = dict(settings or {})
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(settings.get("backends", ())),
        "settings": settings,
    }


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


def setup_spec(setup: Any, num_envs: int) -> Any:
    """The `VecSpec` a job measures: ``setup`` (a `VecSpec`, or its `VecSpec.to_dict` as a child gets it)
    at ``num_envs``, or an env id under torchwm's default stack."""
    from torchwm.spec import VecSpec

    if isinstance(setup, str):
        return _spec(setup, num_envs)
    spec = setup if isinstance(setup, VecSpec) else VecSpec.from_dict(setup)
    return spec.replace(num_envs=num_envs)


def plugin_peers() -> dict[str, Any]:
    """The bench peers backend plugins register (metadata ``bench_peers={name: factory}``): name -> (backend, factory)."""
    from torchwm.plugins import registry

    return {name: (entry.name, factory) for entry in registry("backend")
            for name, factory in entry.metadata.get("bench_peers", {}).items()}


def first_seed(spec: Any) -> int:
    """The seed of a measurement's first reset: the setup's, else 0."""
    return spec.seed if spec.seed is not None else 0


def _build(spec: Any, backend: str, kwargs: dict[str, Any]) -> Any:
    """``backend`` (a peer's name or a torchwm backend) built over ``spec``'s env, stack and num_envs.

    For a torchwm backend ``spec`` is that backend's own (its ``backend_kwargs`` included, ``kwargs`` on
    top); a peer takes the env, stack and seed of ``spec`` and only ``kwargs`` as its options.
    """
    import gymnasium as gym

    from torchwm.factory import env_fn, make_vec_from_spec

    num_envs = spec.num_envs
    peers = plugin_peers()
    if backend in peers:
        # The spec the peer's own backend would get, so that both run the same work.
        owner, factory = peers[backend]
        return factory(spec.replace(backend=owner, backend_kwargs={}, seed=first_seed(spec)), **kwargs)

    if backend in ("gym-sync", "gym-async"):
        # Gymnasium's own wrapper chain (fused=False) over the same stack: the peer is what a Gymnasium user runs.
        fns = [env_fn(spec.replace(fused=False))] * num_envs
        if backend == "gym-sync":
            return gym.vector.SyncVectorEnv(fns, **kwargs)
        return gym.vector.AsyncVectorEnv(fns, shared_memory=True, **kwargs)
    if backend == "ale-direct":
        from ale_py.vector_env import AtariVectorEnv

        from torchwm.vector.ale_native import ale_vector_kwargs

        if spec.family != "atari":
            raise UnsupportedStackError(f"ale-direct measures ALE ids only, got {spec.id!r}")
        # The very arguments ale-native passes, so the two differ only by torchwm's own layer.
        return AtariVectorEnv(**ale_vector_kwargs(spec), **kwargs)
    return make_vec_from_spec(spec.replace(backend=backend, backend_kwargs={**spec.backend_kwargs, **kwargs}))


def stack_refusal(spec: Any, backend: str) -> str | None:
    """Why ``backend`` cannot build ``spec``'s stack, known without building anything (None: it may)."""
    from torchwm.wrappers.atari_fused import unfusable_reason

    if backend in ("ale-native", "ale-direct", "ale-emulator") and spec.family != "atari":
        return f"it runs ALE ids only, and {spec.id!r} is not one"
    if backend in ("ale-native", "ale-direct"):
        from torchwm.vector.ale_native import ale_vector_kwargs

        try:
            ale_vector_kwargs(spec)
        except UnsupportedStackError as exc:
            return str(exc) if backend == "ale-native" else str(exc).replace("backend 'ale-native'", "ALE's AtariVectorEnv")
    if backend == "ale-emulator":
        why = unfusable_reason(spec)
        if why is not None:
            return f"it emulates the frames of the fused Atari env, which cannot run this stack: {why}"
    return None


def _time_steps(step: Any, actions: np.ndarray, steps: int) -> float:
    start = time.perf_counter()
    for t in range(steps):
        step(actions[t % len(actions)])
    return time.perf_counter() - start


class AleEmulator:
    """One ALE emulator doing just the ``frame_skip`` emulated frames of each step: no screen read,
    no preprocessing. Its steps/s bounds any backend that emulates the same frames.

    Args:
        setup: an ALE id (under the default stack) or a `VecSpec` whose stack the fused Atari env runs.
    """

    def __init__(self, setup: Any) -> None:
        from torchwm.wrappers.atari_fused import FusedAtariEnv, build_fused_atari

        spec = setup_spec(setup, 1)
        env = build_fused_atari(spec)
        if not isinstance(env, FusedAtariEnv):
            raise UnsupportedStackError(f"ale-emulator measures ALE ids under atari_preprocessing, got {spec.id!r}")
        self.env = env
        self.env.reset(seed=first_seed(spec))
        self.ale = self.env.ale
        self.action_space = self.env.action_space
        self._action_set = self.env.atari_env._action_set
        self._frames = range(next(w for w in spec.wrappers if w.name == "atari_preprocessing").kwargs["frame_skip"])

    def step(self, action: Any) -> None:
        ale, ale_action = self.ale, self._action_set[action]
        for _ in self._frames:
            ale.act(ale_action, 1.0)
        if ale.game_over():
            ale.reset_game()

    def close(self) -> None:
        self.env.close()


class Runner:
    """One backend built and warmed up; `sample` times ``steps`` batched steps and returns steps/s.

    ``spec`` is the setup measured (a `VecSpec` or its `VecSpec.to_dict`; for a torchwm backend, that
    backend's own); without it, ``env_id`` under torchwm's default stack.
    """

    def __init__(self, env_id: str, backend: str, num_envs: int, kwargs: dict[str, Any], spec: Any = None) -> None:
        self.num_envs = num_envs
        self.obs_shape: list[int] | None = None
        setup = setup_spec(env_id if spec is None else spec, num_envs)
        seed = first_seed(setup)
        if backend == "ale-emulator":
            from torchwm.vector.pool import default_num_workers

            emulator = AleEmulator(setup)
            self._step, self._close, space = emulator.step, emulator.close, emulator.action_space
            space.seed(seed)
            self._envs_per_step = default_num_workers()  # every core emulating, as fast as this one
        elif backend == "ceiling":
            from torchwm.factory import build_env
            from torchwm.vector.pool import default_num_workers

            env = build_env(setup.replace(num_envs=1))
            env.reset(seed=seed)
            env.action_space.seed(seed)

            def step_one(action: Any) -> None:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()

            self._step, self._close, space = step_one, env.close, env.action_space
            # Perfect scaling: every core steps one env alone, as fast as this one.
            self._envs_per_step = default_num_workers()
        else:
            envs = _build(setup, backend, kwargs)
            first = envs.reset(seed=seed)
            obs = first[0] if isinstance(first, tuple) else first
            self.obs_shape = list(obs.shape) if isinstance(obs, np.ndarray) else None
            envs.action_space.seed(seed)
            self._step, self._close, space = envs.step, envs.close, envs.action_space
            self._envs_per_step = num_envs
            self._envs = envs
        self._actions = np.stack([space.sample() for _ in range(64)])
        _time_steps(self._step, self._actions, WARMUP_STEPS)

    def sample(self, steps: int) -> float:
        return steps * self._envs_per_step / _time_steps(self._step, self._actions, steps)

    def note(self) -> str:
        """What the backend chose from what it measured (`BenchResult.note`)."""
        envs = getattr(self, "_envs", None)
        choice, plan = getattr(envs, "worker_choice", None), getattr(envs, "wait_plan", None)
        return "; ".join([f"split: {choice}"] * (choice is not None) + [f"waits: {plan}"] * (plan is not None))

    def close(self) -> None:
        self._close()


def measure_one(env_id: str, backend: str, num_envs: int, steps: int, repeats: int,
                kwargs: dict[str, Any], measure_memory: bool, tick: Any = None, spec: Any = None) -> BenchResult:
    """Measure ``backend`` in this process, its repeats back to back (``tick(1)`` after the build and each repeat).

    A backend that cannot build the stack (`UnsupportedStackError`) gives a result that says why (``skipped``).
    """
    tick = tick or (lambda _n: None)
    try:
        runner = Runner(env_id, backend, num_envs, kwargs, spec)
    except UnsupportedStackError as exc:
        tick(1 + repeats)
        return BenchResult(env_id, backend, num_envs, float("nan"), skipped=_first_line(str(exc)))
    tick(1)
    try:
        samples = []
        for _ in range(repeats):
            samples.append(runner.sample(steps))
            tick(1)
        pss = process_tree_pss_mb() if measure_memory else None
        note = runner.note()
    finally:
        runner.close()
    return BenchResult(env_id, backend, num_envs, statistics.median(samples), samples, pss, note=note,
                       obs_shape=runner.obs_shape)


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def run_bench(
    env_id: Any,
    backends: list[str],
    num_envs: list[int],
    steps: int = 1000,
    repeats: int = 3,
    backend_kwargs: dict[str, dict] | None = None,
    measure_memory: bool = False,
    isolate: bool = True,
    progress: bool = False,
    specs: dict[str, Any] | None = None,
) -> list[BenchResult]:
    """Measure every backend at every num_envs on ``env_id``.

    With ``isolate=True`` (the default) each backend lives in its own child process, all of them
    built first (one at a time), then their repeats are interleaved (repeat 1 of every backend, then repeat 2, ...),
    so that a change in the machine's load weighs on every backend alike. A backend that cannot
    build the stack is not measured: its results say why (``skipped``), whether that is known before
    building (ALE's vector env and a stack it cannot express) or when it refuses to build
    (`UnsupportedStackError`).

    Args:
        env_id: a Gymnasium/ALE id (with torchwm's default stack), or ``"torchwm/Synthetic-v0"``; or a
            `VecSpec` (a config's, `torchwm.load_config`): its env, env kwargs, stack and seed, and
            for its own backend its ``backend_kwargs``. The peers build the same stack.
        backends: peers (``gym-sync``, ``gym-async``, ``ale-direct``, ``ceiling``, ``ale-emulator``, plugins'
            ``bench_peers``) and torchwm backend names.
        num_envs: the batch sizes to try.
        steps: batched steps timed per repeat.
        repeats: timed repeats; the result is their median.
        backend_kwargs: options per backend name (``{"shmem": {"num_workers": 2}}``), on top of the spec's.
        measure_memory: read the PSS of each backend's process tree (its child and the child's descendants).
        isolate: measure in child processes (default); ``False`` measures in this process, one backend
            after the other.
        progress: show a progress bar on stderr (a tick per backend built and per repeat).
        specs: the spec of a torchwm backend by name (`config_specs`: a config loaded for that
            backend, its ``[backends.NAME]`` table applied); by default ``env_id``'s spec on that
            backend, with ``env_id``'s ``backend_kwargs`` for its own backend only.

    Raises:
        UnknownNameError: an unknown env id or backend (with the closest names).
        ConfigError: an option a backend does not take, or options for a backend not measured.

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
    check_bench(env_id, backends, backend_kwargs)
    from tqdm import tqdm

    label = env_id if isinstance(env_id, str) else env_id.id
    bar = tqdm(total=len(num_envs) * len(backends) * (1 + repeats), unit="step", file=sys.stderr,
               disable=not progress, dynamic_ncols=True, leave=False, bar_format="{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}]")
    results = []
    try:
        for n in num_envs:
            jobs: list[dict[str, Any]] = [{"env_id": label, "backend": backend, "num_envs": n,
                                           "kwargs": dict((backend_kwargs or {}).get(backend, {})),
                                           "spec": _job_spec(env_id, backend, specs)}
                                          for backend in backends]
            refused = [stack_refusal(setup_spec(job["spec"] or label, n), job["backend"]) for job in jobs]
            if not isolate:
                for job, why in zip(jobs, refused, strict=True):
                    bar.set_description(f"{job['backend']} x {n}")
                    if why is not None:
                        results.append(BenchResult(label, job["backend"], n, float("nan"), skipped=why))
                        bar.update(1 + repeats)
                        continue
                    results.append(measure_one(**job, steps=steps, repeats=repeats, measure_memory=measure_memory,
                                               tick=bar.update))
                continue
            children: list[_Child] = []
            live: list[tuple[int, _Child]] = []
            try:
                for i, job in enumerate(jobs):
                    # One at a time: a backend that measures the machine while it builds (shmem's split) must
                    # not measure it while the other backends build.
                    bar.set_description(f"building {job['backend']} x {n}")
                    if refused[i] is None:
                        children.append(_Child(job))  # in the list before it can fail: closed in any case
                        try:
                            children[-1].wait_ready()
                            live.append((i, children[-1]))
                        except BenchChildError as exc:
                            if not exc.unsupported:
                                raise
                            refused[i] = exc.reason
                    bar.update(1 if refused[i] is None else 1 + repeats)
                samples: dict[int, list[float]] = {i: [] for i, _ in live}
                for repeat in range(repeats):
                    for i, child in live:
                        bar.set_description(f"{child.job['backend']} x {n}, repeat {repeat + 1}/{repeats}")
                        samples[i].append(float(child.ask(f"run {steps}")))
                        bar.update(1)
                asked = {i: (float(child.ask("memory")) if measure_memory else None, child.ask("note"),
                             json.loads(child.ask("shape"))) for i, child in live}
            finally:
                for child in children:
                    child.close()
            for i, job in enumerate(jobs):
                if i not in asked:
                    results.append(BenchResult(label, job["backend"], n, float("nan"), skipped=refused[i] or "?"))
                    continue
                mb, note, shape = asked[i]
                results.append(BenchResult(label, job["backend"], n, statistics.median(samples[i]), samples[i], mb,
                                           note=note, obs_shape=shape))
    finally:
        bar.close()
    return results


def _job_spec(setup: Any, backend: str, specs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The spec a child builds ``backend`` from, as data (None: the env id's default spec)."""
    from torchwm.plugins import registry

    if specs and backend in specs:
        return specs[backend].to_dict()
    if isinstance(setup, str):
        return None
    if backend in PEERS or backend in plugin_peers() or backend == setup.backend:
        return setup.to_dict()
    if backend in registry("backend"):
        return setup.replace(backend=backend, backend_kwargs={}).to_dict()  # its options were for its own backend
    return setup.to_dict()


def config_specs(source: Any, backends: Sequence[str], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The config ``source`` loaded once for each torchwm backend of ``backends`` (`torchwm.config.load_run_config`
    with ``backend=``): each gets its own ``[backends.NAME]`` table, and the file's ``backend_kwargs`` only
    where that backend takes them (the others are dropped with a `UserWarning` naming them)."""
    from torchwm.config import load_run_config
    from torchwm.plugins import registry

    return {backend: load_run_config(source, overrides, backend=backend)[0]
            for backend in backends if backend in registry("backend") and backend not in PEERS}


class BenchChildError(RuntimeError):
    """A measuring child failed; the first line of the message is the child's error, then its stderr.

    Attributes:
        input_error: the child failed while building with an error that means bad input (an option
            value a backend refuses: ValueError, TypeError or a torchwm input error), not a failure.
        unsupported: the backend refused to build the stack (`UnsupportedStackError`); ``reason`` says why.
    """

    INPUT_ERRORS = ("ValueError", "TypeError", "ConfigError", "UnknownNameError", "UnsupportedStackError")
    UNSUPPORTED = ("UnsupportedStackError", "DynamicShapeError")

    def __init__(self, job: dict[str, Any], stderr: str, building: bool) -> None:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "it exited without a message"
        kind, _, reason = last.partition(":")
        kind = kind.rpartition(".")[2]
        self.input_error = building and kind in self.INPUT_ERRORS
        self.unsupported = building and kind in self.UNSUPPORTED
        self.reason = reason.strip() or last
        super().__init__(f"measuring {job['backend']} x {job['num_envs']} on {job['env_id']} failed: {last}\n"
                         f"{stderr[-3000:]}")


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

    def _line(self, building: bool = False) -> str:
        line = self.stdout.readline()
        if not line:
            self.process.wait(timeout=60)
            raise BenchChildError(self.job, self.stderr.read(), building)
        return line.strip()

    def wait_ready(self) -> None:
        while self._line(building=True) != "ready":
            pass

    def ask(self, command: str) -> str:
        self.stdin.write(command + "\n")
        self.stdin.flush()
        while True:
            # Answers start with "= ": envs may print to the same stdout (ALE's banner does).
            line = self._line()
            if line == "=" or line.startswith("= "):  # "=" alone: an empty answer (the line is stripped)
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
    """The child side of `_Child`: build, say ``ready``, answer ``run <steps>``, ``memory``, ``note``, ``shape``,
    ``quit``."""
    runner = Runner(**job)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "run":
                print("=", runner.sample(int(args[0])), flush=True)
            elif command == "memory":
                print("=", process_tree_pss_mb(), flush=True)
            elif command == "note":
                print("=", runner.note(), flush=True)
            elif command == "shape":
                print("=", json.dumps(runner.obs_shape), flush=True)
            elif command == "quit":
                break
    finally:
        runner.close()


# -- checks and the command line ---------------------------------------------------------------------


def default_backends(setup: Any) -> list[str]:
    """The backends and peers ``torchwm bench`` measures when not told.

    For an env id: the peers of the headline ratios in docs/performance.md (Gymnasium's two
    vectorizers; for ALE ids also ALE's ``AtariVectorEnv`` and the emulator's bound) and torchwm's
    built-in backends. For a config's `VecSpec`: Gymnasium's two vectorizers over its stack, ALE's
    ``AtariVectorEnv`` for an ALE id, the built-in backends and the config's own backend; those that
    cannot build the stack are reported as not measured, with the reason.
    """
    from torchwm.factory import resolve_spec
    from torchwm.plugins import registry

    if isinstance(setup, str):
        atari = resolve_spec(setup, 1).family == "atari"
        names = ["gym-sync", "gym-async", *(["ale-emulator", "ale-direct"] if atari else []),
                 "sync", "subproc", "shmem", *(["ale-native"] if atari else [])]
    else:
        atari = setup.family == "atari"
        names = ["gym-sync", "gym-async", *(["ale-direct"] if atari else []),
                 "sync", "subproc", "shmem", *(["ale-native"] if atari else []), setup.backend]
    return [name for name in dict.fromkeys(names) if name in PEERS or name in registry("backend")]


def _peer_options(backend: str) -> list[str] | None:
    """The option names a peer takes (None: not known here)."""
    import gymnasium as gym

    if backend in ("gym-sync", "gym-async"):
        cls = gym.vector.SyncVectorEnv if backend == "gym-sync" else gym.vector.AsyncVectorEnv
        taken = {"env_fns", "self", "shared_memory"}
        return [name for name in inspect.signature(cls.__init__).parameters if name not in taken]
    if backend in ("ceiling", "ale-emulator"):
        return []
    return None


def check_bench(env_id: Any, backends: Sequence[str], backend_kwargs: dict[str, dict] | None) -> None:
    """Every name and option of a run checked before any child starts (one clear error, with suggestions)."""
    from torchwm.config import did_you_mean
    from torchwm.errors import ConfigError
    from torchwm.factory import resolve_spec
    from torchwm.listing import backend_options
    from torchwm.plugins import registry

    if not backends:
        raise ConfigError("backends: expected at least one backend or peer")
    peers = plugin_peers()
    for backend in backends:
        if backend not in PEERS and backend not in peers:
            registry("backend").get(backend)  # UnknownNameError with suggestions
    if isinstance(env_id, str):
        resolve_spec(env_id, 1)  # UnknownNameError for a misspelt id, with the closest ids
    if backend_kwargs is not None and not isinstance(backend_kwargs, dict):
        raise ConfigError(f"backend_kwargs: expected a table of backend names, got {backend_kwargs!r}")
    for backend, options in (backend_kwargs or {}).items():
        if backend not in backends:
            raise ConfigError(f"backend_kwargs.{backend}: {backend!r} is not measured{did_you_mean(backend, backends)}; "
                              f"the backends are: {', '.join(backends)}")
        if not isinstance(options, dict):
            raise ConfigError(f"backend_kwargs.{backend}: expected a table of options, got {options!r}")
        accepted = _peer_options(backend) if backend in PEERS or backend in peers else backend_options(backend)
        if accepted is None:
            continue  # a backend that takes any keyword checks its options itself
        for key in options:
            if key not in accepted:
                raise ConfigError(f"backend_kwargs.{backend}.{key}: {backend!r} has no option {key!r}"
                                  f"{did_you_mean(key, accepted)}; its options are: {', '.join(accepted) or '(none)'}")


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= 1, got {text!r}")
    return sizes


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


DEFAULT_SIZES = [8, 16, 32]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``torchwm bench``, which ``python -m torchwm.bench`` also takes."""
    parser.add_argument("config", nargs="?", default=None, metavar="CONFIG",
                        help="a config file (.toml, .yaml, .yml, .json) or a shipped config's name: measure that "
                             "setup (env, env kwargs, wrapper stack, seed, num_envs, backend options)")
    parser.add_argument("--config", dest="config_option", default=None, metavar="CONFIG", help="the same as CONFIG")
    parser.add_argument("--env", default=None, help="env id under torchwm's default stack (default: CartPole-v1)")
    parser.add_argument("--backends", default=None,
                        help="comma-separated peers and torchwm backends (default: gym-sync,gym-async,sync,subproc,"
                             "shmem; for ALE ids also ale-emulator, ale-direct and ale-native; with a config: "
                             "gym-sync,gym-async, the built-in backends and the config's own, ALE's beside them for "
                             "an ALE id)")
    parser.add_argument("--num-envs", type=_sizes, default=None,
                        help="comma-separated sizes (default: 8,16,32; with a config, its num_envs)")
    parser.add_argument("--steps", type=_positive, default=1000, help="batched steps per repeat (default: 1000)")
    parser.add_argument("--repeats", type=_positive, default=3, help="repeats per measurement; the median is kept (default: 3)")
    parser.add_argument("--baseline", default=None, help="backend the ratios are against (default: the first)")
    parser.add_argument("--backend-kwargs", default=None, metavar="JSON",
                        help='options per backend, e.g. \'{"shmem": {"num_workers": 2}}\' (over a config\'s own)')
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="BACKEND.KEY=VALUE",
                        help="one backend option, e.g. shmem.num_workers=2 (after --backend-kwargs)")
    parser.add_argument("--memory", action="store_true", help="also measure the PSS of each process tree")
    parser.add_argument("--plot", default=None, metavar="PNG", help="write a plot of steps/s against num_envs")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the results, machine and versions as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _setup(args: argparse.Namespace) -> tuple[Any, str | None]:
    """What ``torchwm bench`` measures: ``(env id, None)`` or ``(the config's VecSpec, the config)``."""
    from torchwm.config import is_config_reference, load_config
    from torchwm.errors import ConfigError

    if args.config is not None and args.config_option is not None:
        raise ConfigError(f"give the config once: CONFIG {args.config!r} or --config {args.config_option!r}")
    config = args.config if args.config is not None else args.config_option
    if config is not None and args.env is not None:
        raise ConfigError(f"give a config or --env, not both (got {config!r} and --env {args.env!r}); a config "
                          f"names its env")
    if config is None:
        env_id = args.env or "CartPole-v1"
        if is_config_reference(env_id) and not env_id.isidentifier():
            # A file, not an id (a bare name such as "pong" is an id here: Atari short names are).
            raise ConfigError(f"--env {env_id!r} is a config file; --env takes an env id. Measure the config "
                              f"with: torchwm bench {env_id}")
        return env_id, None
    return load_config(config), config


def run_command(args: argparse.Namespace) -> int:
    """``torchwm bench``: check, measure, print the table, write the plot and the JSON."""
    from torchwm.config import apply_overrides
    from torchwm.errors import ConfigError

    setup, config = _setup(args)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends is not None \
        else default_backends(setup)
    baseline: str = args.baseline or (backends[0] if backends else "")
    if baseline not in backends:
        raise ConfigError(f"--baseline {baseline!r} is not one of --backends {','.join(backends)}")
    try:
        backend_kwargs = json.loads(args.backend_kwargs) if args.backend_kwargs else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--backend-kwargs: not valid JSON ({exc})") from None
    if not isinstance(backend_kwargs, dict):
        raise ConfigError(f"--backend-kwargs: expected a JSON object of backend names, got {args.backend_kwargs}")
    for override in args.overrides:
        key = override.partition("=")[0].strip()
        if "." not in key:
            raise ConfigError(f"--set {override!r}: expected BACKEND.KEY=VALUE, e.g. shmem.num_workers=2")
    backend_kwargs = apply_overrides(backend_kwargs, args.overrides)
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        from torchwm.extras import missing_extra

        raise missing_extra("plot", "torchwm bench --plot")  # before minutes of measuring, not after
    sizes = args.num_envs or (DEFAULT_SIZES if config is None else [setup.num_envs])
    specs = config_specs(config, backends) if config is not None else None
    settings: dict[str, Any] = {"env": setup if config is None else setup.id, "backends": backends,
                                "num_envs": sizes, "steps": args.steps, "repeats": args.repeats,
                                "backend_kwargs": backend_kwargs}
    if config is not None:
        refusals = [(b, stack_refusal((specs or {}).get(b, setup), b)) for b in backends]
        if all(why for _, why in refusals):
            _nothing_measured(*refusals[0])  # known before building anything
    expected: list[int] | None = None
    if config is not None:
        expected = config_obs_shape(setup)
        settings["config"] = {"source": config, "spec": setup.to_dict(), "obs_shape": expected}
        print(f"torchwm bench: {config}: {describe_setup(setup)}", file=sys.stderr, flush=True)
    results = run_bench(setup, backends, sizes, steps=args.steps, repeats=args.repeats,
                        backend_kwargs=backend_kwargs or None, measure_memory=args.memory,
                        progress=not args.no_progress, specs=specs)
    if all(r.skipped for r in results):
        _nothing_measured(results[0].backend, results[0].skipped)
    print(format_table(results, baseline))
    if expected is not None:
        for r in results:
            if r.obs_shape is not None and r.obs_shape[1:] != expected:
                print(f"warning: {r.backend} x {r.num_envs} gave observations of shape {tuple(r.obs_shape[1:])}, "
                      f"the config's are {tuple(expected)}")
    info = bench_info(settings)
    if args.plot:
        plot(results, args.plot, info)
        print(f"plot written to {args.plot}")
    if args.json:
        rows = []
        for r in results:
            row = asdict(r)
            if r.skipped:
                row["steps_per_second"] = None  # not measured (JSON has no NaN)
            if expected is not None:
                row["obs_matches_config"] = None if r.obs_shape is None else r.obs_shape[1:] == expected
            rows.append(row)
        with open(args.json, "w") as f:
            json.dump({**info, "baseline": baseline, "results": rows}, f, indent=2)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


def _nothing_measured(backend: str, why: Any) -> NoReturn:
    raise UnsupportedStackError(f"nothing measured: no backend asked can build this stack ({backend}: {why})")


def config_obs_shape(spec: Any) -> list[int] | None:
    """The shape of one observation of the env ``spec`` describes (one env built and closed); None if not an array."""
    from torchwm.errors import ConfigError, TorchwmError
    from torchwm.factory import build_env

    try:
        env = build_env(spec.replace(num_envs=1))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, TorchwmError):
            raise
        # A stack whose wrappers refuse each other (resize over scaled observations): bad input, said before measuring.
        raise ConfigError(f"building one env of {spec.id} with its stack failed: {exc}") from exc
    try:
        shape = env.observation_space.shape
    finally:
        env.close()
    return list(shape) if shape is not None else None


def describe_setup(spec: Any) -> str:
    """One line: the env, its kwargs, the stack, num_envs, the seed and the backend with its options."""
    stack = ", ".join(repr(w) for w in spec.wrappers) or "(no wrappers)"
    options = f" {spec.backend_kwargs}" if spec.backend_kwargs else ""
    return (f"{spec.id} {spec.env_kwargs}, stack [{stack}], {spec.num_envs} envs, seed {spec.seed}, "
            f"backend {spec.backend}{options}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchwm.bench ...``: exactly ``torchwm bench ...`` (one parser, one-line errors)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--serve"]:
        serve(json.loads(argv[1]))  # a measuring child (see _Child)
        return 0
    from torchwm.cli import main as cli_main

    return cli_main(["bench", *argv])


if __name__ == "__main__":
    sys.exit(main())
