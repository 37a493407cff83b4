"""`torchwm.bench.run`: a bench run measures every backend at every size, in process or each in a child;
the default backends of an env id or a config; bad names and options refused before any child starts.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import torchwm
from torchwm import bench


def test_run_bench_in_process_measures_each_backend():
    results = bench.run_bench(
        "CartPole-v1",
        ["gym-sync", "shmem"],
        [2, 4],
        steps=30,
        repeats=3,
        backend_kwargs={"shmem": {"num_workers": 2, "context": "fork"}},
        measure_memory=True,
        isolate=False,
    )
    assert [(r.backend, r.num_envs) for r in results] == [
        ("gym-sync", 2),
        ("shmem", 2),
        ("gym-sync", 4),
        ("shmem", 4),
    ]
    for r in results:
        assert len(r.samples) == 3 and r.steps_per_second == float(np.median(r.samples)) > 0
        assert r.pss_mb is not None and r.pss_mb > 0
        # shmem says how its processes wait (still measuring after these few steps); gym-sync says nothing
        assert r.note.startswith("waits: the parent polls") if r.backend == "shmem" else r.note == ""
        if r.backend == "shmem":  # and the parent's own part of a step, within the whole step
            figures = re.findall(r"([\d,]+) µs", r.note.rsplit("; parent ", 1)[1])
            own, whole = (float(x.replace(",", "")) for x in figures)
            assert 0 < own <= whole


def test_a_measuring_child_reports_the_shmem_wait_plan():
    results = bench.run_bench(
        "CartPole-v1", ["shmem"], [2], steps=200, repeats=1, backend_kwargs={"shmem": {"num_workers": 2}}
    )
    assert "(measured: a step of a worker's envs" in results[0].note


def test_unknown_backend_is_refused_before_measuring():
    with pytest.raises(torchwm.UnknownNameError, match="shmen"):
        bench.run_bench("CartPole-v1", ["shmen"], [2], isolate=False)


def test_default_backends_include_the_peers_of_the_docs_ratios():
    cartpole = bench.default_backends("CartPole-v1")
    assert cartpole[:2] == ["gym-sync", "gym-async"] and {"sync", "subproc", "shmem"} <= set(cartpole)
    pong = bench.default_backends("ALE/Pong-v5")
    assert {"gym-sync", "gym-async", "ale-direct", "ale-emulator", "ale-native", "shmem"} <= set(pong)


@pytest.mark.parametrize(
    ("env_id", "backends", "kwargs", "message"),
    [
        ("ALE/Pnog-v5", ["sync"], None, "Did you mean 'ALE/Pong-v5'"),
        (
            "CartPole-v1",
            ["sync"],
            {"shmem": {"num_workers": 2}},
            r"backend_kwargs.shmem: 'shmem' is not measured",
        ),
        ("CartPole-v1", ["shmem"], {"shmem": {"num_worker": 2}}, r"did you mean 'num_workers'"),
        ("CartPole-v1", ["gym-async"], {"gym-async": {"contxt": "fork"}}, r"did you mean 'context'"),
    ],
)
def test_bad_names_and_options_are_refused_before_any_child_starts(
    monkeypatch, env_id, backends, kwargs, message
):
    monkeypatch.setattr(bench.run, "Child", None)  # starting a child would fail differently
    with pytest.raises(LookupError if "Pnog" in env_id else ValueError, match=message):
        bench.run_bench(env_id, backends, [2], backend_kwargs=kwargs)


def test_bench_default_backends_of_a_config_are_the_peers_that_can_build_it():
    import torchwm
    from torchwm import bench

    spec = torchwm.load_config({"id": "ALE/Breakout-v5", "backend": "subproc"})
    assert bench.default_backends(spec) == [
        "gym-sync",
        "gym-async",
        "ale-direct",
        "sync",
        "subproc",
        "shmem",
        "ale-native",
    ]
    resized = torchwm.load_config({"id": "ALE/Breakout-v5", "wrappers": ["atari_preprocessing", "pixels"]})
    assert bench.stack_refusal(resized, "ale-native") and bench.stack_refusal(resized, "ale-direct")
    assert bench.stack_refusal(resized, "gym-sync") is None and bench.stack_refusal(resized, "shmem") is None
