"""How a worker process starts under each start method: the methods a process backend accepts, what the
forkserver imports once for every worker, and a forkserver start that does not run the main module again.

Workers under ``forkserver`` (the default) start without running the main module again
(`ForkServerWorkerProcess`), so a script needs no ``if __name__ == "__main__":`` guard, as under
``fork``; ``spawn`` runs it again, as it does for any multiprocessing child. The server imports
`FORKSERVER_PRELOAD` (and an env family's `FAMILY_PRELOAD`) once, before it forks any worker;
the last module of that list, `torchwm.vector.transports.forkserver_preload`, loads torchwm's plugin
modules there. The parent's end of a worker, which picks the start method and starts the process, is
`torchwm.vector.transports.processes`.
"""

from __future__ import annotations

import io
import os
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from typing import Any

START_METHODS = ("fork", "forkserver", "spawn")
# forkserver: safe with threads in the parent (fork is not), much faster to start than spawn, and
# children fork from a small server process, so they do not copy the parent's memory.
DEFAULT_START_METHOD = "forkserver"
# Modules the forkserver imports once and every worker shares: those a worker unpickles its process object
# (`ForkServerWorkerProcess`), its target (`torchwm.vector.transports.worker_process.worker_main`) and its
# transport's serve loop from. A program whose env factories import a heavy module may add it before its
# first env starts (the test suite adds pytest).
FORKSERVER_PRELOAD = [
    "torchwm.vector.transports.start_methods",
    "torchwm.vector.transports.worker_process",
    "torchwm.vector.transports.processes",
    "torchwm.vector.transports.pipe",
    "torchwm.vector.transports.shared_memory",
    "gymnasium",
    "numpy",
    "cloudpickle",
    "torchwm.vector.transports.forkserver_preload",  # the plugin registries, loaded once
]
# What the workers of an env family import beyond that (`ProcessGroup` adds them for a spec of the family):
# for Atari the emulator, OpenCV (both Atari stacks resize with it) and the fused Atari env, which together
# took most of a worker's start when each worker imported them.
FAMILY_PRELOAD = {"atari": ["ale_py", "cv2", "torchwm.wrappers.atari_fused"]}

# Keys of multiprocessing's preparation data that make a child run the parent's main module again.
_MAIN_MODULE_KEYS = ("init_main_from_path", "init_main_from_name")


class _ForkServerPopen(popen_forkserver.Popen):
    """The forkserver start of a process, without running the parent's main module in the child.

    multiprocessing prepares each forkserver or spawn child with `spawn.get_preparation_data`, which
    names the parent's main script (``init_main_from_path``) or module (``init_main_from_name``); the
    child runs it again as ``__mp_main__`` so that objects pickled by reference from ``__main__``
    resolve there. A script without an ``if __name__ == "__main__":`` guard then builds its vector env
    again inside every worker and fails. A torchwm worker needs nothing from ``__main__``: its target
    is `worker_main` and its payload is cloudpickled (functions and classes of ``__main__`` travel by
    value). So these two keys are left out, for torchwm's workers only and without changing any global
    state; the rest is the standard library's ``Popen._launch`` unchanged (Python 3.10-3.13).
    """

    def _launch(self, process_obj: Any) -> None:
        prep_data = {
            key: value
            for key, value in spawn.get_preparation_data(process_obj._name).items()
            if key not in _MAIN_MODULE_KEYS
        }
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        # As in the standard library: a duplicate of the data pipe's write end is the sentinel of the
        # parent for the child.
        _parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class ForkServerWorkerProcess(mp_context.ForkServerProcess):
    """A forkserver process that does not run the main module again (see `_ForkServerPopen`)."""

    @staticmethod
    def _Popen(process_obj: Any) -> _ForkServerPopen:
        return _ForkServerPopen(process_obj)
