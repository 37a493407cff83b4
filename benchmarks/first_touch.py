"""What writing a frame costs in memory the process never touched, against memory written before, and
against memory mapped in one call (``MAP_POPULATE``): the cost under `VectorDataCollector`'s recording
(docs/performance.md, "Recording episodes").

    python benchmarks/first_touch.py

Writes 1,024 Pong frames (4 stacked 84x84 uint8 frames, 28 KB each) into each kind of memory and prints
the microseconds per frame.
"""

import mmap
import time

import numpy as np

FRAMES = 1024
SHAPE = (4, 84, 84)


def write_all(array: np.ndarray, frame: np.ndarray) -> float:
    """Microseconds per frame to write ``frame`` into every row of ``array``."""
    started = time.perf_counter()
    for row in range(len(array)):
        array[row] = frame
    return (time.perf_counter() - started) / len(array) * 1e6


frame = np.random.default_rng(0).integers(0, 255, SHAPE, dtype=np.uint8)
nbytes = FRAMES * frame.nbytes
fresh = np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8).reshape(FRAMES, *SHAPE)
print(f"new memory, page by page:   {write_all(fresh, frame):6.1f} µs a frame")
print(f"the same memory, written again: {write_all(fresh, frame):6.1f} µs a frame")
started = time.perf_counter()
flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
populated = np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), dtype=np.uint8).reshape(FRAMES, *SHAPE)
mapping = (time.perf_counter() - started) / FRAMES * 1e6
written = write_all(populated, frame)
print(f"new memory, mapped in one call: {mapping:6.1f} µs a frame, then {written:.1f} µs to write")
