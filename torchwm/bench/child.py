"""One measurement in a child process of its own, so that one backend's processes and memory never weigh on
the next, and the PSS of that child's whole process tree can be read.

The parent's side is `Child`, which starts ``python -m torchwm.bench --serve JOB``; the child's side is
`serve`, which builds a `torchwm.bench.measure.Runner` and answers one command a line.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from typing import Any

from torchwm.bench.measure import Runner, process_tree_pss_mb
from torchwm.command_line import EXIT_FAILED, EXIT_USAGE

# How long a child that stopped answering may take to exit before it is killed.
EXIT_SECONDS = 60
# How long the child may go without a line on its stdout (building, or one repeat of ``run``) before
# it is taken as stuck and killed: a bench never hangs.
ANSWER_SECONDS = 900.0


class BenchChildError(RuntimeError):
    """A measuring child failed; the first line of the message is the child's error, then its stderr.

    Attributes:
        input_error: the child failed while building with an error that means bad input (an option
            value a backend refuses: ValueError, TypeError, MemoryError or a torchwm input error), not a
            failure.
        unsupported: the backend refused to build the stack (`UnsupportedStackError`); ``reason`` says why.
        exit_status: the status of ``torchwm bench`` failing with it (`torchwm.command_line.status_of`):
            2 for bad input, else 1.
    """

    INPUT_ERRORS = (
        "ValueError",
        "TypeError",
        "ConfigError",
        "UnknownNameError",
        "UnsupportedStackError",
        "MemoryError",  # an option asking for more memory than the machine has
    )
    UNSUPPORTED = ("UnsupportedStackError", "DynamicShapeError")

    def __init__(self, job: dict[str, Any], stderr: str, building: bool) -> None:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        last = lines[-1].strip() if lines else "it exited without a message"
        kind, _, reason = last.partition(":")
        kind = kind.rpartition(".")[2]
        self.input_error = building and kind in self.INPUT_ERRORS
        self.unsupported = building and kind in self.UNSUPPORTED
        self.exit_status = EXIT_USAGE if self.input_error else EXIT_FAILED
        self.reason = reason.strip() or last
        super().__init__(
            f"measuring {job['backend']} x {job['num_envs']} on {job['env_id']} failed: {last}\n"
            f"{stderr[-3000:]}"
        )


class Child:
    """A child process serving one `Runner` (``python -m torchwm.bench --serve JOB``), line by line."""

    def __init__(self, job: dict[str, Any], answer_seconds: float = ANSWER_SECONDS) -> None:
        self.job = job
        self.answer_seconds = answer_seconds
        # -P as this process was started: without it ``-m`` puts the current folder first on the child's path,
        # and a bench of another checkout (``PYTHONPATH=tree python -P -m torchwm.bench``) would measure the
        # torchwm of the folder it was started in.
        safe_path = ["-P"] if getattr(sys.flags, "safe_path", False) else []
        self.process = subprocess.Popen(
            [sys.executable, *safe_path, "-m", "torchwm.bench", "--serve", json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert (
            self.process.stdin is not None
            and self.process.stdout is not None
            and self.process.stderr is not None
        )
        self.stdin = self.process.stdin
        # Both pipes are read by threads: a wait on stdout can then have a deadline, and a child that
        # writes much to stderr never blocks on a full pipe.
        self._lines: queue.Queue[str] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read_lines, args=(self.process.stdout,), daemon=True).start()
        self._stderr_reader = threading.Thread(
            target=self._stderr.extend, args=(self.process.stderr,), daemon=True
        )
        self._stderr_reader.start()

    def _read_lines(self, stdout: Any) -> None:
        for line in stdout:
            self._lines.put(line)
        self._lines.put("")  # the end of the child's output

    def _line(self, building: bool = False) -> str:
        try:
            line = self._lines.get(timeout=self.answer_seconds)
        except queue.Empty:
            self.process.kill()
            self.process.wait(timeout=EXIT_SECONDS)
            raise BenchChildError(
                self.job,
                self._stderr_text()
                + f"\nTimeoutError: the measuring child said nothing for {self.answer_seconds:g} s and was "
                f"killed",
                building,
            ) from None
        if not line:
            self.process.wait(timeout=EXIT_SECONDS)
            raise BenchChildError(self.job, self._stderr_text(), building)
        return line.strip()

    def _stderr_text(self) -> str:
        """What the child wrote to stderr (once it has exited: all of it, unless a process it started
        still holds the pipe)."""
        self._stderr_reader.join(timeout=5)
        return "".join(self._stderr)

    def wait_ready(self) -> None:
        while self._line(building=True) != "ready":
            pass

    def ask(self, command: str) -> str:
        self.stdin.write(command + "\n")
        self.stdin.flush()
        while True:
            # Answers start with "= ": envs may print to the same stdout (ALE's banner does).
            line = self._line()
            if line == "=" or line.startswith("= "):  # "=" alone: an empty answer (the line is stripped)
                return line[2:]

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.stdin.write("quit\n")
                self.stdin.flush()
                self.process.wait(timeout=EXIT_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def serve(job: dict[str, Any]) -> None:
    """The child side of `Child`: build, say ``ready``, answer ``run <steps>``, ``memory``, ``note``,
    ``shape``, ``pool``, ``quit``."""
    runner = Runner(**job)
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            command, *args = line.split()
            if command == "run":
                print("=", runner.sample(int(args[0])), flush=True)
            elif command == "memory":
                print("=", process_tree_pss_mb(), flush=True)
            elif command == "note":
                print("=", runner.note(), flush=True)
            elif command == "shape":
                print("=", json.dumps(runner.obs_shape), flush=True)
            elif command == "pool":
                print("=", json.dumps(runner.pool()), flush=True)
            elif command == "quit":
                break
    finally:
        runner.close()
