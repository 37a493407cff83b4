"""The fused Atari env gives exactly the wrapper chain's arrays, and is used only where it can.

Every comparison runs the same spec twice, ``fused=True`` and ``fused=False`` (the
Gymnasium wrapper chain), with the same seed and seeded random actions, over
several episodes, and asserts equal observations, rewards, flags and infos.
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.factory import resolve_spec
from torchwm.wrappers.atari_fused import FusedAtariEnv, build_fused_atari, unfusable_reason

FULL_STACK = ["atari_preprocessing", "episodic_life", "fire_reset", "clip_reward", "frame_stack"]

# (id, wrappers, env kwargs, steps): a game with FIRE and lives under episodic_life + fire_reset,
# v5 ids with sticky actions 0.25, a v4 id, each option of atari_preprocessing, and the
# optional wrappers in other orders.
SINGLE_CASES = {
    "breakout-full-stack": ("ALE/Breakout-v5", FULL_STACK, {}, 900),
    "breakout-fire-below-episodic": (
        "ALE/Breakout-v5",
        ["atari_preprocessing", "fire_reset", "frame_stack", "episodic_life"],
        {},
        700,
    ),
    "space-invaders-default": ("ALE/SpaceInvaders-v5", None, {"max_num_frames_per_episode": 800}, 700),
    "breakout-v4-life-loss-no-skip": (
        "BreakoutNoFrameskip-v4",
        [{"name": "atari_preprocessing", "terminal_on_life_loss": True, "frame_skip": 1, "noop_max": 0}],
        {},
        900,
    ),
    "pong-rgb-scaled-reset-padding": (
        "ALE/Pong-v5",
        [
            {"name": "atari_preprocessing", "grayscale": False, "scale_obs": True, "screen_size": 64},
            {"name": "frame_stack", "stack_size": 3, "padding": "reset"},
            "clip_reward",
        ],
        {"max_num_frames_per_episode": 400},
        400,
    ),
    "ms-pacman-skip-3": (
        "ALE/MsPacman-v5",
        [{"name": "atari_preprocessing", "frame_skip": 3, "noop_max": 5}, "episodic_life"],
        {"max_num_frames_per_episode": 1500},
        700,
    ),
}


def assert_same_run(env_id, wrappers, env_kwargs, steps, seed=0, min_episodes=3):
    fused = torchwm.make_env(env_id, wrappers=wrappers, **env_kwargs)
    chain = torchwm.make_env(env_id, wrappers=wrappers, fused=False, **env_kwargs)
    assert isinstance(fused, FusedAtariEnv)
    assert not isinstance(chain.unwrapped, FusedAtariEnv)
    assert fused.observation_space == chain.observation_space
    assert fused.action_space == chain.action_space

    obs_f, info_f = fused.reset(seed=seed)
    obs_c, info_c = chain.reset(seed=seed)
    assert obs_f.dtype == obs_c.dtype and np.array_equal(obs_f, obs_c)
    assert info_f == info_c
    rng = np.random.default_rng(seed)
    episodes = 0
    for t in range(steps):
        action = int(rng.integers(fused.action_space.n))
        got, expected = fused.step(action), chain.step(action)
        assert np.array_equal(got[0], expected[0]), f"observation differs at step {t}"
        assert got[1:4] == expected[1:4], f"reward/terminated/truncated differ at step {t}"
        assert got[4] == expected[4], f"info differs at step {t}"
        if got[2] or got[3]:
            episodes += 1
            obs_f, info_f = fused.reset()
            obs_c, info_c = chain.reset()
            assert np.array_equal(obs_f, obs_c) and info_f == info_c, f"reset after step {t} differs"
    assert episodes >= min_episodes, f"only {episodes} episodes in {steps} steps"
    fused.close()
    chain.close()


@pytest.mark.parametrize("case", list(SINGLE_CASES))
def test_single_env_equals_chain(case):
    assert_same_run(*SINGLE_CASES[case])


VECTOR_CASES = [
    ("ALE/Breakout-v5", FULL_STACK, {}),
    ("ALE/Pong-v5", None, {"max_num_frames_per_episode": 500}),
    (
        "ALE/Freeway-v5",
        ["atari_preprocessing", "clip_reward", "frame_stack"],
        {"max_num_frames_per_episode": 500},
    ),
]


@pytest.mark.parametrize(("env_id", "wrappers", "env_kwargs"), VECTOR_CASES, ids=[c[0] for c in VECTOR_CASES])
def test_sync_vector_fused_equals_chain(env_id, wrappers, env_kwargs):
    runs = []
    for fused in (True, False):
        envs = torchwm.make_vec(
            env_id, 3, backend="sync", wrappers=wrappers, seed=5, fused=fused, **env_kwargs
        )
        assert isinstance(envs.envs[0], FusedAtariEnv) is fused
        envs.action_space.seed(5)
        obs, infos = envs.reset()
        steps = [(obs, infos["lives"], infos["episode_frame_number"])]
        for _ in range(300):
            obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
            steps.append((obs, rewards, terminations, truncations, infos["lives"], infos["frame_number"]))
        envs.close()
        runs.append(steps)
    fused_steps, chain_steps = runs
    ends = sum(int(np.sum(s[2] | s[3])) for s in chain_steps[1:])
    assert ends >= 3, f"the run should cross episode ends, saw {ends}"
    for t, (got, expected) in enumerate(zip(fused_steps, chain_steps, strict=True)):
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), f"batch {t} differs"


def gymnasium_chain(env_id="ALE/Pong-v5"):
    """Gymnasium's own construction of the default stack."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    return FrameStackObservation(AtariPreprocessing(gym.make(env_id, frameskip=1)), 4)


def seed_reports(env):
    """What an env says of its seed along seeded and unseeded resets, and whether its generator is that
    seed's."""
    reports = []
    for seed in (42, None, 7):
        env.reset(seed=seed)
        reports.append((env.np_random_seed, env.np_random.bit_generator.state))
    env.np_random = np.random.default_rng(3)  # set directly: Gymnasium's seed is then unknown (-1)
    reports.append((env.np_random_seed, env.np_random.bit_generator.state))
    env.close()
    return reports


def test_np_random_seed_is_the_atari_envs_as_in_gymnasiums_chain():
    fused = build_fused_atari(resolve_spec("ALE/Pong-v5"))
    assert isinstance(fused, FusedAtariEnv)
    got, expected = seed_reports(fused), seed_reports(gymnasium_chain())
    assert [seed for seed, _ in expected] == [42, 42, 7, -1]
    assert got == expected


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_vector_np_random_seed_on_the_fused_path(backend):
    with torchwm.make_vec("ALE/Pong-v5", 2, backend=backend) as envs:
        assert envs.get_attr("stack")[0][0].name == "atari_preprocessing"  # a FusedAtariEnv's attribute
        envs.reset()
        # Never seeded: the AtariEnv draws a seed when asked, as Gymnasium's chain does, and its
        # generator is then that seed's (not -1, the vector env's "unknown").
        seeds = envs.np_random_seed
        assert all(isinstance(s, int) and s >= 0 for s in seeds) and seeds[0] != seeds[1]
        for seed, generator in zip(seeds, envs.np_random, strict=True):
            assert generator.bit_generator.state == np.random.default_rng(seed).bit_generator.state
        envs.reset(seed=42)
        envs.reset()
        assert envs.np_random_seed == (42, 43)
        reference = gym.vector.SyncVectorEnv([gymnasium_chain] * 2)
        reference.reset(seed=42)
        reference.reset()
        assert reference.np_random_seed == envs.np_random_seed
        reference.close()


def test_default_make_env_is_fused_with_the_chain_space():
    env = torchwm.make_env("ALE/Pong-v5")
    assert isinstance(env, FusedAtariEnv)
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert isinstance(torchwm.make_env("ALE/Pong-v5", fused=False), gym.wrappers.FrameStackObservation)


@pytest.mark.parametrize("wrappers", [FULL_STACK[:-1], FULL_STACK], ids=["no-stack", "stack"])
def test_returned_observations_are_not_changed_by_later_steps(wrappers):
    env = torchwm.make_env("ALE/Breakout-v5", wrappers=wrappers)
    first, _ = env.reset(seed=1)
    kept = first.copy()
    second = env.step(1)[0]
    kept_second = second.copy()
    for _ in range(20):
        env.step(2)
    assert np.array_equal(first, kept) and np.array_equal(second, kept_second)
    assert not np.array_equal(first, env.step(3)[0]) or not np.array_equal(second, kept)


def test_step_before_reset_raises_as_the_chain_does():
    env = torchwm.make_env("ALE/Pong-v5")
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)
    with pytest.raises(gym.error.ResetNeeded):
        torchwm.make_env("ALE/Pong-v5", fused=False).step(0)


@pytest.mark.parametrize(
    ("wrappers", "env_kwargs", "reason"),
    [
        (["atari_preprocessing", lambda env: env], {}, "callable"),
        (
            ["atari_preprocessing", {"name": "resize", "width": 42, "height": 42}],
            {},
            "'resize' is not one of",
        ),
        (["atari_preprocessing", "frame_stack", "frame_stack"], {}, "fused supports one"),
        (["frame_stack"], {}, "does not start with atari_preprocessing"),
        ([], {}, "does not start with atari_preprocessing"),
        (None, {"obs_type": "grayscale"}, "obs_type"),
        # (ALE's frameskip under atari_preprocessing's own frame_skip is refused by resolve_spec.)
        ([{"name": "atari_preprocessing", "frame_skip": 1}, "frame_stack"], {"frameskip": 2}, "frameskip"),
        (None, {"render_mode": "human"}, "render_mode"),
    ],
)
def test_stacks_it_cannot_reproduce_use_the_chain(wrappers, env_kwargs, reason):
    spec = resolve_spec("ALE/Breakout-v5", wrappers=wrappers, env_kwargs=env_kwargs)
    assert reason in unfusable_reason(spec)
    assert build_fused_atari(spec) is None


def test_generic_envs_and_other_sources_are_not_fused():
    assert "not an Atari (ALE) env" in unfusable_reason(resolve_spec("CartPole-v1"))
    assert unfusable_reason(resolve_spec("ALE/Pong-v5", source="ale")) is None
    assert "source" in unfusable_reason(resolve_spec("ALE/Pong-v5").replace(source="plugin"))


def test_ale_source_fused_equals_gym_source_chain():
    fused = torchwm.make_env("ALE/Breakout-v5", source="ale")
    chain = torchwm.make_env("ALE/Breakout-v5", fused=False)
    assert isinstance(fused, FusedAtariEnv)
    a, _ = fused.reset(seed=4)
    b, _ = chain.reset(seed=4)
    assert np.array_equal(a, b)
    for action in np.random.default_rng(4).integers(4, size=200):
        got, expected = fused.step(int(action)), chain.step(int(action))
        assert np.array_equal(got[0], expected[0]) and got[1:4] == expected[1:4]
        if got[2] or got[3]:
            break


def test_fused_env_exposes_ale_and_renders():
    env = torchwm.make_env("ALE/Breakout-v5", render_mode="rgb_array")
    assert isinstance(env, FusedAtariEnv)
    env.reset(seed=0)
    assert env.get_action_meanings() == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    assert env.unwrapped.ale.lives() == 5
    assert np.array_equal(env.render(), env.ale.getScreenRGB())


def _v5_ids() -> list[str]:
    import ale_py.roms

    from torchwm.names import register_ale

    register_ale()
    names = (rom.title().replace("_", "") for rom in ale_py.roms.get_all_rom_ids())
    return [f"ALE/{name}-v5" for name in names if f"ALE/{name}-v5" in gym.registry]


@pytest.fixture
def plain_lookup():
    """The kernel's plain gray lookup, forced (as TORCHWM_ATARI_KERNEL=plain does): the every-ROM test
    runs it end to end against the chain; the vector paths are compared with it and with ALE's screens on
    every ROM in tests/test_atari_kernel.py, and the CPU's own path runs in every other test here."""
    from torchwm import atari_kernel

    if atari_kernel.KERNEL is None:
        yield None
        return
    previous = atari_kernel.KERNEL._set_lookup("plain")
    yield "plain"
    atari_kernel.KERNEL._set_lookup(previous)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_rom_fused_equals_chain_for_80_steps(plain_lookup):
    ids = _v5_ids()
    assert len(ids) > 90
    refused = []
    for env_id in ids:
        try:
            chain = torchwm.make_env(env_id, fused=False)
        except ValueError as error:
            # A game whose first action is not NOOP: the fused env refuses it with the same error.
            with pytest.raises(ValueError, match=re.escape(str(error))):
                torchwm.make_env(env_id)
            refused.append(env_id)
            continue
        fused = torchwm.make_env(env_id)
        a, info_a = fused.reset(seed=0)
        b, info_b = chain.reset(seed=0)
        assert np.array_equal(a, b) and info_a == info_b, env_id
        rng = np.random.default_rng(0)
        for t in range(80):
            action = int(rng.integers(fused.action_space.n))
            got, expected = fused.step(action), chain.step(action)
            assert np.array_equal(got[0], expected[0]), f"{env_id}: observation differs at step {t}"
            assert got[1:] == expected[1:], f"{env_id}: step {t} differs"
            if got[2] or got[3]:
                assert np.array_equal(fused.reset()[0], chain.reset()[0]), env_id
        fused.close()
        chain.close()
    assert len(refused) < 5, refused


# -- frame sizes: Gymnasium's own chain, any (width, height), with the C kernel and with OpenCV -------------

# (id, atari_preprocessing options beyond screen_size, frame limit): a gray game, a gray game with a channel
# axis (FIRE and lives), an RGB game.
SIZE_GAMES = {
    "pong": ("ALE/Pong-v5", {}, 600),
    "breakout-newaxis": ("ALE/Breakout-v5", {"grayscale_newaxis": True}, 800),
    "ms-pacman-rgb": ("ALE/MsPacman-v5", {"grayscale": False}, 700),
}
SCREEN_SIZES = [84, (64, 96), (96, 64), (160, 210)]


def gymnasium_atari_chain(env_id, frames, *, grayscale=True, **options):
    """Gymnasium's own FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)), 4) with
    ``options``."""
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    env = gym.make(env_id, frameskip=1, max_num_frames_per_episode=frames)
    return FrameStackObservation(
        AtariPreprocessing(env, grayscale_obs=grayscale, **options), 4, padding_type="zero"
    )


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "opencv"])
@pytest.mark.parametrize("screen_size", SCREEN_SIZES, ids=str)
@pytest.mark.parametrize("game", list(SIZE_GAMES))
def test_fused_equals_gymnasiums_chain_at_any_screen_size(game, screen_size, kernel):
    from torchwm import atari_kernel

    env_id, options, frames = SIZE_GAMES[game]
    if kernel and atari_kernel.KERNEL is None:
        pytest.skip(f"the C kernel is off here: {atari_kernel.kernel_status()}")
    wrappers = [{"name": "atari_preprocessing", "screen_size": screen_size, **options}, "frame_stack"]
    fused = torchwm.make_env(env_id, wrappers=wrappers, max_num_frames_per_episode=frames)
    assert isinstance(fused, FusedAtariEnv)
    if not kernel:  # ALE's gray screens and the OpenCV path, as without the kernel (TORCHWM_NATIVE=0)
        core = fused._core
        core._kernel = None
        if core._palette_lookup is not None:
            core._read_screen = core._read_last = core.ale.getScreenGrayscale
    elif screen_size != (160, 210):  # 210x160 frames at their own size are a copy, which cv2 does
        assert fused._core._kernel is not None
    chain = gymnasium_atari_chain(env_id, frames, screen_size=screen_size, **options)
    width, height = (screen_size, screen_size) if isinstance(screen_size, int) else screen_size
    channels = (3,) if options.get("grayscale") is False else (1,) if options.get("grayscale_newaxis") else ()
    assert fused.observation_space == chain.observation_space
    assert fused.observation_space.shape == (4, height, width, *channels)

    rng = np.random.default_rng(1)
    got, expected = fused.reset(seed=3), chain.reset(seed=3)
    episodes = 0
    for t in range(300):
        assert np.array_equal(got[0], expected[0]) and got[-1] == expected[-1], f"step {t}"
        if t and (got[2] or got[3]):
            episodes += 1
            got, expected = fused.reset(), chain.reset()
            assert np.array_equal(got[0], expected[0]) and got[1] == expected[1], f"reset after step {t}"
        action = int(rng.integers(fused.action_space.n))
        got, expected = fused.step(action), chain.step(action)
        assert got[1:4] == expected[1:4], f"reward/terminated/truncated differ at step {t}"
    assert episodes >= 1, "the run should cross an episode end"
    fused.close()
    chain.close()


@pytest.mark.parametrize("screen_size", [(64, 96), [96, 64]], ids=["tuple", "list-from-a-config-file"])
def test_screen_size_is_width_then_height_on_the_sync_and_shmem_backends(screen_size):
    wrappers = [{"name": "atari_preprocessing", "screen_size": screen_size}, "frame_stack"]
    width, height = screen_size
    for backend in ("sync", "shmem"):
        with torchwm.make_vec("ALE/Pong-v5", 2, backend=backend, wrappers=wrappers, seed=0) as envs:
            obs, _ = envs.reset()
            assert obs.shape == (2, 4, height, width)
            assert envs.get_attr("screen_size") == ((width, height),) * 2


# -- AtariPreprocessing's attributes -------------------------------------------------------------------------

PREPROCESSING_ATTRIBUTES = (
    "screen_size",
    "frame_skip",
    "noop_max",
    "terminal_on_life_loss",
    "grayscale_obs",
    "grayscale_newaxis",
    "scale_obs",
)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {
            "screen_size": (64, 96),
            "frame_skip": 3,
            "noop_max": 5,
            "terminal_on_life_loss": True,
            "scale_obs": True,
        },
        {"screen_size": 72, "grayscale": False, "grayscale_newaxis": True, "noop_max": 0, "frame_skip": 1},
    ],
    ids=["defaults", "changed", "rgb"],
)
def test_fused_env_has_atari_preprocessings_attributes(options):
    from gymnasium.wrappers import AtariPreprocessing

    gym_options = {("grayscale_obs" if key == "grayscale" else key): value for key, value in options.items()}
    reference = AtariPreprocessing(gym.make("ALE/Breakout-v5", frameskip=1), **gym_options)
    expected = {name: getattr(reference, name) for name in PREPROCESSING_ATTRIBUTES}
    wrappers = [{"name": "atari_preprocessing", **options}, "frame_stack"]
    fused = torchwm.make_env("ALE/Breakout-v5", wrappers=wrappers)
    assert isinstance(fused, FusedAtariEnv)
    assert {name: fused.get_wrapper_attr(name) for name in PREPROCESSING_ATTRIBUTES} == expected
    assert {name: getattr(fused, name) for name in PREPROCESSING_ATTRIBUTES} == expected
    for backend in ("sync", "shmem"):
        with torchwm.make_vec("ALE/Breakout-v5", 2, backend=backend, wrappers=wrappers) as envs:
            assert {name: envs.get_attr(name) for name in PREPROCESSING_ATTRIBUTES} == {
                name: (value, value) for name, value in expected.items()
            }
    with pytest.raises(AttributeError):
        fused.frame_skip = 2  # the options the env was built with: setting one would change nothing
    reference.close()
    fused.close()


def test_fused_env_keeps_record_episode_statistics_queues_as_the_chain():
    wrappers = [{"name": "episode_statistics", "buffer_length": 2}, "atari_preprocessing", "frame_stack"]
    runs = []
    for fused in (True, False):
        env = torchwm.make_env("ALE/Pong-v5", wrappers=wrappers, fused=fused, max_num_frames_per_episode=200)
        assert isinstance(env, FusedAtariEnv) is fused
        env.reset(seed=0)
        for _ in range(200):
            if any(env.step(0)[2:4]):
                env.reset()
        runs.append(
            (
                env.get_wrapper_attr("episode_count"),
                list(env.get_wrapper_attr("return_queue")),
                list(env.get_wrapper_attr("length_queue")),
                env.get_wrapper_attr("time_queue").maxlen,
            )
        )
        env.close()
    assert runs[0] == runs[1]
    assert runs[0][0] >= 3 and len(runs[0][1]) == 2 and runs[0][3] == 2
