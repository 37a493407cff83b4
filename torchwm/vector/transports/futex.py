"""Sleeping on a 32-bit word of shared memory until another process changes it (Linux futexes).

A futex sleep uses no CPU and ends as soon as the other side rings (how soon
depends much on the machine), where a timed sleep would
either wake often or answer late. `futex_wait` returns at once if the word no
longer holds ``expected``, so a ring between the last check and the sleep is
never lost. Where futexes are unavailable (not Linux, or an unknown CPU), it
falls back to a short `time.sleep`. Used by the ``shmem`` transport
(`torchwm.vector.transports.shared_memory`) and by the hand-off measurement of
`torchwm.vector.transports.worker_count`.
"""

from __future__ import annotations

import ctypes
import platform
import sys
import time

_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT = 0
_FUTEX_WAKE = 1
FUTEX_FALLBACK_SLEEP_SECONDS = 0.0001


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load_syscall():
    if not sys.platform.startswith("linux") or _SYS_FUTEX is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long
    syscall.argtypes = [
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    return syscall


_syscall = _load_syscall()
FUTEX_AVAILABLE = _syscall is not None


def futex_wait(address: int, expected: int, timeout: float) -> None:
    """Sleep while the int32 at ``address`` equals ``expected``, at most ``timeout`` seconds.

    May return early (a ring, a signal, a spurious wake-up): callers check their condition again.
    """
    if _syscall is None:
        time.sleep(min(timeout, FUTEX_FALLBACK_SLEEP_SECONDS))
        return
    seconds = int(timeout)
    ts = _Timespec(seconds, int((timeout - seconds) * 1e9))
    _syscall(_SYS_FUTEX, address, _FUTEX_WAIT, expected, ctypes.addressof(ts), None, 0)


def futex_wake(address: int) -> None:
    """Wake every process sleeping on the int32 at ``address`` (cheap when none is)."""
    if _syscall is not None:
        _syscall(_SYS_FUTEX, address, _FUTEX_WAKE, 2**31 - 1, None, None, 0)
