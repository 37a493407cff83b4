"""The machine's hand-off between two processes, measured by pinging a helper process through a word of
shared memory (`torchwm.vector.transports.worker_count` starts the helper, which runs `answer_pings`).

`ping` times round trips first while both sides poll, then while both sleep on a futex between pings, each
pinned to a core of its own, and halves their lower quartile: the machine's cost, not a moment's load.
"""

from __future__ import annotations

import mmap
import os
import statistics
import time
from multiprocessing.reduction import send_handle
from typing import Any

import numpy as np

from torchwm.vector.transports.futex import futex_wait, futex_wake
from torchwm.vector.transports.handoff import Handoff
from torchwm.vector.transports.processes import exit_reason

POLL_ROUNDS = 200  # pings while both sides poll
SLEEP_ROUNDS = 40  # pings while both sides sleep between them
PAUSE_BETWEEN_SLEEP_ROUNDS = 0.0002  # long enough for the other side to fall asleep
HANDOFF_DEADLINE_SECONDS = 5.0  # the whole hand-off measurement, the helper's start included
_PING, _PONG, _SLEEPING = 0, 1, 2  # the int32 words of the helper's block


def answer_pings(words: np.ndarray) -> None:
    """Copy ``ping`` to ``pong`` each time it changes, until it turns negative."""
    address = words.ctypes.data
    last, give_up = 0, time.monotonic() + HANDOFF_DEADLINE_SECONDS
    while time.monotonic() < give_up:
        ping = int(words[_PING])
        if ping == last:
            if words[_SLEEPING]:
                futex_wait(address + 4 * _PING, last, 0.01)
            else:
                os.sched_yield()
            continue
        if ping < 0:
            return
        last = words[_PONG] = ping
        if words[_SLEEPING]:
            futex_wake(address + 4 * _PONG)


def round_trips(words: np.ndarray, rounds: int, sleep: bool, helper: Any, give_up: float) -> list[float]:
    address = words.ctypes.data
    words[_SLEEPING] = int(sleep)
    times = []
    for _ in range(rounds):
        if sleep:
            time.sleep(PAUSE_BETWEEN_SLEEP_ROUNDS)
        ping = int(words[_PING]) + 1
        began = time.perf_counter()
        words[_PING] = ping
        if sleep:
            futex_wake(address + 4 * _PING)
        while (pong := int(words[_PONG])) != ping:
            if time.perf_counter() - began > 0.01 and (time.monotonic() > give_up or not helper.is_alive()):
                raise TimeoutError(f"the helper stopped answering pings ({exit_reason(helper.exitcode)})")
            if sleep:
                futex_wait(address + 4 * _PONG, pong, 0.01)
            else:
                os.sched_yield()
        times.append(time.perf_counter() - began)
    return times


def ping(helper: Any, conn: Any) -> Handoff:
    """The helper's ping round trips, halved (their lower quartile: the machine's cost, not a moment's load):
    first while both sides poll, then while both sleep.

    Both processes are pinned to a core each while they ping (this process gets its cores back after): a
    sleeping process is then always woken from the other core, as a sleeping parent is by a worker, where
    the scheduler would otherwise sometimes put both on one core and time a wake-up several times cheaper
    than the real one, from one run to the next."""
    give_up = time.monotonic() + HANDOFF_DEADLINE_SECONDS
    cores = os.sched_getaffinity(0)
    here, there = sorted(cores)[:2]
    fd = os.memfd_create("torchwm_handoff", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, 64)
        words = np.frombuffer(mmap.mmap(fd, 64), np.int32)  # unmapped with the last view of it
        send_handle(conn, fd, helper.pid)
    finally:
        os.close(fd)
    try:
        os.sched_setaffinity(helper.pid, {there})
        os.sched_setaffinity(0, {here})
        poll = round_trips(words, POLL_ROUNDS, False, helper, give_up)
        wake = round_trips(words, SLEEP_ROUNDS, True, helper, give_up)
    finally:
        os.sched_setaffinity(0, cores)
        words[_PING] = -1
        futex_wake(words.ctypes.data + 4 * _PING)
    return Handoff(statistics.quantiles(poll, n=4)[0] / 2, statistics.quantiles(wake, n=4)[0] / 2)
