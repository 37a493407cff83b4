"""Which path the fused Atari env takes after the emulator: torchwm's C kernel, or OpenCV.

`torchwm._atari_kernel` (torchwm/_atari_kernel.c) turns ALE's palette indices into gray
values (the bytes of ``ale.getScreenGrayscale``, from a table learned from ALE's own
grayscale screens), pools the last two screens and does the ``INTER_AREA`` resize, byte
for byte what ``np.maximum`` then ``cv2.resize`` give. The gray lookup has three paths,
picked at import from the CPU's flags: AVX-512 VBMI, AVX2, and a plain C loop; the resize
has three paths too: AVX-512, AVX2 and SSE2. ``TORCHWM_ATARI_KERNEL=vbmi|avx2|plain`` (read
at import) forces a lookup path and the resize a CPU of that kind has (AVX-512 with ``vbmi``,
AVX2 with ``avx2``, SSE2 with ``plain``), so that each path can be tested and measured on one
machine; a path this CPU lacks is a ValueError at import. The kernel is built at install
time where a C compiler works and is optional: without it (or with ``TORCHWM_NATIVE=0``,
read at import) the fused env uses ALE's grayscale screens, NumPy and OpenCV, with the same
arrays. `kernel_status` says which path runs; ``torchwm list`` prints it.
"""

from __future__ import annotations

import os
from types import ModuleType

SWITCH = "TORCHWM_ATARI_KERNEL"
PATHS = ("vbmi", "avx2", "plain")
# The resize a CPU of each lookup path's kind has (those with AVX-512 have VBMI too), which the switch forces.
RESIZE_OF_PATH = {"vbmi": "AVX-512", "avx2": "AVX2", "plain": "SSE2"}


def _load() -> tuple[ModuleType | None, str]:
    """The kernel module, or None and why not."""
    if os.environ.get("TORCHWM_NATIVE", "1") == "0":
        return None, "TORCHWM_NATIVE=0"
    try:
        import torchwm._atari_kernel as _atari_kernel
    except ImportError:
        return None, "not built: no C compiler when torchwm was installed"
    return _atari_kernel, ""


def _force(kernel: ModuleType | None, wanted: str) -> str:
    """Applies ``TORCHWM_ATARI_KERNEL=wanted`` ("" or "auto": the CPU's best); returns the forced path,
    or "" when none is."""
    if wanted in ("", "auto"):
        return ""
    if wanted not in PATHS:
        raise ValueError(f"{SWITCH}: expected one of {', '.join(PATHS)} or auto, got {wanted!r}")
    if kernel is None:
        return ""  # TORCHWM_NATIVE=0 or no kernel: NumPy and OpenCV, which kernel_status says
    if wanted not in kernel.lookup_paths():
        have = ", ".join(kernel.lookup_paths())
        raise ValueError(
            f"{SWITCH}={wanted}: this CPU has no such path (it has {have}); "
            f"unset {SWITCH} to take the best one"
        )
    kernel._set_lookup(wanted)
    if kernel.resize_path() != "plain C":  # a build without SSE2 (not x86-64) has that resize only
        kernel._set_resize(RESIZE_OF_PATH[wanted])
    return wanted


KERNEL, _WHY_NOT = _load()
FORCED = _force(KERNEL, os.environ.get(SWITCH, "").strip().lower())


def kernel_handles(source_shape: tuple[int, ...], size: tuple[int, int]) -> bool:
    """Whether the kernel resizes ``source_shape`` (rows, cols[, 3]) to ``size`` (rows, cols): a shrink
    that is not a whole-number scale on both axes (OpenCV takes an integer path for those)."""
    rows, cols = source_shape[:2]
    return (size[0] <= rows and size[1] <= cols) and not (rows % size[0] == 0 and cols % size[1] == 0)


def fast_gray_lookup() -> bool:
    """Whether the fused env reads gray screens by the kernel's palette lookup (on every path where the
    kernel is there) rather than by ``ale.getScreenGrayscale``."""
    return KERNEL is not None


def kernel_path() -> str:
    """The gray lookup path in use: ``"vbmi"``, ``"avx2"``, ``"plain"``, or ``"opencv"`` without the
    kernel."""
    return "opencv" if KERNEL is None else str(KERNEL.lookup_path()[0])


def kernel_status() -> str:
    """One line: the path the fused Atari env's gray screens, max-pool and resize take.

    Example:
        >>> from torchwm import atari_kernel
        >>> atari_kernel.kernel_status().startswith(("C kernel", "NumPy and OpenCV"))
        True
    """
    if KERNEL is None:
        return f"NumPy and OpenCV ({_WHY_NOT})"
    forced = f"; forced by {SWITCH}={FORCED}" if FORCED else ""
    return (
        f"C kernel (torchwm._atari_kernel): {KERNEL.lookup_path()[1]} gray lookup, "
        f"{KERNEL.resize_path()} max-pool and INTER_AREA resize{forced}"
    )
