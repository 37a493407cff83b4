"""The plot of ``torchwm bench --plot``: steps/s against num_envs, one line per backend, the machine below."""

from __future__ import annotations

import os
from typing import Any

from torchwm.bench.machine import bench_info, describe_cpu
from torchwm.bench.results import BenchResult


def plot(
    results: list[BenchResult], path: str | os.PathLike[str], info: dict[str, Any] | None = None
) -> None:
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
            mine = sorted(
                (r for r in results if r.env_id == env_id and r.backend == backend), key=lambda r: r.num_envs
            )
            medians = [r.steps_per_second for r in mine]
            low = [m - min(r.samples or [m]) for r, m in zip(mine, medians, strict=True)]
            high = [max(r.samples or [m]) - m for r, m in zip(mine, medians, strict=True)]
            ax.errorbar(
                [r.num_envs for r in mine], medians, yerr=[low, high], marker="o", capsize=3, label=backend
            )
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
