"""Running the ``torchwm`` command as a user does and reading what it prints, for the tests of the commands
(tests/cli, tests/bench, tests/test_command_line.py): `torchwm_cli` runs ``python -m torchwm ...`` in a new
process, `python_c` a snippet, `report_line` picks a line of ``torchwm run``'s report, and `BREAKOUT64` is
the config docs/cli.md calls breakout64.yaml, which ``check`` and ``bench`` are both tested on.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def torchwm_cli(*args, timeout=180, cwd=ROOT, env=None):
    return subprocess.run(
        [sys.executable, "-m", "torchwm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MPLBACKEND": "Agg", **(env or {})},
    )


def python_c(code, timeout=180, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )


def report_line(out, prefix):
    return next(line for line in out.splitlines() if line.startswith(prefix))


def refuses_huge_allocations():
    """Whether this kernel refuses an allocation beyond its memory at once (it does not overcommit), so
    that a command asked for one can be seen to say so instead of filling the memory."""
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() in ("0", "2")
    except OSError:
        return False


BREAKOUT64 = (
    "id: ALE/Breakout-v5\nnum_envs: 2\nseed: 3\nwrappers:\n  - name: atari_preprocessing\n"
    "    screen_size: 64\n  - name: frame_stack\n    stack_size: 2\n"
)
