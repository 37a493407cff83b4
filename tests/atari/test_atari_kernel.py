"""torchwm's C kernel (torchwm/_atari_kernel.c) gives exactly the bytes of np.maximum + cv2.resize,
and its palette lookup exactly ALE's grayscale screens.

The kernel is optional at install (no C compiler: NumPy and OpenCV run instead), so these
tests skip without it, except under ``TORCHWM_REQUIRE_KERNEL=1``, which CI sets: there a
missing kernel is a failure. The fused env's arrays with the kernel are compared with the
same env on ALE's grayscale screens and the OpenCV path on every ROM;
tests/atari/test_fused_atari.py compares the fused env (kernel included) with Gymnasium's own chain.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchwm
from torchwm import native

if native.KERNEL is None:
    if os.environ.get("TORCHWM_REQUIRE_KERNEL") == "1":
        raise AssertionError(f"TORCHWM_REQUIRE_KERNEL=1 but the kernel is missing: {native.kernel_status()}")
    pytest.skip(f"the C kernel is not here: {native.kernel_status()}", allow_module_level=True)
KERNEL = native.KERNEL


@pytest.fixture(params=["AVX-512", "SSE2"])
def resize_path(request):
    """Each of the kernel's resize paths in turn (AVX-512 only where the CPU has it), then the one it had."""
    if request.param == "AVX-512" and KERNEL.RESIZE_PATH != "AVX-512":
        pytest.skip(f"no AVX-512 on this CPU: the kernel resizes with {KERNEL.RESIZE_PATH}")
    previous = KERNEL._set_avx512(request.param == "AVX-512")
    yield request.param
    KERNEL._set_avx512(previous)


def reference(frame: np.ndarray, other: np.ndarray | None, size: tuple[int, int]) -> np.ndarray:
    """What the fused env computes without the kernel: the max, then OpenCV's area resize."""
    source = frame if other is None else np.maximum(frame, other)
    return cv2.resize(source, (size[1], size[0]), interpolation=cv2.INTER_AREA)


def kernel(frame: np.ndarray, other: np.ndarray | None, size: tuple[int, int]) -> np.ndarray:
    out = np.empty(size + frame.shape[2:], dtype=np.uint8)
    pooled = frame.copy()
    KERNEL.max_area_resize(pooled, other, out)
    if other is not None:  # the max stays in frame, as np.maximum(frame, other, out=frame)
        np.testing.assert_array_equal(pooled, np.maximum(frame, other))
    return out


@st.composite
def images(draw):
    rows, cols = draw(st.integers(1, 260)), draw(st.integers(1, 260))
    size = (draw(st.integers(1, rows)), draw(st.integers(1, cols)))
    shape = (rows, cols) if draw(st.booleans()) else (rows, cols, 3)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    frame = rng.integers(0, 256, shape, dtype=np.uint8)
    other = rng.integers(0, 256, shape, dtype=np.uint8) if draw(st.booleans()) else None
    return frame, other, size


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(images())
def test_equals_opencv_on_random_images_of_random_sizes(resize_path, case):
    frame, other, size = case
    if not native.kernel_handles(frame.shape, size):
        with pytest.raises(ValueError, match="only shrinks"):
            kernel(frame, other, size)
        return
    np.testing.assert_array_equal(kernel(frame, other, size), reference(frame, other, size))


# (210, 5) from 160 columns: 32 source pixels a column, more than the AVX-512 pass takes (SSE2 does it).
SHAPES_AND_SIZES = [(shape, size) for shape in [(210, 160), (210, 160, 3), (250, 160), (7, 5), (260, 1)]
                    for size in [(84, 84), (64, 48), (1, 1), (3, 1), (100, 77), (210, 5)]
                    if native.kernel_handles(shape, size)]


@pytest.mark.parametrize("shape, size", SHAPES_AND_SIZES)
def test_equals_opencv_on_atari_sized_frames_and_one_pixel_targets(resize_path, shape, size):
    rng = np.random.default_rng(sum(shape) * 1000 + sum(size))
    frame, other = rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 256, shape, dtype=np.uint8)
    np.testing.assert_array_equal(kernel(frame, other, size), reference(frame, other, size))


@pytest.mark.parametrize("value", [1, 3, 5, 127, 128, 255])
@pytest.mark.parametrize("pattern", ["flat", "checker", "stripes"])
def test_rounding_ties_round_as_opencv_does(resize_path, value, pattern):
    """Frames whose area averages land on .5 (and on values float cannot hold exactly)."""
    rows, cols = np.indices((210, 160))
    mask = {"flat": np.ones((210, 160), bool), "checker": (rows + cols) % 2 == 0, "stripes": cols % 2 == 0}[pattern]
    frame = np.where(mask, value, value - 1 if value else 0).astype(np.uint8)
    for size in [(84, 84), (105, 64), (42, 100)]:
        np.testing.assert_array_equal(kernel(frame, None, size), reference(frame, None, size))


@pytest.mark.parametrize("make, words", [
    (lambda: (np.zeros((4, 4), np.float32), None, np.zeros((3, 3), np.uint8)), "frame: expected a uint8 array"),
    (lambda: (np.zeros((4, 4, 2), np.uint8), None, np.zeros((3, 3, 2), np.uint8)), r"frame: expected an image of shape"),
    (lambda: (np.zeros((4, 4), np.uint8), np.zeros((4, 5), np.uint8), np.zeros((3, 3), np.uint8)),
     "other: expected the shape of frame"),
    (lambda: (np.zeros((4, 4), np.uint8), None, np.zeros((3, 3, 3), np.uint8)), "out: expected 1 channel"),
    (lambda: (np.zeros((4, 4), np.uint8), None, np.zeros((5, 3), np.uint8)), "only shrinks"),
    (lambda: (np.zeros((4, 4), np.uint8), None, np.zeros((2, 2), np.uint8)), "only shrinks"),
])
def test_bad_input_is_refused_with_what_was_expected(make, words):
    frame, other, out = make()
    with pytest.raises(ValueError, match=words):
        KERNEL.max_area_resize(frame, other, out)


def test_non_contiguous_and_read_only_arrays_are_refused():
    frame = np.zeros((8, 8), np.uint8)
    with pytest.raises(ValueError, match="not C-contiguous"):
        KERNEL.max_area_resize(frame[:, ::2], None, np.zeros((3, 3), np.uint8))
    out = np.zeros((3, 3), np.uint8)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        KERNEL.max_area_resize(frame, None, out)


def _v5_ids() -> list[str]:
    import ale_py.roms
    import gymnasium as gym

    from torchwm.names import register_ale

    register_ale()
    names = (rom.title().replace("_", "") for rom in ale_py.roms.get_all_rom_ids())
    return [f"ALE/{name}-v5" for name in names if f"ALE/{name}-v5" in gym.registry]


def _fused_pair(env_id: str, options: dict):
    """The fused env twice, the second forced onto ALE's grayscale screens and the OpenCV path (None: the
    game is refused)."""
    stack = [{"name": "atari_preprocessing", **options}, "frame_stack"]
    try:
        native_env, opencv_env = (torchwm.make_env(env_id, wrappers=stack) for _ in range(2))
    except ValueError:
        return None  # a game whose first action is not NOOP: refused by the chain and the fused env alike
    core = opencv_env._core
    assert native_env._core._kernel is KERNEL
    core._kernel = None
    if core._read_screen == core._read_gray:
        core._read_screen = core.ale.getScreenGrayscale
    return native_env, opencv_env


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("options, steps", [
    ({}, 300),  # the default: grayscale 84 x 84
    ({"grayscale": False}, 100),  # RGB costs three times the bytes: fewer steps
    ({"screen_size": 64}, 100),
])
def test_every_rom_gives_the_same_arrays_with_the_kernel_and_with_opencv(options, steps):
    ids = _v5_ids()
    assert len(ids) > 90
    for env_id in ids:
        pair = _fused_pair(env_id, options)
        if pair is None:
            continue
        native_env, opencv_env = pair
        a, _ = native_env.reset(seed=1)
        b, _ = opencv_env.reset(seed=1)
        np.testing.assert_array_equal(a, b, err_msg=env_id)
        rng = np.random.default_rng(1)
        for t in range(steps):
            action = int(rng.integers(native_env.action_space.n))
            got, expected = native_env.step(action), opencv_env.step(action)
            assert np.array_equal(got[0], expected[0]), f"{env_id} {options}: observation differs at step {t}"
            assert got[1:4] == expected[1:4], f"{env_id}: step {t} differs"
            if got[2] or got[3]:  # the next episode too (its first frames go through a reset)
                np.testing.assert_array_equal(native_env.reset()[0], opencv_env.reset()[0], err_msg=env_id)
        native_env.close()
        opencv_env.close()


@st.composite
def palette_screens(draw):
    """Palette indices of a random length (the vector loop's tail included) and a table that may miss some."""
    length = draw(st.integers(0, 700))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    indices = rng.integers(0, 256, length, dtype=np.uint8)
    table = np.zeros((2, 256), np.uint8)
    table[0] = rng.integers(0, 256, 256, dtype=np.uint8)
    table[1] = 255
    if draw(st.booleans()) and length:  # one index of the screen not learned yet
        table[1, indices[draw(st.integers(0, length - 1))]] = 0
    return indices, table


@settings(max_examples=300, deadline=None)
@given(palette_screens(), st.booleans())
def test_palette_lookup_is_a_table_lookup_and_says_when_an_index_is_unknown(case, vectorized):
    indices, table = case
    out = np.empty_like(indices)
    all_known = KERNEL.palette_lookup(indices, table, out, vectorized=vectorized)
    assert all_known == bool((table[1, indices] == 255).all())
    if all_known:
        np.testing.assert_array_equal(out, table[0, indices])


@pytest.mark.parametrize("make, words", [
    (lambda: (np.zeros(8, np.uint8), np.zeros((2, 255), np.uint8), np.zeros(8, np.uint8)), "table: expected a"),
    (lambda: (np.zeros(8, np.uint8), np.zeros((2, 256), np.uint8), np.zeros(7, np.uint8)), "out: expected 8"),
    (lambda: (np.zeros(8, np.int16), np.zeros((2, 256), np.uint8), np.zeros(8, np.uint8)), "indices: expected a uint8"),
])
def test_palette_lookup_refuses_bad_input(make, words):
    with pytest.raises(ValueError, match=words):
        KERNEL.palette_lookup(*make())


def test_the_learned_gray_table_gives_ale_own_grayscale_screens():
    """The fused env learns the gray value of each palette index from ALE and then gives ALE's screens
    without asking it; the every-ROM test above compares whole episodes."""
    if not native.fast_gray_lookup():
        pytest.skip(f"no vector palette lookup on this CPU ({KERNEL.LOOKUP_PATH}): the fused env reads ALE's screens")
    env = torchwm.make_env("ALE/Breakout-v5")
    core = env._core
    assert core._read_screen == core._read_gray
    env.reset(seed=0)
    learned = core._gray_table[1] == 255
    assert 0 < learned.sum() < 256  # what the first screens showed, not the whole palette
    expected, got = np.empty((210, 160), np.uint8), np.empty((210, 160), np.uint8)
    for _ in range(50):
        env.step(env.action_space.sample())
        core.ale.getScreenGrayscale(expected)
        core._read_gray(got)
        np.testing.assert_array_equal(got, expected)
    env.close()


def test_torchwm_native_0_turns_the_kernel_off():
    import subprocess
    import sys

    code = "import torchwm.native as n; print(n.KERNEL is None, n.kernel_status())"
    env = {**os.environ, "TORCHWM_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.startswith("True NumPy and OpenCV (TORCHWM_NATIVE=0)"), out
