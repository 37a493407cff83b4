"""A bench run: every backend and peer at every num_envs on one setup, each measured in its own child
(`torchwm.bench.child`), their repeats interleaved; and the checks of a run's names and options, made
before any child starts.
"""

from __future__ import annotations

import inspect
import json
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from tqdm import tqdm

from torchwm.bench import measure
from torchwm.bench.child import BenchChildError, Child
from torchwm.bench.measure import PEERS, measure_one, setup_spec, stack_refusal
from torchwm.bench.results import BenchResult
from torchwm.errors import ConfigError, did_you_mean
from torchwm.factory import resolve_spec
from torchwm.plugins import backend_options, registry
from torchwm.setup_config import load_setup_config


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
    built first (one at a time), then their repeats are interleaved (repeat 1 of every backend, then
    repeat 2, ...), so that a change in the machine's load weighs on every backend alike. A backend
    that cannot build the stack is not measured: its results say why (``skipped``), whether that is
    known before building (ALE's vector env and a stack it cannot express) or when it refuses to build
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

    label = env_id if isinstance(env_id, str) else env_id.id
    bar = tqdm(
        total=len(num_envs) * len(backends) * (1 + repeats),
        unit="step",
        file=sys.stderr,
        disable=not progress,
        dynamic_ncols=True,
        leave=False,
        bar_format="{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}]",
    )
    results = []
    try:
        for n in num_envs:
            jobs: list[dict[str, Any]] = [
                {
                    "env_id": label,
                    "backend": backend,
                    "num_envs": n,
                    "kwargs": dict((backend_kwargs or {}).get(backend, {})),
                    "spec": _job_spec(env_id, backend, specs),
                }
                for backend in backends
            ]
            refused = [stack_refusal(setup_spec(job["spec"] or label, n), job["backend"]) for job in jobs]
            if not isolate:
                for job, why in zip(jobs, refused, strict=True):
                    bar.set_description(f"{job['backend']} x {n}")
                    if why is not None:
                        results.append(BenchResult(label, job["backend"], n, float("nan"), skipped=why))
                        bar.update(1 + repeats)
                        continue
                    results.append(
                        measure_one(
                            **job,
                            steps=steps,
                            repeats=repeats,
                            measure_memory=measure_memory,
                            tick=bar.update,
                        )
                    )
                continue
            children: list[Child] = []
            live: list[tuple[int, Child]] = []
            try:
                for i, job in enumerate(jobs):
                    # One at a time: a backend that measures the machine while it builds (shmem's split) must
                    # not measure it while the other backends build.
                    bar.set_description(f"building {job['backend']} x {n}")
                    if refused[i] is None:
                        children.append(Child(job))  # in the list before it can fail: closed in any case
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
                asked = {
                    i: (
                        float(child.ask("memory")) if measure_memory else None,
                        child.ask("note"),
                        json.loads(child.ask("shape")),
                        json.loads(child.ask("pool")),
                    )
                    for i, child in live
                }
            finally:
                for child in children:
                    child.close()
            for i, job in enumerate(jobs):
                if i not in asked:
                    results.append(
                        BenchResult(label, job["backend"], n, float("nan"), skipped=refused[i] or "?")
                    )
                    continue
                mb, note, shape, pool = asked[i]
                results.append(
                    BenchResult(
                        label,
                        job["backend"],
                        n,
                        statistics.median(samples[i]),
                        samples[i],
                        mb,
                        note=note,
                        obs_shape=shape,
                        pool=pool,
                    )
                )
    finally:
        bar.close()
    if not isinstance(env_id, str) and env_id.family == "multiagent":
        for result in results:
            # The agents layout's batch has a row per agent of each env.
            if result.obs_shape:
                result.agents_per_env = result.obs_shape[0] // result.num_envs
    return results


def _job_spec(setup: Any, backend: str, specs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The spec a child builds ``backend`` from, as data (None: the env id's default spec)."""
    if specs and backend in specs:
        return specs[backend].to_dict()
    if isinstance(setup, str):
        return None
    if backend in PEERS or backend in measure.plugin_peers() or backend == setup.backend:
        return setup.to_dict()
    if backend in registry("backend"):
        # its options were for its own backend
        return setup.replace(backend=backend, backend_kwargs={}).to_dict()
    return setup.to_dict()


def config_specs(source: Any, backends: Sequence[str], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The config ``source`` loaded once for each torchwm backend of ``backends``
    (`torchwm.config.load_run_config`
    with ``backend=``): each gets its own ``[backends.NAME]`` table, and the file's ``backend_kwargs`` only
    where that backend takes them (the others are dropped with a `UserWarning` naming them)."""
    return {
        backend: load_setup_config(source, overrides, backend=backend)[0]
        for backend in backends
        if backend in registry("backend") and backend not in PEERS
    }


def default_backends(setup: Any) -> list[str]:
    """The backends and peers ``torchwm bench`` measures when not told.

    For an env id: the peers of the headline ratios in docs/performance.md (Gymnasium's two
    vectorizers; for ALE ids also ALE's ``AtariVectorEnv`` and the emulator's bound) and torchwm's
    built-in backends. For a config's `VecSpec`: Gymnasium's two vectorizers over its stack, ALE's
    ``AtariVectorEnv`` for an ALE id, the built-in backends and the config's own backend; those that
    cannot build the stack are reported as not measured, with the reason. For a multi-agent setup
    (`torchwm.multiagent.MultiAgentSpec`): the built-in backends and the config's own, no peer.
    """
    if not isinstance(setup, str) and setup.family == "multiagent":
        # No peer vectorizes PettingZoo envs here: torchwm's backends, and the config's own.
        names = ["sync", "subproc", "shmem", setup.backend]
    elif isinstance(setup, str):
        atari = resolve_spec(setup, 1).family == "atari"
        names = [
            "gym-sync",
            "gym-async",
            *(["ale-emulator", "ale-direct"] if atari else []),
            "sync",
            "subproc",
            "shmem",
            *(["ale-native"] if atari else []),
        ]
    else:
        atari = setup.family == "atari"
        names = [
            "gym-sync",
            "gym-async",
            *(["ale-direct"] if atari else []),
            "sync",
            "subproc",
            "shmem",
            *(["ale-native"] if atari else []),
            setup.backend,
        ]
    return [name for name in dict.fromkeys(names) if name in PEERS or name in registry("backend")]


def _peer_options(backend: str) -> list[str] | None:
    """The option names a peer takes (None: not known here)."""
    if backend in ("gym-sync", "gym-async"):
        cls = gym.vector.SyncVectorEnv if backend == "gym-sync" else gym.vector.AsyncVectorEnv
        taken = {"env_fns", "self", "shared_memory"}
        return [name for name in inspect.signature(cls.__init__).parameters if name not in taken]
    if backend in ("ceiling", "ale-emulator"):
        return []
    return None


def check_bench(env_id: Any, backends: Sequence[str], backend_kwargs: dict[str, dict] | None) -> None:
    """Every name and option of a run checked before any child starts (one clear error, with suggestions)."""
    if not backends:
        raise ConfigError("backends: expected at least one backend or peer")
    peers = measure.plugin_peers()
    for backend in backends:
        if backend not in PEERS and backend not in peers:
            registry("backend").get(backend)  # UnknownNameError with suggestions
    if isinstance(env_id, str):
        resolve_spec(env_id, 1)  # UnknownNameError for a misspelt id, with the closest ids
    if backend_kwargs is not None and not isinstance(backend_kwargs, dict):
        raise ConfigError(f"backend_kwargs: expected a table of backend names, got {backend_kwargs!r}")
    for backend, options in (backend_kwargs or {}).items():
        if backend not in backends:
            raise ConfigError(
                f"backend_kwargs.{backend}: {backend!r} is not measured{did_you_mean(backend, backends)}; "
                f"the backends are: {', '.join(backends)}"
            )
        if not isinstance(options, dict):
            raise ConfigError(f"backend_kwargs.{backend}: expected a table of options, got {options!r}")
        accepted = (
            _peer_options(backend) if backend in PEERS or backend in peers else backend_options(backend)
        )
        if accepted is None:
            continue  # a backend that takes any keyword checks its options itself
        for key in options:
            if key not in accepted:
                raise ConfigError(
                    f"backend_kwargs.{backend}.{key}: {backend!r} has no option {key!r}"
                    f"{did_you_mean(key, accepted)}; its options are: {', '.join(accepted) or '(none)'}"
                )
