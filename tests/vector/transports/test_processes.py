"""What both process transports share (`torchwm.vector.transports.processes`): the checks before any
worker starts (factories that pickle), a worker slow to import a package named once, and a Ctrl-C during
a worker's start held until the start ends."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import threading
import time

import gymnasium as gym
import pytest
from support.processes import leaked_segments

import torchwm

BACKENDS = ["subproc", "shmem"]


def _no_new_children_or_segments(before):
    assert set(multiprocessing.active_children()) <= before
    assert leaked_segments() == []


def test_a_worker_slow_to_import_a_package_is_named_once(tmp_path, monkeypatch, caplog):
    # A factory whose module imports something heavy (torch, for one) makes each forkserver worker import
    # it anew: torchwm says which package, and what avoids it, on its logger.
    from torchwm.vector.transports import processes

    (tmp_path / "slow_to_import.py").write_text(
        "import time\ntime.sleep(0.6)\nimport gymnasium as gym\n\n"
        "def make():\n    return gym.make('CartPole-v1')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(processes, "SLOW_START_SECONDS", 0.5)
    monkeypatch.setattr(processes, "_slow_start_noted", False)
    import slow_to_import

    with caplog.at_level("WARNING", logger="torchwm"):
        with torchwm.make_vec_from_fns(
            [slow_to_import.make] * 2,
            backend="shmem",
            backend_kwargs={"context": "forkserver", "num_workers": 2},
        ):
            pass
    notes = [record.getMessage() for record in caplog.records if "slow_to_import" in record.getMessage()]
    assert len(notes) == 1  # once, not once per worker
    assert re.search(r"importing slow_to_import.*'forkserver'.*'context': 'fork'", notes[0])


def test_the_slow_start_note_is_a_log_record_a_strict_suite_does_not_fail_on(monkeypatch, caplog):
    # TorchRL's suite turns every warning into an error: a note on start-up speed must not stop it.
    import warnings

    from torchwm.vector.transports import processes
    from torchwm.vector.transports.worker_process import Ready

    ready = Ready(None, build_seconds=2.7, imported=("numpy",))
    monkeypatch.setattr(processes, "_slow_start_noted", False)
    with warnings.catch_warnings(), caplog.at_level("WARNING", logger="torchwm"):
        warnings.simplefilter("error")
        processes.note_slow_start(ready, "forkserver", "subproc")
    (record,) = [record for record in caplog.records if "to build its envs" in record.getMessage()]
    assert record.name == "torchwm" and record.levelname == "WARNING"
    assert "backend_kwargs={'context': 'fork'}" in record.getMessage()  # Python's words outside the CLI
    assert "Pass --set backends.subproc.context=fork" in record.command_line


def test_a_ctrl_c_during_a_workers_start_comes_after_it(monkeypatch):
    from torchwm.vector.transports.processes import ctrl_c_after

    done = []
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's, whatever this run had
    try:
        with pytest.raises(KeyboardInterrupt):
            with ctrl_c_after():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the signal is handled here, and held
                done.append("the start ended")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert done == ["the start ended"]
    # A handler that is not Python's (an embedding program's) is left alone: it could not be put back.
    monkeypatch.setattr(signal, "getsignal", lambda signum: None)
    installed = []
    monkeypatch.setattr(signal, "signal", lambda *args: installed.append(args))
    with ctrl_c_after():
        pass
    assert installed == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_unpicklable_factory_is_named_at_construction(backend):
    lock = threading.Lock()

    def factory_with_a_lock():
        assert lock is not None
        return gym.make("CartPole-v1")

    before = set(multiprocessing.active_children())
    with pytest.raises(TypeError, match="factory_with_a_lock cannot be pickled.*module-level function"):
        torchwm.TorchVectorizedEnv(factory_with_a_lock, num_workers=2, backend=backend)
    _no_new_children_or_segments(before)
