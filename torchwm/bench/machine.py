"""What a measurement ran on: the CPU (model, family, the flags the Atari kernel picks its path by), the
cores, the OS, the Atari kernel path, the versions and the date.

`bench_info` is what ``torchwm bench --json`` records beside the figures and the plot's subtitle says;
`describe_machine` is the lines ``torchwm bench`` prints under its table, so that figures from two
machines can be compared. The same CPU model name covers CPUs of different families (an EPYC of
family 25 has AVX2 only, one of family 26 also AVX-512), hence the family and the flags.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
from collections.abc import Sequence
from typing import Any

# The packages whose versions a result depends on, recorded in --json and in the plot.
VERSIONED = ("torchwm", "gymnasium", "ale-py", "numpy")
# The CPU flags that choose a path of the fused Atari env's kernel (torchwm.native).
CPU_FLAGS = ("avx2", "avx512vbmi")
CPUINFO = "/proc/cpuinfo"


def cpu_info(path: str | os.PathLike[str] = CPUINFO) -> dict[str, Any]:
    """The CPU's model name, family, model number and `CPU_FLAGS`, from ``path`` (Linux's /proc/cpuinfo,
    its first processor); where that file is missing, what `platform` says (model and family, flags None:
    not known)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                key, sep, value = line.partition(":")
                key = key.strip()
                if sep and key in ("model name", "cpu family", "model", "flags") and key not in fields:
                    fields[key] = value.strip()
    except OSError:
        pass
    family, model_number = fields.get("cpu family"), fields.get("model")
    if family is None:
        # Windows and some BSDs: "Intel64 Family 6 Model 158 Stepping 10, GenuineIntel".
        found = re.search(r"Family (\d+) Model (\d+)", platform.processor())
        if found:
            family, model_number = found.groups()
    flags = set(fields["flags"].split()) if "flags" in fields else None
    return {
        "cpu_model": fields.get("model name") or platform.processor() or platform.machine(),
        "cpu_family": family,
        "cpu_model_number": model_number,
        "cpu_flags": None if flags is None else {flag: flag in flags for flag in CPU_FLAGS},
    }


def machine_info() -> dict[str, Any]:
    """The machine a measurement ran on: cores (all, and those this process may use), `cpu_info`, OS."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count() or 1
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        **cpu_info(),
        "system": platform.platform(terse=True),
    }


def atari_kernel() -> str:
    """The path the fused Atari env takes after the emulator here (`torchwm.native.kernel_status`)."""
    from torchwm.atari_kernel import kernel_status

    return kernel_status()


def versions(backends: Sequence[str] = ()) -> dict[str, str | None]:
    """Versions of torchwm, Gymnasium, ale-py, NumPy, Python, and the plugins of ``backends`` measured."""
    from torchwm.bench.measure import plugin_peers
    from torchwm.plugins import registry

    found: dict[str, str | None] = {}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    found["python"] = platform.python_version()
    for backend in backends:
        owner = plugin_peers().get(backend, (backend, None))[0]
        if owner in registry("backend"):
            entry = registry("backend").get(owner)
            if entry.distribution and entry.distribution != "torchwm":
                found[entry.distribution] = entry.version
    return found


def bench_info(settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a result depends on besides the code: date, machine, Atari kernel path, versions and the
    run's settings."""
    settings = dict(settings or {})
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "atari_kernel": atari_kernel(),
        "versions": versions(settings.get("backends", ())),
        "settings": settings,
    }


def describe_cpu(machine: dict[str, Any]) -> str:
    """``"2 cores, AMD EPYC 7B13 (family 25, model 1; avx2, no avx512vbmi)"``: the cores and the CPU."""
    cores = machine["cores"]
    cpus = (
        f"{machine['usable_cores']} of {cores} cores"
        if machine["usable_cores"] != cores
        else f"{cores} cores"
    )
    details = []
    if machine.get("cpu_family"):
        details.append(f"family {machine['cpu_family']}, model {machine['cpu_model_number']}")
    flags = machine.get("cpu_flags")
    if flags is not None:
        details.append(", ".join(name if has else f"no {name}" for name, has in flags.items()))
    return f"{cpus}, {machine['cpu_model']}" + (f" ({'; '.join(details)})" if details else "")


def describe_machine(info: dict[str, Any]) -> str:
    """What ran, as ``torchwm bench`` prints it under its table: the CPU and the Atari kernel path."""
    return f"machine: {describe_cpu(info['machine'])}\nAtari kernel: {info['atari_kernel']}"
