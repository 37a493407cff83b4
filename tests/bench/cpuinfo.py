"""The first processor of /proc/cpuinfo, read without torchwm: what `torchwm.bench.machine` and the
JSON of ``torchwm bench`` are compared with."""

import pytest


def proc_cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo, read here without torchwm."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo on this system")
    first = text.split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}
