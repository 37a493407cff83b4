# Types of the C kernel (torchwm/_atari_kernel.c); built only where a C compiler works.
from typing import Any

def max_area_resize(frame: Any, other: Any | None, out: Any) -> None: ...
