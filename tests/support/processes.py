"""What a backend left behind, seen from outside it: its processes, and torchwm's shared blocks in
``/dev/shm`` and in a process's mappings (Linux; each answers "none" elsewhere).

The fault tests of every backend (``shmem``'s and a plugin's that uses shared blocks, Ray's actors) end
with these: a worker that outlived ``close()`` or a block never freed fails the test that left it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from torchwm.vector.transports.shared_block import SEGMENT_PREFIX

DEADLINE = 60.0  # seconds `wait_until_ended` waits by default, generous for a loaded machine


def leaked_segments() -> list[str]:
    """Names of torchwm shared blocks in ``/dev/shm`` created by this process (torchwm itself leaves none
    there, even while running: its blocks have no path)."""
    prefix = f"{SEGMENT_PREFIX}{os.getpid()}_"
    try:
        return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))
    except FileNotFoundError:
        return []


def mapped_segments(pid: int | str = "self") -> list[str]:
    """Names of the torchwm shared blocks that process ``pid`` maps (Linux: ``/proc/<pid>/maps``; empty
    elsewhere), to see a block's memory freed once every process that mapped it let it go."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            lines = maps.read().splitlines()
    except (FileNotFoundError, ProcessLookupError):  # no /proc, or the process ended while we read
        return []
    names = {
        line.split("/memfd:", 1)[1].split(" ")[0] for line in lines if f"/memfd:{SEGMENT_PREFIX}" in line
    }
    return sorted(names)


def process_running(pid: int) -> bool:
    """Whether process ``pid`` runs (Linux: ``/proc/<pid>/stat``; False elsewhere). A zombie has ended:
    only its parent's bookkeeping is left. A process that ends while this reads has ended, not an error."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until_ended(pids: Iterable[int], seconds: float = DEADLINE) -> None:
    """Waits until no process of ``pids`` runs: a killed process, or one that a ``close()`` ended, may take a
    moment to go (Ray ends its actors after ``close()`` returns). `AssertionError` naming those still
    running after ``seconds``."""
    pids, deadline = list(pids), time.monotonic() + seconds
    while running := [pid for pid in pids if process_running(pid)]:
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {running} still run after {seconds:g} s")
        time.sleep(0.02)
