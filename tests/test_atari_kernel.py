"""torchwm's C kernel (torchwm/_atari_kernel.c) gives exactly the bytes of np.maximum + cv2.resize,
and its palette lookup exactly ALE's grayscale screens, on every path the CPU has.

The kernel is optional at install (no C compiler: NumPy and OpenCV run instead), so these
tests skip without it, except under ``TORCHWM_REQUIRE_KERNEL=1``, which CI sets: there a
missing kernel is a failure. Each gray lookup path (AVX-512 VBMI, AVX2, plain C) and each
resize path (AVX-512, AVX2, SSE2) is forced in turn by the kernel's test hooks; a path this
CPU lacks skips with the reason. Every path's bytes are compared with ALE's grayscale screens
and cv2.resize on recorded screens of every ROM; the fused env with the kernel is compared
with the same env on ALE's grayscale screens and the OpenCV path on every ROM;
tests/wrappers/test_atari_fused.py compares the fused env (kernel included, the plain lookup forced on
every ROM) with Gymnasium's own chain.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchwm
from torchwm import atari_kernel

if atari_kernel.KERNEL is None:
    if os.environ.get("TORCHWM_REQUIRE_KERNEL") == "1":
        raise AssertionError(
            f"TORCHWM_REQUIRE_KERNEL=1 but the kernel is missing: {atari_kernel.kernel_status()}"
        )
    pytest.skip(f"the C kernel is not here: {atari_kernel.kernel_status()}", allow_module_level=True)
KERNEL = atari_kernel.KERNEL


@pytest.fixture(params=["AVX-512", "AVX2", "SSE2"])
def resize_path(request):
    """Each of the kernel's resize paths in turn (those the CPU lacks skip), then the one it had."""
    try:
        previous = KERNEL._set_resize(request.param)
    except ValueError as error:  # "the resize path 'AVX-512' is not available on this CPU or build ..."
        pytest.skip(str(error))
    yield request.param
    KERNEL._set_resize(previous)


@pytest.fixture(params=atari_kernel.PATHS)
def lookup_path(request):
    """Each of the kernel's gray lookup paths in turn (those the CPU lacks skip), then the one it had."""
    if request.param not in KERNEL.lookup_paths():
        pytest.skip(f"no {request.param} gray lookup on this CPU (it has {', '.join(KERNEL.lookup_paths())})")
    previous = KERNEL._set_lookup(request.param)
    yield request.param
    KERNEL._set_lookup(previous)


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


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(images())
def test_equals_opencv_on_random_images_of_random_sizes(resize_path, case):
    frame, other, size = case
    if not atari_kernel.kernel_handles(frame.shape, size):
        with pytest.raises(ValueError, match="only shrinks"):
            kernel(frame, other, size)
        return
    np.testing.assert_array_equal(kernel(frame, other, size), reference(frame, other, size))


# (210, 5) from 160 columns: 32 source pixels a column, more than the AVX-512 pass takes (SSE2 does it).
SHAPES_AND_SIZES = [
    (shape, size)
    for shape in [(210, 160), (210, 160, 3), (250, 160), (7, 5), (260, 1)]
    for size in [(84, 84), (64, 48), (1, 1), (3, 1), (100, 77), (210, 5)]
    if atari_kernel.kernel_handles(shape, size)
]


@pytest.mark.parametrize("shape, size", SHAPES_AND_SIZES)
def test_equals_opencv_on_atari_sized_frames_and_one_pixel_targets(resize_path, shape, size):
    rng = np.random.default_rng(sum(shape) * 1000 + sum(size))
    frame, other = rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 256, shape, dtype=np.uint8)
    np.testing.assert_array_equal(kernel(frame, other, size), reference(frame, other, size))


# The AVX2 pass takes 8 rows at a time: fewer than 8 rows, and row counts that are not a multiple of 8
# (the last block overlaps the one before), with column counts that are not one either.
@pytest.mark.parametrize(
    "shape, size",
    [
        ((7, 160), (3, 84)),
        ((9, 160), (4, 84)),
        ((9, 160), (9, 84)),
        ((15, 37), (6, 10)),
        ((1, 160), (1, 84)),
        ((17, 160, 3), (5, 84)),
    ],
)
def test_equals_opencv_on_few_rows_and_rows_not_a_multiple_of_eight(resize_path, shape, size):
    rng = np.random.default_rng(sum(shape) * 1000 + sum(size))
    frame, other = rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 256, shape, dtype=np.uint8)
    assert atari_kernel.kernel_handles(shape, size)
    np.testing.assert_array_equal(kernel(frame, other, size), reference(frame, other, size))


@pytest.mark.parametrize("value", [1, 3, 5, 127, 128, 255])
@pytest.mark.parametrize("pattern", ["flat", "checker", "stripes"])
def test_rounding_ties_round_as_opencv_does(resize_path, value, pattern):
    """Frames whose area averages land on .5 (and on values float cannot hold exactly)."""
    rows, cols = np.indices((210, 160))
    masks = {"flat": np.ones((210, 160), bool), "checker": (rows + cols) % 2 == 0, "stripes": cols % 2 == 0}
    mask = masks[pattern]
    frame = np.where(mask, value, value - 1 if value else 0).astype(np.uint8)
    for size in [(84, 84), (105, 64), (42, 100)]:
        np.testing.assert_array_equal(kernel(frame, None, size), reference(frame, None, size))


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda: (np.zeros((4, 4), np.float32), None, np.zeros((3, 3), np.uint8)),
            "frame: expected a uint8 array",
        ),
        (
            lambda: (np.zeros((4, 4, 2), np.uint8), None, np.zeros((3, 3, 2), np.uint8)),
            r"frame: expected an image of shape",
        ),
        (
            lambda: (np.zeros((4, 4), np.uint8), np.zeros((4, 5), np.uint8), np.zeros((3, 3), np.uint8)),
            "other: expected the shape of frame",
        ),
        (
            lambda: (np.zeros((4, 4), np.uint8), None, np.zeros((3, 3, 3), np.uint8)),
            "out: expected 1 channel",
        ),
        (lambda: (np.zeros((4, 4), np.uint8), None, np.zeros((5, 3), np.uint8)), "only shrinks"),
        (lambda: (np.zeros((4, 4), np.uint8), None, np.zeros((2, 2), np.uint8)), "only shrinks"),
    ],
)
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
    if core._palette_lookup is not None:
        core._read_screen = core._read_last = core.ale.getScreenGrayscale
    return native_env, opencv_env


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "options, steps, first, every",
    [
        # The default, grayscale 84 x 84, on every third ROM: every ROM's palette goes through every
        # lookup path in test_every_lookup_path_gives_ale_grayscale_screens_and_cv2_frames_on_every_rom.
        ({}, 150, 0, 3),
        # RGB frames and other sizes take no lookup: every eighth ROM's screens cover their resize.
        ({"grayscale": False}, 100, 1, 8),
        ({"screen_size": 64}, 100, 2, 8),
    ],
)
def test_the_roms_give_the_same_arrays_with_the_kernel_and_with_opencv(options, steps, first, every):
    ids = _v5_ids()
    assert len(ids) > 90
    for env_id in ids[first::every]:
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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(palette_screens(), st.booleans())
def test_palette_lookup_is_a_table_lookup_and_says_when_an_index_is_unknown(lookup_path, case, pooled):
    indices, table = case
    rng = np.random.default_rng(len(indices))
    other = rng.integers(0, 256, len(indices), dtype=np.uint8) if pooled else None
    expected = table[0, indices] if other is None else np.maximum(table[0, indices], other)
    for path in (lookup_path, None):  # named, and as the current path
        out = np.empty_like(indices)
        all_known = KERNEL.palette_lookup(indices, table, out, other, path=path)
        assert all_known == bool((table[1, indices] == 255).all())
        if all_known:
            np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("index", [0, 1, 15, 16, 127, 128, 129, 200, 255])
def test_palette_lookup_finds_each_entry_and_each_unknown_entry(lookup_path, index):
    """Every table row and half of the vector paths: one unknown index among known ones, at every offset
    of a 64-byte vector and in the tail."""
    table = np.zeros((2, 256), np.uint8)
    table[0] = (np.arange(256) * 37 + 11) % 256
    table[1] = 255
    indices = np.arange(256 * 3, dtype=np.uint8)[::-1].copy()
    out = np.empty_like(indices)
    assert KERNEL.palette_lookup(indices, table, out)
    np.testing.assert_array_equal(out, table[0, indices])
    table[1, index] = 0
    for position in (0, 31, 32, 63, 64, 700, 767):
        screen = np.full(768, (index + 1) % 256, np.uint8)
        screen[position] = index
        assert not KERNEL.palette_lookup(screen, table, out), position


@pytest.mark.parametrize("pooled", [False, True])
def test_palette_lookup_of_even_indices_and_a_stray_odd_one(lookup_path, pooled):
    """Most games show only even palette indices (the AVX2 path then looks up a half-size table); a game
    that shows odd ones (Air Raid) has them learned, then looked up in the whole table."""
    rng = np.random.default_rng(3)
    table = np.zeros((2, 256), np.uint8)
    table[0] = rng.integers(0, 256, 256, dtype=np.uint8)
    table[1, ::2] = 255  # the even indices known, as after the first screens of most games
    indices = (rng.integers(0, 128, 33_600, dtype=np.uint8) * 2).astype(np.uint8)
    other = rng.integers(0, 256, indices.size, dtype=np.uint8) if pooled else None
    expected = table[0, indices] if other is None else np.maximum(table[0, indices], other)
    out = np.empty_like(indices)
    assert KERNEL.palette_lookup(indices, table, out, other)
    np.testing.assert_array_equal(out, expected)
    for position in (0, 17, 33_599):  # a vector lane, and the tail
        odd = indices.copy()
        odd[position] = 201
        assert not KERNEL.palette_lookup(odd, table, out, other), position  # 201 not known yet
        table[1, 201] = 255  # learned: now the whole table
        assert KERNEL.palette_lookup(odd, table, out, other), position
        want = table[0, odd] if other is None else np.maximum(table[0, odd], other)
        np.testing.assert_array_equal(out, want)
        table[1, 201] = 0
    unknown = indices.copy()
    unknown[5000] = 0
    table[1, 0] = 0
    assert not KERNEL.palette_lookup(unknown, table, out, other)


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda: (np.zeros(8, np.uint8), np.zeros((2, 255), np.uint8), np.zeros(8, np.uint8)),
            "table: expected a",
        ),
        (
            lambda: (np.zeros(8, np.uint8), np.zeros((2, 256), np.uint8), np.zeros(7, np.uint8)),
            "out: expected 8",
        ),
        (
            lambda: (np.zeros(8, np.int16), np.zeros((2, 256), np.uint8), np.zeros(8, np.uint8)),
            "indices: expected a uint8",
        ),
        (
            lambda: (
                np.zeros(8, np.uint8),
                np.zeros((2, 256), np.uint8),
                np.zeros(8, np.uint8),
                np.zeros(9, np.uint8),
            ),
            "other: expected 8",
        ),
    ],
)
def test_palette_lookup_refuses_bad_input(make, words):
    with pytest.raises(ValueError, match=words):
        KERNEL.palette_lookup(*make())


@pytest.mark.parametrize(
    "path, words",
    [
        ("avx512", "expected one of 'vbmi', 'avx2', 'plain', got 'avx512'"),
        (3, "expected one of 'vbmi', 'avx2', 'plain' or None, got 3"),
    ],
)
def test_an_unknown_lookup_path_is_refused(path, words):
    args = (np.zeros(8, np.uint8), np.zeros((2, 256), np.uint8), np.zeros(8, np.uint8))
    with pytest.raises(ValueError, match=words):
        KERNEL.palette_lookup(*args, path=path)
    with pytest.raises(ValueError, match=words):
        KERNEL._set_lookup(path)


@pytest.mark.parametrize("name", ["AVX512", "sse2", "avx2", 3, None])
def test_an_unknown_resize_path_is_refused(name):
    with pytest.raises(
        ValueError, match=f"expected one of 'AVX-512', 'AVX2', 'SSE2', 'plain C', got {name!r}"
    ):
        KERNEL._set_resize(name)


def test_set_resize_returns_the_previous_path_and_refuses_one_the_cpu_lacks_with_the_paths_it_has():
    previous = KERNEL.resize_path()
    have, missing = [], []
    try:
        for name in ["AVX-512", "AVX2", "SSE2"]:
            try:
                assert KERNEL._set_resize(name) == (have[-1] if have else previous)
            except ValueError as error:
                missing.append((name, str(error)))
                continue
            assert KERNEL.resize_path() == name
            have.append(name)
    finally:
        KERNEL._set_resize(previous)
    assert previous in have
    for name, error in missing:
        assert error == (
            f"the resize path '{name}' is not available on this CPU or build (available: {', '.join(have)})"
        )


def test_a_lookup_path_the_cpu_lacks_is_refused_with_the_paths_it_has():
    missing = [path for path in atari_kernel.PATHS if path not in KERNEL.lookup_paths()]
    if not missing:
        pytest.skip("this CPU has every gray lookup path")
    words = f"'{missing[0]}' is not available on this CPU or build \\(available: "
    with pytest.raises(ValueError, match=words):
        KERNEL._set_lookup(missing[0])
    assert KERNEL.lookup_paths()[-1] == "plain"  # the plain loop is always there


@pytest.mark.parametrize(
    "make, words",
    [
        (
            lambda: (
                np.zeros((4, 4), np.uint8),
                np.zeros((2, 256), np.uint8),
                np.zeros((4, 4, 3), np.uint8),
                None,
                np.zeros((3, 3, 3), np.uint8),
            ),
            "expected gray images",
        ),
        (
            lambda: (
                np.zeros((4, 5), np.uint8),
                np.zeros((2, 256), np.uint8),
                np.zeros((4, 4), np.uint8),
                None,
                np.zeros((3, 3), np.uint8),
            ),
            "indices and other: expected 16 bytes like frame, got 20",
        ),
        (
            lambda: (
                np.zeros((4, 4), np.uint8),
                np.zeros((2, 256), np.uint8),
                np.zeros((4, 4), np.uint8),
                np.zeros((4, 3), np.uint8),
                np.zeros((3, 3), np.uint8),
            ),
            "got 16 and 12",
        ),
        (
            lambda: (
                np.zeros((4, 4), np.uint8),
                np.zeros(256, np.uint8),
                np.zeros((4, 4), np.uint8),
                None,
                np.zeros((3, 3), np.uint8),
            ),
            "table: expected a",
        ),
        (
            lambda: (
                np.zeros((4, 4), np.uint8),
                np.zeros((2, 256), np.uint8),
                np.zeros((4, 4), np.uint8),
                None,
                np.zeros((2, 2), np.uint8),
            ),
            "only shrinks",
        ),
    ],
)
def test_palette_max_area_resize_refuses_bad_input(make, words):
    with pytest.raises(ValueError, match=words):
        KERNEL.palette_max_area_resize(*make())


def folded(indices: np.ndarray, table: np.ndarray, other: np.ndarray | None, size: tuple[int, int]):
    """palette_max_area_resize's frame and out, or None when an index is unknown."""
    frame, out = np.empty(indices.shape, np.uint8), np.empty(size, np.uint8)
    if not KERNEL.palette_max_area_resize(indices, table, frame, other, out):
        return None
    return frame, out


@pytest.mark.parametrize("value", [1, 3, 5, 127, 128, 255])
@pytest.mark.parametrize("pattern", ["flat", "checker", "stripes"])
def test_the_folded_lookup_rounds_ties_as_opencv_does(lookup_path, resize_path, value, pattern):
    """The tie frames of the resize test above, as palette indices through a table, pooled or not."""
    rows, cols = np.indices((210, 160))
    masks = {"flat": np.ones((210, 160), bool), "checker": (rows + cols) % 2 == 0, "stripes": cols % 2 == 0}
    mask = masks[pattern]
    indices = np.where(mask, 200, 7).astype(np.uint8)  # one index in each half of the table
    table = np.zeros((2, 256), np.uint8)
    table[0, 200], table[0, 7], table[1, [200, 7]] = value, value - 1 if value else 0, 255
    gray = table[0, indices]
    dark = np.zeros_like(gray)
    for other in (None, dark, gray[::-1].copy()):
        expected_frame = gray if other is None else np.maximum(gray, other)
        for size in [(84, 84), (105, 64), (42, 100)]:
            result = folded(indices, table, other, size)
            assert result is not None
            np.testing.assert_array_equal(result[0], expected_frame)
            np.testing.assert_array_equal(result[1], reference(expected_frame, None, size))
    table[1, 7] = 0
    indices[105, 80] = 7  # an index not learned yet, in any pattern
    assert folded(indices, table, None, (84, 84)) is None


def _screens_of(env_id: str, steps: int):
    """(indices, gray) of the two screens the fused env pools at each step of a frame skip of 4, over
    ``steps`` seeded random steps, episodes restarted."""
    import gymnasium as gym

    env = gym.make(env_id, frameskip=1, repeat_action_probability=0.0).unwrapped
    env.reset(seed=5)
    ale, actions = env.ale, env._action_set
    rng = np.random.default_rng(5)
    for _ in range(steps):
        action = actions[int(rng.integers(len(actions)))]
        pair = []
        for t in range(4):
            ale.act(action, 1.0)
            if ale.game_over():
                env.reset()
            if t >= 2:
                pair.append((ale.getScreen(), ale.getScreenGrayscale()))
        yield pair
    env.close()


SCREENS_PER_ROM = 40


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_lookup_path_gives_ale_grayscale_screens_and_cv2_frames_on_every_rom():
    """Recorded screens of every ROM through every lookup path this CPU has (each with the resize a
    CPU of its kind runs, as TORCHWM_ATARI_KERNEL forces it): ALE's grayscale screens, and the max-pool
    and INTER_AREA resize of them as cv2 gives them, byte for byte."""
    paths = KERNEL.lookup_paths()
    previous_lookup, previous_resize = KERNEL.lookup_path()[0], KERNEL.resize_path()
    ids = _v5_ids()
    assert len(ids) > 90
    checked = dict.fromkeys(paths, 0)
    try:
        for env_id in ids:
            pairs = list(_screens_of(env_id, SCREENS_PER_ROM))
            table = np.zeros((2, 256), np.uint8)
            for pair in pairs:
                for indices, gray in pair:
                    table[0, indices], table[1, indices] = gray, 255
            for path in paths:
                KERNEL._set_lookup(path)
                KERNEL._set_resize(atari_kernel.RESIZE_OF_PATH[path])
                for (_, gray1), (indices0, gray0) in pairs:
                    out = np.empty_like(gray0)
                    assert KERNEL.palette_lookup(indices0, table, out), env_id
                    assert np.array_equal(out, gray0), f"{env_id}: the {path} lookup differs from ALE's"
                    result = folded(indices0, table, gray1, (84, 84))
                    assert result is not None, env_id
                    expected = np.maximum(gray0, gray1)
                    assert np.array_equal(result[0], expected), f"{env_id}: {path} max-pool differs"
                    assert np.array_equal(result[1], reference(expected, None, (84, 84))), f"{env_id}: {path}"
                    checked[path] += 1
    finally:
        KERNEL._set_lookup(previous_lookup)
        KERNEL._set_resize(previous_resize)
    assert min(checked.values()) >= SCREENS_PER_ROM * 90, checked


def test_the_learned_gray_table_gives_ale_own_grayscale_screens(lookup_path):
    """The fused env learns the gray value of each palette index from ALE and then gives ALE's screens
    without asking it; the every-ROM test above compares whole episodes."""
    env = torchwm.make_env("ALE/Breakout-v5")
    core = env._core
    assert core._read_screen == core._read_gray and core._read_last == core._read_last_indices
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


class _CountingALE:
    """An ALEInterface that counts calls to ``getScreenGrayscale`` (and does everything else as it)."""

    def __init__(self, ale):
        self._ale, self.gray_screens = ale, 0

    def getScreenGrayscale(self, *args):
        self.gray_screens += 1
        return self._ale.getScreenGrayscale(*args)

    def __getattr__(self, name):
        return getattr(self._ale, name)


def test_the_fused_env_asks_ale_for_gray_screens_only_for_new_colours(lookup_path):
    """With the kernel, on every lookup path, ALE's own grayscale screen is read only while colours are
    new (the table is learning), not twice a step."""
    env = torchwm.make_env("ALE/Pong-v5")
    core = env._core
    core.ale = counting = _CountingALE(core.ale)
    env.reset(seed=0)
    for _ in range(100):
        env.step(env.action_space.sample())
    learning = counting.gray_screens
    for _ in range(200):
        env.step(env.action_space.sample())
    assert counting.gray_screens - learning <= 2, (learning, counting.gray_screens)
    env.close()


def _native_in_subprocess(code: str, **environment: str):
    import subprocess
    import sys
    import tempfile

    env = {key: value for key, value in os.environ.items() if key != "TORCHWM_ATARI_KERNEL"}
    env.update(environment)
    # Run outside the checkout: `python -c` puts the working directory first on sys.path, and the
    # checkout's torchwm has no compiled kernel where the tests run an installed torchwm.
    return subprocess.run(
        [sys.executable, "-c", f"import torchwm.atari_kernel as n; {code}"],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_torchwm_native_0_turns_the_kernel_off():
    code = "print(n.KERNEL is None, n.kernel_path(), n.kernel_status())"
    result = _native_in_subprocess(code, TORCHWM_NATIVE="0")
    assert result.stdout.startswith("True opencv NumPy and OpenCV (TORCHWM_NATIVE=0)"), result.stderr


@pytest.mark.parametrize("path", atari_kernel.PATHS)
def test_the_switch_forces_each_lookup_path_the_cpu_has(path):
    code = "print(n.kernel_path(), n.KERNEL.resize_path(), n.kernel_status())"
    result = _native_in_subprocess(code, TORCHWM_ATARI_KERNEL=path)
    if path not in KERNEL.lookup_paths():
        # A path this CPU lacks: an error at import that says which paths it has.
        assert result.returncode != 0
        assert (
            f"ValueError: TORCHWM_ATARI_KERNEL={path}: this CPU has no such path "
            f"(it has {', '.join(KERNEL.lookup_paths())})"
        ) in result.stderr
        return
    assert result.returncode == 0, result.stderr
    name, resize, status = result.stdout.split(" ", 2)
    assert name == path
    # The resize a CPU of that kind runs: AVX-512 alongside VBMI, AVX2 with the AVX2 lookup, else SSE2.
    assert resize == {"vbmi": "AVX-512", "avx2": "AVX2", "plain": "SSE2"}[path]
    label = {"vbmi": "AVX-512 VBMI", "avx2": "AVX2", "plain": "plain C"}[path]
    assert f"{label} gray lookup, {resize} max-pool" in status
    assert f"forced by TORCHWM_ATARI_KERNEL={path}" in status


def test_the_switch_refuses_an_unknown_path():
    result = _native_in_subprocess("pass", TORCHWM_ATARI_KERNEL="sse4")
    words = "ValueError: TORCHWM_ATARI_KERNEL: expected one of vbmi, avx2, plain or auto, got 'sse4'"
    assert words in result.stderr


def test_without_the_switch_the_best_path_of_the_cpu_runs():
    result = _native_in_subprocess("print(n.kernel_path(), n.FORCED == '')")
    assert result.stdout.split() == [KERNEL.lookup_paths()[0], "True"], result.stderr
