"""What both process transports share (`torchwm.vector.transports.processes`): the checks before any
worker starts (factories that pickle), a worker slow to import a package named once, and a Ctrl-C during
a worker's start held until the start ends."""

from __future__ import annotations

import multiprocessing
import os
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


def test_a_worker_slow_to_import_a_package_is_named_once(tmp_path, monkeypatch):
    # A factory whose module imports something heavy (torch, for one) makes each forkserver worker import
    # it anew: torchwm says which package, and what avoids it.
    from torchwm.vector.transports import processes

    (tmp_path / "slow_to_import.py").write_text(
        "import time\ntime.sleep(0.6)\nimport gymnasium as gym\n\n"
        "def make():\n    return gym.make('CartPole-v1')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(processes, "SLOW_START_SECONDS", 0.5)
    monkeypatch.setattr(processes, "_slow_start_noted", False)
    import slow_to_import

    from torchwm.errors import SlowStartWarning

    with pytest.warns(SlowStartWarning, match=r"importing slow_to_import.*'context': 'fork'") as noted:
        with torchwm.make_vec_from_fns(
            [slow_to_import.make] * 2,
            backend="shmem",
            backend_kwargs={"context": "forkserver", "num_workers": 2},
        ):
            pass
    assert sum("slow_to_import" in str(w.message) for w in noted) == 1  # once, not once per worker
    (note,) = [w.message for w in noted if "slow_to_import" in str(w.message)]
    # A UserWarning users can filter, not the RuntimeWarning TorchRL's tests turn into errors.
    assert isinstance(note, UserWarning) and not isinstance(note, RuntimeWarning)
    assert (
        note.backend == "shmem" and note.start_method == "forkserver" and note.imported[0] == "slow_to_import"
    )


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
