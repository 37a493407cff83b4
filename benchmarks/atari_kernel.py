"""Micro-benchmark of the C kernel's gray lookup paths, against ALE's own grayscale screen, in one process.

    python benchmarks/atari_kernel.py [ENV_ID] [ROUNDS]

Records screens of a game (ALE's palette indices and its grayscale screens), learns the gray table as
the fused env does, then times, in alternating rounds so that the machine's load weighs on every path
alike: ``ale.getScreenGrayscale``; each lookup path this CPU has (`palette_lookup`, alone and with the
max-pool folded in); each resize path this CPU has (`max_area_resize`); and the after-the-emulator work
of one fused step per lookup and resize path (two screens read, looked up, pooled and resized:
`palette_max_area_resize`), against ALE's two grayscale screens and the resize. Prints the medians in
microseconds per call, and checks on the way that every path gives ALE's bytes.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from torchwm import native

if native.KERNEL is None:
    sys.exit(f"no C kernel: {native.kernel_status()}")
kernel = native.KERNEL
env_id = sys.argv[1] if len(sys.argv) > 1 else "ALE/Pong-v5"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15

import gymnasium as gym  # noqa: E402

from torchwm.names import register_ale  # noqa: E402

register_ale()
env = gym.make(env_id, frameskip=1).unwrapped
env.reset(seed=0)
ale = env.ale
rng = np.random.default_rng(0)
indices, grays = [], []
for _ in range(200):
    env.step(int(rng.integers(env.action_space.n)))
    indices.append(ale.getScreen())
    grays.append(ale.getScreenGrayscale())
table = np.zeros((2, 256), np.uint8)
for idx, gray in zip(indices, grays, strict=True):
    table[0, idx], table[1, idx] = gray, 255

a, b = indices[-1], indices[-2]
frame, other, out = np.empty_like(grays[0]), grays[-2].copy(), np.empty((84, 84), np.uint8)
paths = kernel.lookup_paths()
for path in paths:  # every path gives ALE's bytes on every recorded screen
    for idx, gray in zip(indices, grays, strict=True):
        assert kernel.palette_lookup(idx, table, frame, path=path) and np.array_equal(frame, gray), path

initial_lookup, initial_resize = kernel.lookup_path()[0], kernel.resize_path()


def has_resize(path: str) -> bool:
    try:
        kernel._set_resize(path)
    except ValueError:  # not on this CPU or build
        return False
    return True


resize_paths = [path for path in ("AVX-512", "AVX2", "SSE2", "plain C") if has_resize(path)]
kernel._set_resize(initial_resize)


def with_lookup(path: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        kernel._set_lookup(path)
        return fn()

    return run


def with_resize(path: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        kernel._set_resize(path)
        return fn()

    return run


def ale_step() -> None:  # the fused env without the lookup: ALE's two gray screens, then pool and resize
    ale.getScreenGrayscale(other)
    ale.getScreenGrayscale(frame)
    kernel.max_area_resize(frame, other, out)


def folded_step() -> None:  # the fused env with the lookup: screen 1 looked up, screen 0 folded
    ale.getScreen(b)
    kernel.palette_lookup(b, table, other)
    ale.getScreen(a)
    kernel.palette_max_area_resize(a, table, frame, other, out)


cases: dict[str, Callable[[], object]] = {
    "ale.getScreenGrayscale": lambda: ale.getScreenGrayscale(frame),
    "ale.getScreen": lambda: ale.getScreen(a),
}
for path in paths:
    cases[f"palette_lookup {path}"] = lambda p=path: kernel.palette_lookup(a, table, frame, path=p)
    cases[f"palette_lookup {path} + max"] = lambda p=path: kernel.palette_lookup(
        a, table, frame, other, path=p
    )
for resize in resize_paths:
    cases[f"max_area_resize {resize}"] = with_resize(
        resize, lambda: kernel.max_area_resize(frame, other, out)
    )
    cases[f"step: 2 x getScreenGrayscale + resize {resize}"] = with_resize(resize, ale_step)
    for path in paths:
        cases[f"step: {path} lookup, folded, resize {resize}"] = with_resize(
            resize, with_lookup(path, folded_step)
        )

samples: dict[str, list[float]] = {name: [] for name in cases}
calls = 200
for _ in range(rounds):
    for name, fn in cases.items():
        fn()  # the path's switch and a warm cache
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples[name].append((time.perf_counter() - start) / calls * 1e6)
kernel._set_lookup(initial_lookup)
kernel._set_resize(initial_resize)
env.close()

print(f"{env_id}, {rounds} rounds of {calls} calls; {native.kernel_status()}")
width = max(map(len, cases))
for name, values in samples.items():
    print(f"{name:<{width}}  {statistics.median(values):7.2f} us  (min {min(values):.2f})")
