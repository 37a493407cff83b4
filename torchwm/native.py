"""Which path the fused Atari env takes after the emulator: torchwm's C kernel, or OpenCV.

`torchwm._atari_kernel` (torchwm/_atari_kernel.c) does the max over the last two screens
and the ``INTER_AREA`` resize in one call, byte for byte what ``np.maximum`` then
``cv2.resize`` give, three to four times as fast. Where the CPU has AVX-512 VBMI it also
turns ALE's palette indices into gray values (`fast_gray_lookup`), 15 times as fast as
``ale.getScreenGrayscale`` and with its values: the table is learned from ALE's own
grayscale screens. It is built at install time where a C compiler
works and is optional: without it (or with ``TORCHWM_NATIVE=0`` in the environment, read
at import) the fused env uses NumPy and OpenCV, with the same arrays. `kernel_status`
says which path runs; ``torchwm list`` prints it.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> tuple[ModuleType | None, str]:
    """The kernel module, or None and why not."""
    if os.environ.get("TORCHWM_NATIVE", "1") == "0":
        return None, "TORCHWM_NATIVE=0"
    try:
        import torchwm._atari_kernel as _atari_kernel
    except ImportError:
        return None, "not built: no C compiler when torchwm was installed"
    return _atari_kernel, ""


KERNEL, _WHY_NOT = _load()


def kernel_handles(source_shape: tuple[int, ...], size: tuple[int, int]) -> bool:
    """Whether the kernel resizes ``source_shape`` (rows, cols[, 3]) to ``size`` (rows, cols): a shrink
    that is not a whole-number scale on both axes (OpenCV takes an integer path for those)."""
    rows, cols = source_shape[:2]
    return (size[0] <= rows and size[1] <= cols) and not (rows % size[0] == 0 and cols % size[1] == 0)


def fast_gray_lookup() -> bool:
    """Whether the kernel's palette lookup is faster than ALE's grayscale screen here: it is where
    the CPU has AVX-512 VBMI; its plain loop is not, so the fused env keeps ALE's call elsewhere."""
    return KERNEL is not None and KERNEL.LOOKUP_PATH != "plain loop"


def kernel_status() -> str:
    """One line: the path the fused Atari env's gray screens, max-pool and resize take."""
    if KERNEL is None:
        return f"NumPy and OpenCV ({_WHY_NOT})"
    gray = ("gray screens by palette lookup (AVX-512 VBMI)" if fast_gray_lookup()
            else "gray screens from ALE (no AVX-512 VBMI on this CPU)")
    return (f"native kernel (torchwm._atari_kernel): max-pool and INTER_AREA resize in C ({KERNEL.RESIZE_PATH}); "
            f"{gray}")
