"""torchwm.bench: the measurement API the CLI uses, the synthetic env, PSS, ratios, the table and the plot."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm import bench
from torchwm.envs import SYNTHETIC_ID


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


def test_the_table_ends_with_what_backends_chose():
    results = [
        bench.BenchResult("E", "a", 8, 100.0, [100.0]),
        bench.BenchResult("E", "shmem", 8, 250.0, [250.0], note="waits: the parent polls up to 20 µs"),
    ]
    assert (
        bench.format_table(results, baseline="a").splitlines()[-1]
        == "shmem x 8: waits: the parent polls up to 20 µs"
    )


def test_a_measuring_child_reports_the_shmem_wait_plan():
    results = bench.run_bench(
        "CartPole-v1", ["shmem"], [2], steps=200, repeats=1, backend_kwargs={"shmem": {"num_workers": 2}}
    )
    assert "(measured: a step of a worker's envs" in results[0].note


def test_ratios_and_table():
    results = [
        bench.BenchResult("E", "a", 8, 100.0, [100.0]),
        bench.BenchResult("E", "b", 8, 250.0, [250.0]),
        bench.BenchResult("E", "b", 16, 300.0, [300.0]),
    ]
    table = bench.format_table(results, baseline="a")
    assert [r.ratio for r in results] == [1.0, 2.5, None]
    lines = table.splitlines()
    assert "x a" in lines[0] and lines[3].split()[2:5] == ["b", "250", "2.50"]
    assert lines[4].split()[4] == "-"
    assert lines[0].split()[-1] == "repeats" and lines[3].split()[-1] == "-"  # one repeat: no spread


def test_the_table_gives_the_spread_of_the_repeats():
    results = [bench.BenchResult("E", "a", 8, 100.0, [96.0, 100.0, 104.0, 99.0])]
    assert bench.format_table(results, baseline="a").splitlines()[2].split()[-1] == "±4%"


def test_plot_writes_a_png(tmp_path):
    results = [
        bench.BenchResult("E", b, n, float(n * k), [float(n * k)])
        for k, b in ((1, "a"), (2, "b"))
        for n in (1, 4)
    ]
    path = tmp_path / "bench.png"
    bench.plot(results, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pss_of_the_tree_counts_children():
    alone = bench.process_tree_pss_mb()
    with torchwm.make_vec(
        "CartPole-v1", 2, backend="subproc", backend_kwargs={"num_workers": 2, "context": "spawn"}
    ):
        with_workers = bench.process_tree_pss_mb()
    assert alone > 0 and with_workers > alone + 5  # two fresh interpreters weigh several MB each


def test_synthetic_env_costs_cpu_and_has_the_atari_shape():
    env = gym.make(SYNTHETIC_ID, step_seconds=0.002, episode_length=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    before = time.thread_time()
    for _ in range(3):
        obs, reward, terminated, truncated, _ = env.step(1)
    used = time.thread_time() - before
    assert used >= 0.006  # a busy loop, not a sleep: this thread spent the CPU time of 3 steps
    assert truncated and not terminated and reward == 1.0


def test_synthetic_env_under_spawn_workers():
    with torchwm.make_vec(
        SYNTHETIC_ID,
        2,
        backend="shmem",
        seed=0,
        step_seconds=0.0001,
        backend_kwargs={"num_workers": 2, "context": "spawn"},
    ) as vec:
        obs, _ = vec.reset()
        obs, rewards, *_ = vec.step(np.array([1, 2]))
    assert obs.shape == (2, 4, 84, 84) and np.array_equal(rewards, [1.0, 1.0])


def test_unknown_backend_is_refused_before_measuring():
    with pytest.raises(torchwm.UnknownNameError, match="shmen"):
        bench.run_bench("CartPole-v1", ["shmen"], [2], isolate=False)


def test_main_prints_the_table(capsys):
    from torchwm.cli import main

    assert (
        main(
            [
                "bench",
                "--env",
                "CartPole-v1",
                "--backends",
                "sync,ceiling",
                "--num-envs",
                "2",
                "--steps",
                "20",
                "--repeats",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "x sync" in out and "ceiling" in out and "CartPole-v1" in out


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


def test_plot_is_honest_about_what_was_measured():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    results = [
        bench.BenchResult("E", b, n, float(n * k), [float(n * k) - 1, float(n * k), float(n * k) + 2])
        for k, b in ((100, "a"), (300, "b"))
        for n in (2, 4, 16)
    ]
    info = bench.bench_info({"steps": 50})
    fig = bench.plot_figure(results, info)
    ax = fig.axes[0]
    assert list(ax.get_xticks()) == [2, 4, 16]  # ticks at the sizes measured, nothing in between
    assert ax.get_ylim()[0] == 0  # y from zero, so ratios read true
    subtitle = fig._suptitle.get_text()
    machine, versions = info["machine"], info["versions"]
    for text in (
        f"{machine['cores']} cores",
        machine["cpu_model"],
        info["date"],
        "3 repeats of 50 batched steps",
        *(f"{name} {version}" for name, version in versions.items()),
    ):
        assert text in subtitle
    assert {"torchwm", "gymnasium", "ale-py", "numpy", "python"} <= set(versions)
    matplotlib.pyplot.close(fig)


def test_plot_at_one_size_draws_a_bar_per_backend_with_the_ratio_the_table_prints():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.patches import Rectangle

    results = [
        bench.BenchResult("E", "gym-sync", 8, 1000.0, [990.0, 1000.0, 1010.0]),
        bench.BenchResult("E", "shmem", 8, 1420.0, [1400.0, 1420.0, 1430.0]),
    ]
    table = bench.format_table(results, baseline="gym-sync")
    assert table.splitlines()[3].split()[4] == "1.42"  # what the run prints for shmem
    fig = bench.plot_figure(results, bench.bench_info({"steps": 50}), baseline="gym-sync")
    ax = fig.axes[0]
    bars = [patch for patch in ax.patches if isinstance(patch, Rectangle)]
    assert [bar.get_height() for bar in bars] == [1000.0, 1420.0]  # one bar per backend, not two dots
    assert [line for line in ax.get_lines() if line.get_marker() == "o"] == []  # no dots
    assert [label.get_text() for label in ax.get_xticklabels()] == ["gym-sync", "shmem"]
    written = [text.get_text() for text in ax.texts]
    assert written == ["1.00x (baseline)", "1.42x"]
    assert ax.get_ylim()[0] == 0
    matplotlib.pyplot.close(fig)
    # Without a baseline named, the first backend's, as torchwm bench takes it.
    fig = bench.plot_figure(results[::-1], bench.bench_info({"steps": 50}))
    assert [text.get_text() for text in fig.axes[0].texts] == ["1.00x (baseline)", "0.70x"]
    matplotlib.pyplot.close(fig)


def test_plot_at_several_sizes_keeps_a_line_per_backend():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.container import BarContainer

    results = [
        bench.BenchResult("E", b, n, float(n * k), [float(n * k)])
        for k, b in ((1, "a"), (2, "b"))
        for n in (1, 4)
    ]
    fig = bench.plot_figure(results, bench.bench_info({"steps": 50}), baseline="a")
    ax = fig.axes[0]
    lines = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [list(line.get_ydata()) for line in lines] == [[1.0, 4.0], [2.0, 8.0]]
    assert not any(isinstance(container, BarContainer) for container in ax.containers)
    matplotlib.pyplot.close(fig)


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


# -- what ran: the CPU, the Atari kernel path, the pool's choice ---------------------------------------------


def _proc_cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo, read here without torchwm."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this system")
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}


def test_cpu_info_is_proc_cpuinfos():
    fields = _proc_cpuinfo()
    cpu = bench.cpu_info()
    assert cpu["cpu_model"] == fields["model name"]
    assert cpu["cpu_family"] == fields["cpu family"] and cpu["cpu_model_number"] == fields["model"]
    flags = fields["flags"].split()
    assert cpu["cpu_flags"] == {"avx2": "avx2" in flags, "avx512vbmi": "avx512vbmi" in flags}


def test_cpu_info_reads_the_first_processor(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\ncpu family\t: 25\nmodel\t\t: 1\n"
        "flags\t\t: fpu sse2 avx avx2 avx512f\n\n"
        "processor\t: 1\nmodel name\t: Other CPU\ncpu family\t: 26\nmodel\t\t: 2\nflags\t\t: avx512vbmi\n"
    )
    assert bench.cpu_info(path) == {
        "cpu_model": "Some CPU",
        "cpu_family": "25",
        "cpu_model_number": "1",
        "cpu_flags": {"avx2": True, "avx512vbmi": False},
    }


def test_cpu_info_without_proc_cpuinfo_asks_platform(tmp_path, monkeypatch):
    monkeypatch.setattr("platform.processor", lambda: "Intel64 Family 6 Model 158 Stepping 10, GenuineIntel")
    cpu = bench.cpu_info(tmp_path / "missing")
    assert (cpu["cpu_family"], cpu["cpu_model_number"]) == ("6", "158")
    assert cpu["cpu_model"] == "Intel64 Family 6 Model 158 Stepping 10, GenuineIntel"
    assert cpu["cpu_flags"] is None  # not known: never a guessed False
    info = {"machine": {"cores": 2, "usable_cores": 2, **cpu}, "atari_kernel": "NumPy and OpenCV (x)"}
    assert bench.describe_machine(info).splitlines() == [
        "machine: 2 cores, Intel64 Family 6 Model 158 Stepping 10, GenuineIntel (family 6, model 158)",
        "Atari kernel: NumPy and OpenCV (x)",
    ]


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


def test_bench_prints_and_records_what_ran(tmp_path, capsys):
    from torchwm.atari_kernel import kernel_status
    from torchwm.cli import main

    data = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "--env",
                "CartPole-v1",
                "--backends",
                "sync,shmem,subproc",
                "--num-envs",
                "2",
                "--steps",
                "20",
                "--repeats",
                "1",
                "--no-progress",
                "--json",
                str(data),
                "--backend-kwargs",
                '{"subproc": {"num_workers": 2, "inline": true}}',
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    written = json.loads(data.read_text())
    fields = _proc_cpuinfo()
    machine = written["machine"]
    assert machine["cpu_family"] == fields["cpu family"] and machine["cpu_model"] == fields["model name"]
    assert machine["cpu_flags"]["avx2"] == ("avx2" in fields["flags"].split())
    assert machine["cpu_flags"]["avx512vbmi"] == ("avx512vbmi" in fields["flags"].split())
    assert written["atari_kernel"] == kernel_status()
    assert bench.describe_machine(written) in out  # what it printed is what it recorded
    assert f"{fields['model name']} (family {fields['cpu family']}, model {fields['model']}; " in out
    assert f"\nAtari kernel: {kernel_status()}\n" in out
    pools = {row["backend"]: row["pool"] for row in written["results"]}
    assert pools["sync"] is None
    assert pools["subproc"] == {"workers": 2, "envs_per_worker": [1, 1], "inline": True, "choice": None}
    # shmem with its split left unset measures it: the choice names the worker count it chose.
    shmem = pools["shmem"]
    assert sum(shmem["envs_per_worker"]) == 2 and len(shmem["envs_per_worker"]) == shmem["workers"]
    assert shmem["inline"] is False and shmem["choice"].startswith(f"{shmem['workers']} worker")


def test_a_measuring_child_that_stops_answering_is_killed_at_its_deadline():
    from torchwm.bench.child import BenchChildError, Child

    job = {"env_id": SYNTHETIC_ID, "backend": "sync", "num_envs": 1, "kwargs": {}, "spec": None}
    child = Child(job)
    try:
        child.wait_ready()
        child.answer_seconds = 2
        # 200000 steps of 400 us of CPU: minutes, far beyond the 2 s the child has to answer.
        with pytest.raises(BenchChildError, match="said nothing for 2 s and was killed"):
            child.ask("run 200000")
        assert child.process.poll() is not None  # killed, not left running
    finally:
        child.close()


@pytest.mark.skipif(sys.version_info < (3, 11), reason="python -P is new in Python 3.11")
def test_a_bench_started_with_minus_p_measures_its_own_torchwm_in_the_children(tmp_path):
    """``PYTHONPATH=tree python -P -m torchwm.bench`` from another checkout measures the tree's torchwm: the
    children are started with -P too, so the folder they start in does not come first on their path."""
    decoy = tmp_path / "torchwm"
    decoy.mkdir()
    (decoy / "__init__.py").write_text(
        "raise ImportError('the torchwm of the current folder was imported')\n"
    )
    tree = pathlib.Path(torchwm.__file__).parent.parent
    command = [sys.executable, "-P", "-m", "torchwm.bench", "--env", "CartPole-v1", "--num-envs", "2"]
    done = subprocess.run(
        [*command, "--steps", "20", "--repeats", "1", "--backends", "sync"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "current folder" not in done.stderr and "CartPole-v1" in done.stdout


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


def test_a_child_out_of_memory_while_building_is_bad_input_not_a_failure():
    from torchwm.bench.child import BenchChildError

    job = {"env_id": "CartPole-v1", "backend": "sync", "num_envs": 4096, "kwargs": {}, "spec": None}
    stderr = (
        "Traceback (most recent call last):\n  ...\nMemoryError: Unable to allocate 14.9 GiB for an array"
    )
    # torchwm bench exits 2 with the child's one line for it (status_of), as torchwm run does.
    assert BenchChildError(job, stderr, building=True).input_error
    assert not BenchChildError(job, stderr, building=False).input_error  # while measuring: a failure
