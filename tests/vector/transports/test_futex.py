"""Sleeping on a word of shared memory (`torchwm.vector.transports.futex`): a wait that returns at once when
the word already changed, sleeps to its deadline when nobody rings, and ends early on a ring from another
thread (the GIL is released while it sleeps)."""

from __future__ import annotations

import platform
import sys
import threading
import time

import numpy as np
import pytest

from torchwm.vector.transports import futex
from torchwm.vector.transports.futex import FUTEX_AVAILABLE, futex_wait, futex_wake

ON_LINUX = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")


def word(value: int = 0) -> tuple[np.ndarray, int]:
    """An int32 and its address, as a shared block's futex word."""
    array = np.full(1, value, dtype=np.int32)
    return array, array.ctypes.data


def test_futexes_are_used_on_linux():
    # Elsewhere the waits fall back to short sleeps (slower, still correct): on Linux that would be a bug.
    assert FUTEX_AVAILABLE == ON_LINUX


def test_a_wait_returns_at_once_when_the_word_no_longer_holds_the_value():
    array, address = word(1)
    began = time.monotonic()
    futex_wait(address, 0, 5.0)  # the ring came before the sleep: it must not be lost
    assert time.monotonic() - began < 1.0


@pytest.mark.skipif(not ON_LINUX, reason="the fallback sleeps a tenth of a millisecond by design")
def test_a_wait_nobody_rings_ends_at_its_timeout():
    array, address = word(0)
    began = time.monotonic()
    futex_wait(address, 0, 0.3)
    assert 0.25 <= time.monotonic() - began < 3.0


@pytest.mark.skipif(not ON_LINUX, reason="the fallback sleeps a tenth of a millisecond by design")
def test_a_ring_from_another_thread_ends_the_wait_long_before_its_timeout():
    array, address = word(0)
    woke_after = []

    def sleeper():
        began = time.monotonic()
        while array[0] == 0 and time.monotonic() - began < 20:
            futex_wait(address, 0, 10.0)
        woke_after.append(time.monotonic() - began)

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.2)  # the sleeper is asleep (or about to be: then its wait returns at once)
    array[0] = 1
    futex_wake(address)
    thread.join(30)
    assert not thread.is_alive() and woke_after and woke_after[0] < 5.0


def test_without_futexes_a_wait_is_a_short_sleep_and_a_wake_does_nothing(monkeypatch):
    monkeypatch.setattr(futex, "_syscall", None)
    array, address = word(0)
    began = time.monotonic()
    futex_wait(address, 0, 10.0)  # at most FUTEX_FALLBACK_SLEEP_SECONDS: the caller checks again
    futex_wake(address)
    assert time.monotonic() - began < 1.0 and array[0] == 0
