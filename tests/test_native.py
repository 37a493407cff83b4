"""`torchwm.native`: the earlier path of `torchwm.atari_kernel`, the C kernel's loader, whose names it keeps
(the kernel's own tests are tests/test_atari_kernel.py)."""

from __future__ import annotations

import torchwm.atari_kernel
import torchwm.native


def test_every_name_of_the_earlier_path_is_the_loaders_own_object():
    assert {"KERNEL", "FORCED", "SWITCH", "kernel_status", "kernel_path", "fast_gray_lookup"} <= set(
        torchwm.native.__all__
    )
    for name in torchwm.native.__all__:
        assert getattr(torchwm.native, name) is getattr(torchwm.atari_kernel, name), name
    assert torchwm.native.kernel_status() == torchwm.atari_kernel.kernel_status()
