"""`torchwm.bench.measure`: one backend measured in this process: the PSS of the process tree, the
``ale-emulator`` and plugin peers, the worker pool's choice, and the parent's own part of a step.
"""

from __future__ import annotations

import time

import gymnasium as gym

import torchwm
from torchwm import bench


def test_pss_of_the_tree_counts_children():
    alone = bench.process_tree_pss_mb()
    with torchwm.make_vec(
        "CartPole-v1", 2, backend="subproc", backend_kwargs={"num_workers": 2, "context": "spawn"}
    ):
        with_workers = bench.process_tree_pss_mb()
    assert alone > 0 and with_workers > alone + 5  # two fresh interpreters weigh several MB each


def test_ale_emulator_peer_emulates_exactly_a_steps_frames():
    emulator = bench.AleEmulator("ALE/Pong-v5")
    try:
        before = emulator.ale.getFrameNumber()
        for _ in range(10):
            emulator.step(emulator.action_space.sample())
        # frame_skip 4 of the default stack, nothing more
        assert emulator.ale.getFrameNumber() - before == 10 * 4
    finally:
        emulator.close()


def test_a_plugins_bench_peer_is_measured_on_its_backends_spec(monkeypatch):
    made = []

    class Peer:
        def __init__(self, spec):
            made.append(spec)
            self.action_space = gym.vector.utils.batch_space(gym.spaces.Discrete(2), spec.num_envs)
            self.steps = 0

        def reset(self, seed=None):
            return None

        def step(self, actions):
            assert actions.shape == (3,)
            self.steps += 1

        def close(self):
            pass

    monkeypatch.setattr(bench.measure, "plugin_peers", lambda: {"sync-direct": ("sync", Peer)})
    results = bench.run_bench("CartPole-v1", ["sync-direct"], [3], steps=10, repeats=2, isolate=False)
    assert [(r.backend, r.num_envs) for r in results] == [("sync-direct", 3)] and results[
        0
    ].steps_per_second > 0
    assert made[0].backend == "sync" and made[0].num_envs == 3 and made[0].seed == 0


def test_pool_choice_says_workers_their_envs_and_inline():
    with torchwm.make_vec(
        "CartPole-v1",
        3,
        backend="subproc",
        backend_kwargs={"num_workers": 2, "inline": True, "context": "fork"},
    ) as envs:
        assert bench.pool_choice(envs) == {
            "workers": 2,
            "envs_per_worker": [2, 1],
            "inline": True,
            "choice": None,
        }
    with torchwm.make_vec("CartPole-v1", 2, backend="sync") as envs:
        assert bench.pool_choice(envs) is None  # no pool


def test_the_parents_part_is_the_step_less_its_waits_for_workers():
    from torchwm.bench.measure import ParentTime

    class Group:
        def wait(self, busy, timeout, need_all):
            time.sleep(0.01)  # the workers' part
            return True

    class Stepper:
        group = Group()

    class Envs:
        _stepper = Stepper()

    envs = Envs()
    parent = ParentTime(envs)
    waited, began = parent.waited, time.perf_counter()
    for _ in range(5):
        spin = time.perf_counter()
        while time.perf_counter() - spin < 0.002:  # the parent's own part
            pass
        envs._stepper.group.wait([], None, True)
    parent.add(time.perf_counter() - began, parent.waited - waited)
    own, whole = parent.own / 5, parent.elapsed / 5
    # Upper bound from the waits, not from the clock: on a loaded machine the spin loop itself may be
    # descheduled, which makes the parent's own part longer but never its waits shorter.
    assert 0.002 <= own <= whole - 0.01 and parent.waited - waited >= 5 * 0.01
    assert parent.describe(5) == f"parent {own * 1e6:,.0f} µs of {whole * 1e6:,.0f} µs a step"
