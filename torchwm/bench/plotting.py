"""The plot of ``torchwm bench --plot``: for one env measured at several sizes, steps/s against num_envs,
one line per backend; at one size, a bar per backend with its ratio to the baseline written on it (the
figure the table prints). The machine below."""

from __future__ import annotations

import os
from typing import Any

from torchwm.bench.machine import bench_info, describe_cpu
from torchwm.bench.results import BenchResult, add_ratios


def plot(
    results: list[BenchResult],
    path: str | os.PathLike[str],
    info: dict[str, Any] | None = None,
    baseline: str | None = None,
) -> None:
    """Write `plot_figure` of ``results`` as a PNG (or any format matplotlib knows from the suffix)."""
    import matplotlib.pyplot as plt

    fig = plot_figure(results, info, baseline)
    fig.savefig(path)
    plt.close(fig)


def plot_figure(
    results: list[BenchResult], info: dict[str, Any] | None = None, baseline: str | None = None
) -> Any:
    """Steps/s of each backend, one panel per env side by side: a matplotlib Figure.

    An env measured at several sizes is a line per backend against num_envs (the x ticks are the measured
    sizes). An env measured at one size is a bar per backend, with its ratio to ``baseline`` (default: the
    first backend, as ``torchwm bench`` takes it) written on it as the table prints it (``1.42x``): lines
    through one point each would show neither who is faster nor by how much. The y axis starts at zero,
    each value is the median with the range of its repeats as an error bar, and a subtitle says the
    machine, the versions, the date and the repeats (``info`` as `bench_info` gives it; measured now when
    not given).
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
    if baseline is None and results:
        baseline = results[0].backend
    add_ratios(results, baseline or "")
    env_ids = list(dict.fromkeys(r.env_id for r in results))
    fig, axes = plt.subplots(1, len(env_ids), figsize=(max(9.0, 7.0 * len(env_ids)), 5.8), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids, strict=True):
        mine = [r for r in results if r.env_id == env_id]
        if len({r.num_envs for r in mine}) == 1:
            _bars(ax, mine, baseline or "")
        else:
            _lines(ax, mine)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("env steps per second (median; error bars: range of the repeats)")
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(_subtitle(results, info), fontsize="small")
    fig.tight_layout()
    return fig


def _repeat_range(results: list[BenchResult]) -> list[list[float]]:
    """How far below and above each median its repeats went, as matplotlib's ``yerr`` takes it."""
    medians = [r.steps_per_second for r in results]
    low = [m - min(r.samples or [m]) for r, m in zip(results, medians, strict=True)]
    high = [max(r.samples or [m]) - m for r, m in zip(results, medians, strict=True)]
    return [low, high]


def _lines(ax: Any, results: list[BenchResult]) -> None:
    env_id = results[0].env_id
    sizes = sorted({r.num_envs for r in results})
    for backend in dict.fromkeys(r.backend for r in results):
        mine = sorted((r for r in results if r.backend == backend), key=lambda r: r.num_envs)
        ax.errorbar(
            [r.num_envs for r in mine],
            [r.steps_per_second for r in mine],
            yerr=_repeat_range(mine),
            marker="o",
            capsize=3,
            label=backend,
        )
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(n) for n in sizes])
    ax.set_xlabel("num_envs (the sizes measured)")
    ax.set_title(f"{env_id}: throughput by backend")
    ax.legend(fontsize="small")


def _bars(ax: Any, results: list[BenchResult], baseline: str) -> None:
    env_id, num_envs = results[0].env_id, results[0].num_envs
    backends = [r.backend for r in results]
    bars = ax.bar(
        range(len(results)),
        [r.steps_per_second for r in results],
        yerr=_repeat_range(results),
        capsize=3,
        color=[f"C{i}" for i in range(len(results))],
    )
    ax.bar_label(bars, labels=[_ratio_label(r, baseline) for r in results], label_type="center")
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels(backends)
    ax.set_xlabel(f"backend ({num_envs} envs)")
    ax.set_title(f"{env_id}, {num_envs} envs: throughput by backend (on the bars: x {baseline})")


def _ratio_label(result: BenchResult, baseline: str) -> str:
    """The ratio to the baseline as the table prints it (``1.42x``), or nothing without a baseline figure."""
    if result.ratio is None:
        return ""
    return f"{result.ratio:.2f}x" + (" (baseline)" if result.backend == baseline else "")


def _subtitle(results: list[BenchResult], info: dict[str, Any]) -> str:
    machine, versions = info["machine"], info["versions"]
    repeats = sorted({len(r.samples) for r in results if r.samples})
    steps = info.get("settings", {}).get("steps")
    lines = [
        describe_cpu(machine),
        f"{machine['system']}, {info['date']}",
        ", ".join(f"{name} {version}" for name, version in versions.items()),
        (
            f"{'/'.join(map(str, repeats)) or '?'} {'repeat' if repeats == [1] else 'repeats'}"
            + (f" of {steps} batched steps" if steps else "")
            + " each, median shown"
        ),
    ]
    return "\n".join(lines)
