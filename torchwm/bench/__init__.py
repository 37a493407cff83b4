"""Benchmark torchwm backends beside their peers, on the same envs, in one run.

``torchwm bench --env CartPole-v1 --num-envs 32``, or ``torchwm bench
my_config.yaml`` for a config's whole setup (its stack, env kwargs, seed,
num_envs and backend options; the peers built over the same stack, and
those that cannot build it listed with the reason), the same command as
``python -m torchwm.bench ...``, steps each
backend for a fixed number of batched steps with pre-drawn random actions and
prints steps/s (the median of ``--repeats`` runs) and the ratio to a baseline.
The command (its arguments, the table and files it writes) is `torchwm.bench.command`, which the
command line (`torchwm.cli`) registers and ``python -m torchwm.bench`` runs; nothing here imports the
command line.
Every measurement runs in its own child process (``python -m torchwm.bench
--serve JOB``), so one backend's processes and memory never weigh on the next,
and the PSS of that child's whole process tree can be read from
``/proc/<pid>/smaps_rollup``. Names, options and the env id are checked
before any child starts; progress goes to stderr. Under the table it prints
what ran (the CPU model, family and flags, the Atari kernel path, and what
each worker pool chose); ``--json`` and ``--plot`` record the same, the
versions, the date and the repeats next to the figures.

What can be measured (``backends``):

- ``gym-sync``, ``gym-async``: Gymnasium's SyncVectorEnv and AsyncVectorEnv
  (``shared_memory=True``) over the same env and wrapper stack torchwm builds;
- ``ale-direct``: ale_py's AtariVectorEnv called directly (ALE ids only), with
  the arguments equivalent to the stack (torchwm's default Atari stack for an id);
- ``ceiling``: the cores times the steps/s of one env stepped alone in a loop,
  what perfect parallel scaling would give;
- ``ale-emulator``: the cores times the steps/s of one ALE emulator alone, doing
  only the ``frame_skip`` emulated frames of a step (no screen read, no
  preprocessing): the bound for any backend that emulates the same frames;
- any registered torchwm backend by name (``sync``, ``subproc``, ``shmem``, a plugin's),
  and the peers a backend plugin registers as ``bench_peers`` (``envpool-direct``).

The modules, one job each: `results` (`BenchResult`, the ratios and the table), `measure` (one backend
built and stepped in this process), `child` (one measurement in a child process), `run` (`run_bench`:
every backend at every size, and the checks made before), `machine` (what ran), `plotting` and `command`
(the ``torchwm bench`` command).
"""

from torchwm.bench.child import BenchChildError, Child, serve
from torchwm.bench.machine import bench_info, cpu_info, describe_machine, machine_info, versions
from torchwm.bench.measure import (
    PEERS,
    AleEmulator,
    Runner,
    measure_one,
    plugin_peers,
    pool_choice,
    process_tree_pss_mb,
    setup_spec,
    stack_refusal,
)
from torchwm.bench.plotting import plot, plot_figure
from torchwm.bench.results import BenchResult, add_ratios, format_table
from torchwm.bench.run import check_bench, config_specs, default_backends, run_bench

__all__ = [
    "PEERS",
    "AleEmulator",
    "BenchChildError",
    "BenchResult",
    "Child",
    "Runner",
    "add_ratios",
    "bench_info",
    "check_bench",
    "config_specs",
    "cpu_info",
    "default_backends",
    "describe_machine",
    "format_table",
    "machine_info",
    "measure_one",
    "plot",
    "plot_figure",
    "plugin_peers",
    "pool_choice",
    "process_tree_pss_mb",
    "run_bench",
    "serve",
    "setup_spec",
    "stack_refusal",
    "versions",
]
