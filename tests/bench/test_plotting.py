"""`torchwm.bench.plotting`: the plot ``torchwm bench --plot`` writes: a line per backend over several
sizes, a bar per backend with its ratio at one size, and the machine and repeats it was measured with.
"""

from __future__ import annotations

import pytest

from torchwm import bench


def test_plot_writes_a_png(tmp_path):
    results = [
        bench.BenchResult("E", b, n, float(n * k), [float(n * k)])
        for k, b in ((1, "a"), (2, "b"))
        for n in (1, 4)
    ]
    path = tmp_path / "bench.png"
    bench.plot(results, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
