"""torchwm.vector.transports.start_methods: how a worker process starts (the start methods, the
forkserver's preload)."""

from __future__ import annotations

import multiprocessing

from torchwm.vector.transports import processes, start_methods


def test_every_start_method_is_one_multiprocessing_has_and_the_default_is_one():
    assert set(start_methods.START_METHODS) <= set(multiprocessing.get_all_start_methods())
    assert start_methods.DEFAULT_START_METHOD in start_methods.START_METHODS


def test_the_preload_holds_what_a_worker_unpickles_its_process_from():
    # The worker's process object and its target are unpickled by reference to these modules: the
    # server imports them once, so that no worker does.
    assert "torchwm.vector.transports.start_methods" in start_methods.FORKSERVER_PRELOAD
    assert "torchwm.vector.transports.worker_process" in start_methods.FORKSERVER_PRELOAD


def test_the_preload_list_the_slow_start_note_named_before_is_the_one_the_server_imports():
    # The note told users to add modules to processes.FORKSERVER_PRELOAD; an append through that path
    # must still reach the server.
    assert processes.FORKSERVER_PRELOAD is start_methods.FORKSERVER_PRELOAD
    note = processes.slow_start_text("shmem", 2.5, ["numpy"], "forkserver")
    assert "torchwm.vector.transports.start_methods.FORKSERVER_PRELOAD" in note


def test_atari_specs_preload_the_emulator_and_opencv():
    assert {"ale_py", "cv2"} <= set(start_methods.FAMILY_PRELOAD["atari"])
