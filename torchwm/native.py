"""``torchwm.native``: the old path of `torchwm.atari_kernel`, the fused Atari env's C kernel loader.

Scripts written against earlier releases read the kernel's state from here (``torchwm.native.KERNEL``,
``kernel_status()``, ``kernel_path()``), so these names stay; they are the loader's own objects, read once
at import as the loader reads the switches.
"""

from torchwm.atari_kernel import (
    FORCED,
    KERNEL,
    PATHS,
    RESIZE_OF_PATH,
    SWITCH,
    fast_gray_lookup,
    kernel_handles,
    kernel_path,
    kernel_status,
)

__all__ = [
    "FORCED",
    "KERNEL",
    "PATHS",
    "RESIZE_OF_PATH",
    "SWITCH",
    "fast_gray_lookup",
    "kernel_handles",
    "kernel_path",
    "kernel_status",
]
