"""The process helpers of tests/support that the fault tests of every backend lean on: a process that
ends while it is looked at has ended, and is never an error of the test; a script a test runs in a new
process imports them too."""

import os
import subprocess
import sys

import pytest
from support import processes


def test_a_running_process_runs_a_zombie_and_a_reaped_one_do_not():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    assert processes.process_running(child.pid)
    child.stdin.close()  # the child exits; unreaped, it is a zombie until wait()
    processes.wait_until_ended([child.pid], 30)
    assert os.path.exists(f"/proc/{child.pid}")  # still there, as a zombie: ended all the same
    child.wait(timeout=30)
    assert not processes.process_running(child.pid)


def test_a_process_that_ends_while_its_stat_is_read_has_ended(monkeypatch):
    def ended_meanwhile(path, *args, **kwargs):  # Linux's answer to a read of a reaped process's /proc file
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(processes, "open", ended_meanwhile, raising=False)
    assert not processes.process_running(1)
    assert processes.mapped_segments(1) == []
    processes.wait_until_ended([1], 0)


def test_wait_until_ended_names_the_processes_still_running():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(AssertionError, match=f"\\[{child.pid}\\] still run after 0.1 s"):
            processes.wait_until_ended(iter([child.pid]), 0.1)
    finally:
        child.kill()
        child.wait(timeout=30)


def test_a_script_run_in_a_new_process_imports_the_helpers(tmp_path):
    # Run from elsewhere, as the fault tests' scripts run: only PYTHONPATH can lead it to tests/support.
    script = tmp_path / "script.py"
    script.write_text(
        "from support.processes import process_running; import os; print(process_running(os.getpid()))"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
