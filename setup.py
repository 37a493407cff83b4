"""The optional C part of torchwm; everything else is in pyproject.toml.

`torchwm._atari_kernel` (torchwm/_atari_kernel.c) speeds up the fused Atari env. It is an
optional extension: where no C compiler works, setuptools warns and installs torchwm
without it, and torchwm uses OpenCV instead (torchwm.native says which path runs).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "torchwm._atari_kernel",
            ["torchwm/_atari_kernel.c"],
            # No fused multiply-add: OpenCV rounds each product and each sum to float, and the
            # kernel must give its bytes exactly.
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
