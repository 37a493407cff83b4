# Types of the C kernel (torchwm/_atari_kernel.c); built only where a C compiler works.
from typing import Any

def max_area_resize(frame: Any, other: Any | None, out: Any) -> None: ...

LOOKUP_PATH: str  # "AVX-512 VBMI" or "plain loop"
RESIZE_PATH: str  # "AVX-512", "SSE2" or "plain C"

def _set_avx512(enabled: bool) -> bool: ...

def palette_lookup(indices: Any, table: Any, out: Any, vectorized: bool = True) -> bool: ...
