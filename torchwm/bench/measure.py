"""Measuring one backend in this process: building it (a torchwm backend or a peer) over a setup, stepping it
with pre-drawn random actions, and reading the PSS of the process tree.

The peers (`PEERS`) are what torchwm is compared with: Gymnasium's two vectorizers over the same stack,
ale_py's ``AtariVectorEnv`` with the arguments ``ale-native`` passes, and two bounds (``ceiling``: the cores
times one env stepped alone; ``ale-emulator``: the cores times one emulator doing only a step's frames).
A backend plugin may register more (metadata ``bench_peers``, `plugin_peers`).
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.bench.results import BenchResult
from torchwm.config import MULTIAGENT_TABLE
from torchwm.errors import UnsupportedStackError
from torchwm.factory import build_env, env_fn, make_vec_from_spec, resolve_spec
from torchwm.multiagent.make import make_vec_from_spec as make_multiagent_vec_from_spec
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.plugins import registry
from torchwm.spec import VecSpec
from torchwm.wrappers.atari_fused import FusedAtariEnv, build_fused_atari, unfusable_reason

PEERS = ("gym-sync", "gym-async", "ale-direct", "ceiling", "ale-emulator")
WARMUP_STEPS = 20


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
            except (FileNotFoundError, ProcessLookupError):
                pass  # the thread or process ended meanwhile
    return found


def setup_spec(setup: Any, num_envs: int) -> Any:
    """The `VecSpec` a job measures: ``setup`` (a `VecSpec`, or its `VecSpec.to_dict` as a child gets it)
    at ``num_envs``, or an env id under torchwm's default stack."""
    if isinstance(setup, str):
        return resolve_spec(setup, num_envs)
    if isinstance(setup, (VecSpec, MultiAgentSpec)):
        spec = setup
    elif MULTIAGENT_TABLE in setup:  # a multi-agent setup's `MultiAgentSpec.to_dict`
        spec = MultiAgentSpec.from_dict(setup)
    else:
        spec = VecSpec.from_dict(setup)
    return spec.replace(num_envs=num_envs)


def plugin_peers() -> dict[str, Any]:
    """The bench peers backend plugins register (metadata ``bench_peers={name: factory}``): name -> (backend,
    factory)."""
    return {
        name: (entry.name, factory)
        for entry in registry("backend")
        for name, factory in entry.metadata.get("bench_peers", {}).items()
    }


def first_seed(spec: Any) -> int:
    """The seed of a measurement's first reset: the setup's, else 0."""
    return spec.seed if spec.seed is not None else 0


def build(spec: Any, backend: str, kwargs: dict[str, Any]) -> Any:
    """``backend`` (a peer's name or a torchwm backend) built over ``spec``'s env, stack and num_envs.

    For a torchwm backend ``spec`` is that backend's own (its ``backend_kwargs`` included, ``kwargs`` on
    top); a peer takes the env, stack and seed of ``spec`` and only ``kwargs`` as its options.
    """

    num_envs = spec.num_envs
    peers = plugin_peers()
    if isinstance(spec, MultiAgentSpec):
        why = stack_refusal(spec, backend)
        if why is not None:
            raise UnsupportedStackError(why)
        return make_multiagent_vec_from_spec(
            spec.replace(backend=backend, backend_kwargs={**spec.backend_kwargs, **kwargs})
        )
    if backend in peers:
        # The spec the peer's own backend would get, so that both run the same work.
        owner, factory = peers[backend]
        return factory(spec.replace(backend=owner, backend_kwargs={}, seed=first_seed(spec)), **kwargs)

    if backend in ("gym-sync", "gym-async"):
        # Gymnasium's own wrapper chain (fused=False) over the same stack: the peer is what a Gymnasium user
        # runs.
        fns = [env_fn(spec.replace(fused=False))] * num_envs
        if backend == "gym-sync":
            return gym.vector.SyncVectorEnv(fns, **kwargs)
        return gym.vector.AsyncVectorEnv(fns, shared_memory=True, **kwargs)
    if backend == "ale-direct":
        from ale_py.vector_env import AtariVectorEnv

        from torchwm.vector.ale_native_spec import ale_vector_kwargs

        if spec.family != "atari":
            raise UnsupportedStackError(f"ale-direct measures ALE ids only, got {spec.id!r}")
        # The very arguments ale-native passes, so the two differ only by torchwm's own layer.
        return AtariVectorEnv(**ale_vector_kwargs(spec), **kwargs)
    return make_vec_from_spec(spec.replace(backend=backend, backend_kwargs={**spec.backend_kwargs, **kwargs}))


def stack_refusal(spec: Any, backend: str) -> str | None:
    """Why ``backend`` cannot build ``spec``'s stack, known without building anything (None: it may)."""
    if spec.family == "multiagent" and (backend in PEERS or backend in plugin_peers()):
        # The peers vectorize single-agent Gymnasium envs (or emulate ALE's frames); SuperSuit's is not one.
        return "it measures single-agent envs; a multi-agent setup is measured on torchwm's backends only"
    if backend in ("ale-native", "ale-direct", "ale-emulator") and spec.family != "atari":
        return f"it runs ALE ids only, and {spec.id!r} is not one"
    if backend in ("ale-native", "ale-direct"):
        from torchwm.vector.ale_native_spec import ale_vector_kwargs

        try:
            ale_vector_kwargs(spec)
        except UnsupportedStackError as exc:
            return (
                str(exc)
                if backend == "ale-native"
                else str(exc).replace("backend 'ale-native'", "ALE's AtariVectorEnv")
            )
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
        spec = setup_spec(setup, 1)
        env = build_fused_atari(spec)
        if not isinstance(env, FusedAtariEnv):
            raise UnsupportedStackError(
                f"ale-emulator measures ALE ids under atari_preprocessing, got {spec.id!r}"
            )
        self.env = env
        self.env.reset(seed=first_seed(spec))
        self.ale = self.env.ale
        self.action_space = self.env.action_space
        self._action_set = self.env.atari_env._action_set
        self._frames = range(
            next(w for w in spec.wrappers if w.name == "atari_preprocessing").kwargs["frame_skip"]
        )

    def step(self, action: Any) -> None:
        ale, ale_action = self.ale, self._action_set[action]
        for _ in self._frames:
            ale.act(ale_action, 1.0)
        if ale.game_over():
            ale.reset_game()

    def close(self) -> None:
        self.env.close()


class ParentTime:
    """The parent's own part of a worker pool's steps: their wall time less the time the pool spent in
    its group's `WorkerGroup.wait` (asleep, or spinning, until a worker is done). The wait of this one
    vector env is wrapped for the measurement; nothing else changes."""

    def __init__(self, envs: Any) -> None:
        self.waited = 0.0  # seconds in the wait, since the env was built
        self.own = 0.0  # seconds of the parent's own work, in the steps measured
        self.elapsed = 0.0  # seconds of those steps
        group = envs._stepper.group
        wait = group.wait

        def timed_wait(busy: Any, timeout: float | None, need_all: bool) -> bool:
            began = time.perf_counter()
            try:
                return wait(busy, timeout, need_all)
            finally:
                self.waited += time.perf_counter() - began

        group.wait = timed_wait

    def add(self, elapsed: float, waited: float) -> None:
        self.elapsed += elapsed
        self.own += elapsed - waited

    def describe(self, steps: int) -> str:
        return f"parent {self.own / steps * 1e6:,.0f} µs of {self.elapsed / steps * 1e6:,.0f} µs a step"


class Runner:
    """One backend built and warmed up; `sample` times ``steps`` batched steps and returns steps/s.

    ``spec`` is the setup measured (a `VecSpec` or its `VecSpec.to_dict`; for a torchwm backend, that
    backend's own); without it, ``env_id`` under torchwm's default stack.
    """

    def __init__(
        self, env_id: str, backend: str, num_envs: int, kwargs: dict[str, Any], spec: Any = None
    ) -> None:
        from torchwm.vector.pool import WorkerPool, default_num_workers

        self.num_envs = num_envs
        self.obs_shape: list[int] | None = None
        self._envs: Any = None  # the vector env measured (none for the bounds)
        setup = setup_spec(env_id if spec is None else spec, num_envs)
        seed = first_seed(setup)
        # The bounds count perfect scaling: every core stepping alone, as fast as this one.
        self._envs_per_step = default_num_workers() if backend in ("ale-emulator", "ceiling") else num_envs
        if backend == "ale-emulator":
            emulator = AleEmulator(setup)
            self._step, self._close, space = emulator.step, emulator.close, emulator.action_space
            space.seed(seed)
        elif backend == "ceiling":
            env = build_env(setup.replace(num_envs=1))
            env.reset(seed=seed)
            env.action_space.seed(seed)

            def step_one(action: Any) -> None:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()

            self._step, self._close, space = step_one, env.close, env.action_space
        else:
            envs = build(setup, backend, kwargs)
            first = envs.reset(seed=seed)
            obs = first[0] if isinstance(first, tuple) else first
            self.obs_shape = list(obs.shape) if isinstance(obs, np.ndarray) else None
            envs.action_space.seed(seed)
            self._step, self._close, space = envs.step, envs.close, envs.action_space
            self._envs = envs
        # A worker pool's own part of each step (`ParentTime`).
        self._parent = ParentTime(self._envs) if isinstance(self._envs, WorkerPool) else None
        self._steps = 0
        self._actions = np.stack([space.sample() for _ in range(64)])
        _time_steps(self._step, self._actions, WARMUP_STEPS)

    def sample(self, steps: int) -> float:
        waited = self._parent.waited if self._parent is not None else 0.0
        elapsed = _time_steps(self._step, self._actions, steps)
        if self._parent is not None:
            self._parent.add(elapsed, self._parent.waited - waited)
        self._steps += steps
        return steps * self._envs_per_step / elapsed

    def note(self) -> str:
        """What the backend chose from what it measured, and a pool's own part of a step
        (`BenchResult.note`)."""
        choice, plan = getattr(self._envs, "worker_choice", None), getattr(self._envs, "wait_plan", None)
        parts = [f"split: {choice}"] * (choice is not None) + [f"waits: {plan}"] * (plan is not None)
        if self._parent is not None and self._steps:
            parts.append(self._parent.describe(self._steps))
        return "; ".join(parts)

    def pool(self) -> dict[str, Any] | None:
        """What a worker pool chose (`pool_choice`), None for any other backend (`BenchResult.pool`)."""
        return pool_choice(self._envs)

    def close(self) -> None:
        self._close()


def measure_one(
    env_id: str,
    backend: str,
    num_envs: int,
    steps: int,
    repeats: int,
    kwargs: dict[str, Any],
    measure_memory: bool,
    tick: Any = None,
    spec: Any = None,
) -> BenchResult:
    """Measure ``backend`` in this process, its repeats back to back (``tick(1)`` after the build and each
    repeat).

    A backend that cannot build the stack (`UnsupportedStackError`) gives a result that says why
    (``skipped``).
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
        note, pool = runner.note(), runner.pool()
    finally:
        runner.close()
    return BenchResult(
        env_id,
        backend,
        num_envs,
        statistics.median(samples),
        samples,
        pss,
        note=note,
        obs_shape=runner.obs_shape,
        pool=pool,
    )


def pool_choice(envs: Any) -> dict[str, Any] | None:
    """What a worker pool (``subproc``, ``shmem``, a plugin's `torchwm.vector.pool.WorkerPool`) chose: its
    ``workers``, the ``envs_per_worker`` of each, whether the parent steps worker 0's envs itself
    (``inline``), and ``choice``, the split it measured (``worker_choice``; None when the options set the
    split). None for a vector env that is no pool."""
    slices = getattr(envs, "worker_slices", None)
    if slices is None:
        return None
    pids = getattr(envs, "worker_pids", None) or []
    choice = getattr(envs, "worker_choice", None)
    return {
        "workers": len(slices),
        "envs_per_worker": [len(r) for r in slices],
        "inline": bool(pids) and pids[0] is None,
        "choice": None if choice is None else str(choice),
    }


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""
