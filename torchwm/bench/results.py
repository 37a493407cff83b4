"""What a measurement gives (`BenchResult`), the ratios to a baseline and the table ``torchwm bench``
prints."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BenchResult:
    """One (env, backend, num_envs) measurement.

    Attributes:
        steps_per_second: env steps per second (batched steps x num_envs / s), the median of ``samples``.
        samples: steps/s of each repeat.
        pss_mb: proportional set size of the process tree (the measuring child and its descendants), MB.
        ratio: steps/s over the baseline's at the same env and num_envs (set by `add_ratios`).
        note: what the backend chose from what it measured (shmem: its ``worker_choice`` and ``wait_plan``),
        or "".
        obs_shape: the shape of the observation batch its first reset returned (None for the bounds
            ``ceiling`` and ``ale-emulator``, and for observations that are no array).
        skipped: why it was not measured (it cannot build the stack), or "" (``steps_per_second`` is then
        NaN).
        agents_per_env: for a multi-agent setup (the agents layout), the agents of each env: agent steps per
            second are ``steps_per_second`` times it; None for single-agent envs.
        pool: for a worker pool (``subproc``, ``shmem``, a plugin's pool), what it chose
            (`torchwm.bench.measure.pool_choice`: ``workers``, ``envs_per_worker``, ``inline``, ``choice``);
            None for any other backend.
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
    pool: dict[str, Any] | None = None
    agents_per_env: int | None = None


def add_ratios(results: list[BenchResult], baseline: str) -> list[BenchResult]:
    """Set ``ratio`` of each result against ``baseline`` at the same env and num_envs (None without one)."""
    base = {
        (r.env_id, r.num_envs): r.steps_per_second for r in results if r.backend == baseline and not r.skipped
    }
    for r in results:
        reference = base.get((r.env_id, r.num_envs))
        r.ratio = r.steps_per_second / reference if reference and not r.skipped else None
    return results


def format_table(results: list[BenchResult], baseline: str) -> str:
    """A plain-text table: env, num_envs, backend, steps/s, ratio to ``baseline``, PSS, and the spread of
    the repeats (`spread`).

    Under the table: what each backend chose from what it measured, the backends not measured and
    why, and last, once, the advice some of those measurements gave (``backend='sync' would be faster``).
    """
    add_ratios(results, baseline)
    measured = [r for r in results if not r.skipped]
    width = max([12] + [len(r.backend) for r in measured])
    agents = any(r.agents_per_env for r in measured)  # a multi-agent setup: agent steps/s too
    header = (
        f"{'env':<24} {'envs':>5} {'backend':<{width}} {'steps/s':>12} "
        + (f"{'agent steps/s':>14} " if agents else "")
        + f"{'x ' + baseline:>14} {'PSS MB':>8} {'repeats':>8}"
    )
    lines = [header, "-" * len(header)]
    for r in measured:
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        pss = f"{r.pss_mb:.0f}" if r.pss_mb is not None else "-"
        per_agent = f"{r.steps_per_second * r.agents_per_env:>14,.0f} " if r.agents_per_env else f"{'-':>14} "
        lines.append(
            f"{r.env_id:<24} {r.num_envs:>5} {r.backend:<{width}} {r.steps_per_second:>12,.0f} "
            + (per_agent if agents else "")
            + f"{ratio:>14} {pss:>8} {spread(r):>8}"
        )
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


def spread(result: BenchResult) -> str:
    """How far the repeats lay from each other: half their range, as a share of the median (``±4%``);
    "-" for one repeat. A ratio between two backends that moves less than this is noise."""
    if len(result.samples) < 2 or not result.steps_per_second:
        return "-"
    half_range = (max(result.samples) - min(result.samples)) / 2
    return f"±{half_range / result.steps_per_second:.0%}"


def split_advice(note: str) -> tuple[str, list[str]]:
    """A backend's note without its advice clauses (``...; fewer workers or backend='sync' would be faster``),
    and those clauses: the table says each once, after every row and note."""
    advice = re.findall(r"; ([^;]*would be faster)", note)
    for text in advice:
        note = note.replace(f"; {text}", "")
    return note, advice
