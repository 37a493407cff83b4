"""`torchwm.bench.results`: the ratios to the baseline and the table ``torchwm bench`` prints."""

from __future__ import annotations

from torchwm import bench


def test_bench_says_the_shmem_advice_once_after_the_table():
    from torchwm import bench

    advice = (
        "a worker's step is shorter than its hand-offs: fewer workers (num_workers) or backend='sync' "
        "would be faster"
    )
    note = (
        f"split: 2 workers (measured: ...); waits: the parent polls up to 20 µs (measured: a step 9 µs; "
        f"{advice})"
    )
    results = [
        bench.BenchResult("E", "shmem", 8, 100.0, [100.0], note=note),
        bench.BenchResult("E", "sync", 8, 200.0, [200.0]),
        bench.BenchResult("E", "shmem", 16, 150.0, [150.0], note=note),
        bench.BenchResult("E", "sync", 16, 300.0, [300.0]),
    ]
    lines = bench.format_table(results, baseline="sync").splitlines()
    assert sum("would be faster" in line for line in lines) == 1
    assert lines[-1] == f"note (shmem x 8, shmem x 16): {advice}"
    # Every row and every backend's own note comes before it.
    assert [line.split(":")[0] for line in lines[-3:-1]] == ["shmem x 8", "shmem x 16"]
    assert lines[-3].endswith("(measured: a step 9 µs)")


def test_the_table_ends_with_what_backends_chose():
    results = [
        bench.BenchResult("E", "a", 8, 100.0, [100.0]),
        bench.BenchResult("E", "shmem", 8, 250.0, [250.0], note="waits: the parent polls up to 20 µs"),
    ]
    assert (
        bench.format_table(results, baseline="a").splitlines()[-1]
        == "shmem x 8: waits: the parent polls up to 20 µs"
    )


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
