"""The fused Atari env: the standard Atari wrapper stack as one env that drives ALE directly.

Gymnasium's chain ``FrameStackObservation(AtariPreprocessing(gym.make(id, frameskip=1)))``
spends most of its time outside the emulator: every emulated frame goes through
``gym.make``'s checkers and `AtariEnv.step`, which copies the RGB screen and builds
an info dict, and every agent step deep-copies the frame stack. `FusedAtariEnv` does
the same work with `ale_py.ALEInterface` calls on preallocated buffers: two raw
frames for the max-pool, ``cv2.resize(..., dst=...)`` into a preallocated frame (or
both in torchwm's C kernel where it was built, with the same bytes, together with
the gray screens by the kernel's palette lookup: `torchwm.atari_kernel`) and a ring buffer
for the stack. It mirrors the chain line by line (the RNG draws, the
frames it reads, the stale max-pool buffer when an episode ends inside a frame
skip) so that, for the same seed and actions, it returns exactly the chain's
observations, rewards, flags and infos. ``episodic_life`` and ``fire_reset`` are the
very same wrapper classes the chain uses, placed over the fast core in the order
the stack gives; ``clip_reward`` is Gymnasium's `ClipReward`. It has AtariPreprocessing's
attributes (``screen_size``, ``frame_skip``, ...) with the values Gymnasium's wrapper has.

`build_fused_atari` returns None for a stack it cannot reproduce exactly (see
`unfusable_reason`); `torchwm.factory.build_env` then builds the wrapper chain.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box
from gymnasium.vector.utils import batch_space

from torchwm import atari_kernel
from torchwm.env_state import check_state_keys
from torchwm.errors import UnsupportedStackError
from torchwm.spec import VecSpec
from torchwm.wrappers.atari import check_preprocessing_options, screen_dims
from torchwm.wrappers.atari_stack import AtariStack, parse_for
from torchwm.wrappers.episodic_life import EpisodicLifeEnv
from torchwm.wrappers.fire_reset import FireResetEnv
from torchwm.wrappers.generic import clip_reward


def _atari_env_options() -> set[str]:
    from ale_py.env import AtariEnv

    return set(inspect.signature(AtariEnv.__init__).parameters) - {"self"}


def _atari_kwargs(spec: VecSpec) -> dict[str, Any]:
    from torchwm.names import register_ale

    register_ale()
    return {**gym.registry[spec.id].kwargs, **spec.env_kwargs}


def _fusable_stack(spec: VecSpec) -> AtariStack:
    """The stack the fused env runs for ``spec``; `UnsupportedStackError` says why it cannot."""
    stack = parse_for(spec, "fused")
    unknown = sorted(set(spec.env_kwargs) - _atari_env_options())
    if unknown:
        raise UnsupportedStackError(f"env options {unknown} are not AtariEnv's")
    kwargs = _atari_kwargs(spec)
    checks = {
        "frameskip": 1,
        "obs_type": "rgb",
        "continuous": False,
        "sound_obs": False,
    }
    for key, wanted in checks.items():
        value = kwargs.get(key, wanted)
        if type(value) is not type(wanted) or value != wanted:
            raise UnsupportedStackError(f"env option {key}={value!r} (fused needs {wanted!r})")
    if kwargs.get("render_mode") not in (None, "rgb_array"):
        raise UnsupportedStackError(f"render_mode={kwargs['render_mode']!r}")
    return stack


def unfusable_reason(spec: VecSpec) -> str | None:
    """Why ``spec`` cannot use the fused env, or None when it can.

    Example:
        >>> from torchwm.factory import resolve_spec
        >>> unfusable_reason(resolve_spec("ALE/Pong-v5")) is None
        True
        >>> reason = unfusable_reason(resolve_spec("ALE/Pong-v5", wrappers=["atari_preprocessing", "pixels"]))
        >>> reason.startswith("'pixels' is not one of ('episodic_life', 'fire_reset', 'clip_reward', ")
        True
    """
    try:
        _fusable_stack(spec)
    except UnsupportedStackError as exc:
        return str(exc)
    return None


def build_fused_atari(spec: VecSpec) -> gym.Env | None:
    """The fused env of ``spec``, or None when only the wrapper chain can build it exactly.

    Example:
        >>> from torchwm.factory import resolve_spec
        >>> env = build_fused_atari(resolve_spec("ALE/Pong-v5"))
        >>> type(env).__name__, env.observation_space.shape
        ('FusedAtariEnv', (4, 84, 84))
    """
    try:
        stack = _fusable_stack(spec)
    except UnsupportedStackError:
        return None
    from torchwm.wrappers.atari_rom import make_atari_env

    return FusedAtariEnv(make_atari_env(**_atari_kwargs(spec)), stack)


class AtariPreprocessingCore(gym.Env):
    """`AtariPreprocessing` over an `AtariEnv` with ``frameskip=1``, on ALE calls and fixed buffers.

    Its observation is a preallocated frame that the next step overwrites; the
    layers above copy it (the ring stack) and `FusedAtariEnv` copies it when
    there is no stack.
    """

    def __init__(
        self,
        atari_env: Any,
        *,
        # atari_preprocessing's options, all given (their defaults are the wrapper's, written once there).
        noop_max: int,
        frame_skip: int,
        screen_size: int | tuple[int, int],
        grayscale: bool,
        terminal_on_life_loss: bool,
        scale_obs: bool,
        grayscale_newaxis: bool,
        record_episodes: bool = False,
        buffer_length: int = 100,
    ) -> None:
        # AtariPreprocessing's own range checks, for a core built without a checked spec.
        check_preprocessing_options(
            {"noop_max": noop_max, "frame_skip": frame_skip, "screen_size": screen_size}
        )
        if noop_max > 0 and atari_env.get_action_meanings()[0] != "NOOP":
            # AtariPreprocessing's own check and message (Backgammon, for one).
            raise ValueError("When noop_max > 0, the first action meaning must be 'NOOP'")
        self.atari_env = atari_env
        self.ale = atari_env.ale
        self._game = atari_env._game
        self._action_set = atari_env._action_set
        self.action_space = atari_env.action_space
        self.metadata = atari_env.metadata
        self.render_mode = atari_env.render_mode
        # AtariPreprocessing's attributes, with its values (screen_size is (width, height) there too).
        self.noop_max = noop_max
        self.frame_skip = frame_skip
        self.screen_size = screen_dims(screen_size)
        self.terminal_on_life_loss = terminal_on_life_loss
        self.grayscale_obs = grayscale
        self.grayscale_newaxis = grayscale_newaxis
        self.scale_obs = scale_obs
        self.lives = 0
        # episode_statistics: RecordEpisodeStatistics on the AtariEnv, which counts every frame (no-ops and
        # the frames of the wrappers' own steps included) and its raw reward, and reports at game over.
        self.record_episodes = record_episodes
        self._episode_return: float = 0
        self._episode_length = 0
        self._episode_start = time.perf_counter()
        # RecordEpisodeStatistics's record of the last buffer_length games.
        self.episode_count = 0
        self.return_queue: deque[float] = deque(maxlen=buffer_length)
        self.length_queue: deque[int] = deque(maxlen=buffer_length)
        self.time_queue: deque[float] = deque(maxlen=buffer_length)

        raw_shape = atari_env.observation_space.shape
        raw_shape = raw_shape[:2] if grayscale else raw_shape
        self._raw_frames = (np.empty(raw_shape, dtype=np.uint8), np.empty(raw_shape, dtype=np.uint8))
        self._read_screen = self.ale.getScreenGrayscale if grayscale else self.ale.getScreenRGB
        self._read_last = self._read_screen  # the screen pooled last, at the frame skip's end
        self._palette_lookup: Any = None
        self._pending = False  # the last screen is in _last_indices, not yet in _raw_frames[0]
        if grayscale and atari_kernel.fast_gray_lookup() and atari_kernel.KERNEL is not None:
            # ALE's palette indices through a table of gray values learned from ALE's own grayscale
            # screens: a new colour is read from ALE once, so every value is one ALE gave.
            self._palette_lookup = atari_kernel.KERNEL.palette_lookup
            self._palette_indices = np.empty(raw_shape, dtype=np.uint8)
            self._last_indices = np.empty(raw_shape, dtype=np.uint8)
            self._gray_table = np.zeros((2, 256), dtype=np.uint8)  # gray value, then 255 where known
            self._read_screen = self._read_gray
        width, height = self.screen_size
        self._dsize = (width, height)  # cv2's order
        frame_shape = (height, width) if grayscale else (height, width, 3)
        self._resized = np.zeros(frame_shape, dtype=np.uint8)
        # The C kernel where it was built and takes this size (cv2.resize otherwise, the same bytes).
        self._kernel = (
            atari_kernel.KERNEL if atari_kernel.kernel_handles(raw_shape, (height, width)) else None
        )
        if self._kernel is not None and self._palette_lookup is not None:
            # The last screen's indices are kept and turned gray, pooled and resized in one kernel call
            # (`_frame`): the lookup writes the pooled frame, a pass fewer than a lookup then a max.
            self._read_last = self._read_last_indices
        self._scaled = np.zeros(frame_shape, dtype=np.float32) if scale_obs else None
        # Gray frames with a channel axis: the same buffers seen as (h, w, 1).
        self._newaxis = grayscale and grayscale_newaxis
        obs_shape = (*frame_shape, 1) if self._newaxis else frame_shape
        if scale_obs:
            self.observation_space = Box(low=0, high=1, shape=obs_shape, dtype=np.float32)
        else:
            self.observation_space = Box(low=0, high=255, shape=obs_shape, dtype=np.uint8)

    def get_action_meanings(self) -> list[str]:
        return self.atari_env.get_action_meanings()

    def _counters(self) -> dict[str, Any]:
        ale = self.ale
        return {
            "lives": ale.lives(),
            "episode_frame_number": ale.getEpisodeFrameNumber(),
            "frame_number": ale.getFrameNumber(),
        }

    def _read_gray(self, out: np.ndarray) -> None:
        """``ale.getScreenGrayscale(out)``, by the kernel's palette lookup (`torchwm.atari_kernel`)."""
        indices = self._palette_indices
        self.ale.getScreen(indices)
        if not self._palette_lookup(indices, self._gray_table, out):
            self._learn(indices, out)

    def _learn(self, indices: np.ndarray, out: np.ndarray) -> None:
        """A colour not seen yet: the screen from ALE (still the one of ``indices``), and its values
        learned."""
        self.ale.getScreenGrayscale(out)
        self._gray_table[0, indices] = out
        self._gray_table[1, indices] = 255

    def _read_last_indices(self, out: np.ndarray) -> None:
        """The last screen of a step: its indices now, its gray frame in `_frame` (``out`` is
        ``_raw_frames[0]``, which `_frame` fills)."""
        self.ale.getScreen(self._last_indices)
        self._pending = True

    def _frame(self) -> np.ndarray:
        raw = self._raw_frames[0]
        other = self._raw_frames[1] if self.frame_skip > 1 else None
        folded = False
        if self._pending:
            self._pending = False
            assert self._kernel is not None  # _read_last_indices runs only with the kernel
            # Gray, max-pool and resize at once; the max stays in raw as below. A colour not seen yet:
            # ALE still shows that screen (only read-only calls came since), so it is learned here.
            folded = self._kernel.palette_max_area_resize(
                self._last_indices, self._gray_table, raw, other, self._resized
            )
            if not folded:
                self._learn(self._last_indices, raw)
        if not folded and self._kernel is not None:  # both steps below in one call, the max kept in raw
            self._kernel.max_area_resize(raw, other, self._resized)
        elif not folded:
            if other is not None:
                np.maximum(raw, other, out=raw)
            import cv2  # here: a process that makes a vector env but steps no Atari env (the parent) skips it

            cv2.resize(raw, self._dsize, dst=self._resized, interpolation=cv2.INTER_AREA)
        frame: np.ndarray = self._resized
        if self._scaled is not None:
            # The chain's float32 array divided by a Python float: the same float32 division.
            np.divide(self._resized, np.float32(255.0), out=self._scaled)
            frame = self._scaled
        return frame[..., np.newaxis] if self._newaxis else frame

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        ale = self.ale
        ale_action = self._action_set[action]
        frame_skip = self.frame_skip
        total_reward = 0.0
        terminated = truncated = False
        game_over = False
        for t in range(frame_skip):
            # AtariEnv.step sums into a float, frame by frame; so does AtariPreprocessing.
            frame_reward = 0.0 + ale.act(ale_action, 1.0)
            total_reward += frame_reward
            if self.record_episodes:
                self._episode_return += frame_reward
                self._episode_length += 1
            if ale.game_over():  # terminal or truncated: tell the two apart only then
                game_over = True
                terminated = ale.game_over(with_truncation=False)
                truncated = ale.game_truncated()
            if self.terminal_on_life_loss:
                lives = ale.lives()
                terminated = terminated or lives < self.lives
                self.lives = lives
            if terminated or truncated:
                # As AtariPreprocessing: the raw frames keep what they held (a stale max-pool).
                break
            if t == frame_skip - 2:
                self._read_screen(self._raw_frames[1])
            elif t == frame_skip - 1:
                self._read_last(self._raw_frames[0])
        info = self._counters()
        if game_over and self.record_episodes:
            seconds = round(time.perf_counter() - self._episode_start, 6)
            info["episode"] = {"r": self._episode_return, "l": self._episode_length, "t": seconds}
            self.episode_count += 1
            self.return_queue.append(self._episode_return)
            self.length_queue.append(self._episode_length)
            self.time_queue.append(seconds)
        return self._frame(), total_reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        atari_env = self.atari_env
        ale = self.ale
        _, reset_info = atari_env.reset(seed=seed, options=options)
        self._start_episode()
        # The draw AtariPreprocessing makes, from the same generator, after the same reset.
        noops = atari_env.np_random.integers(1, self.noop_max + 1) if self.noop_max > 0 else 0
        noop_action = self._action_set[0]
        for _ in range(noops):
            reward = 0.0 + ale.act(noop_action, 1.0)
            if self.record_episodes:
                self._episode_return += reward
                self._episode_length += 1
            if ale.game_over():
                _, reset_info = atari_env.reset(seed=seed, options=options)
                self._start_episode()
        reset_info.update(self._counters())
        self.lives = ale.lives()
        self._raw_frames[1].fill(0)
        self._read_last(self._raw_frames[0])
        return self._frame(), reset_info

    def _start_episode(self) -> None:
        """What RecordEpisodeStatistics.reset does on the AtariEnv's reset."""
        self._episode_return, self._episode_length = 0, 0
        self._episode_start = time.perf_counter()

    def render(self) -> Any:
        return self.atari_env.render()

    def close(self) -> None:
        self.atari_env.close()

    # Its state for clone_state (torchwm.plugin_api.StatefulLayer): the max-pool's raw frames, the lives it
    # counts and the episode statistics. The AtariEnv under it is the next layer, saved by its own rule.
    _STATE_KEYS = (
        "raw_frames",
        "lives",
        "episode_return",
        "episode_length",
        "episode_seconds",
        "episode_count",
        "queues",
    )

    def torchwm_layer_below(self) -> Any:
        return self.atari_env

    def get_torchwm_state(self) -> dict[str, Any]:
        assert not self._pending, "the fused core is saved between steps only"
        return {
            "raw_frames": tuple(frame.copy() for frame in self._raw_frames),
            "lives": self.lives,
            "episode_return": self._episode_return,
            "episode_length": self._episode_length,
            "episode_seconds": time.perf_counter() - self._episode_start,
            "episode_count": self.episode_count,
            "queues": (deque(self.return_queue), deque(self.length_queue), deque(self.time_queue)),
        }

    def set_torchwm_state(self, state: dict[str, Any]) -> None:
        for frame, saved in zip(self._raw_frames, state["raw_frames"], strict=True):
            frame[...] = saved
        self.lives = state["lives"]
        self._episode_return = state["episode_return"]
        self._episode_length = state["episode_length"]
        self._episode_start = time.perf_counter() - state["episode_seconds"]
        self.episode_count = state["episode_count"]
        # In place: the fused env hands out these same deques (its return_queue, ...).
        queues: tuple[deque[Any], ...] = (self.return_queue, self.length_queue, self.time_queue)
        for queue, saved in zip(queues, state["queues"], strict=True):
            queue.clear()
            queue.extend(saved)

    @classmethod
    def check_torchwm_state(cls, state: Any) -> None:
        check_state_keys("AtariPreprocessingCore", state, cls._STATE_KEYS)


class RingFrameStack(gym.Wrapper):
    """`FrameStackObservation` on a ring buffer: one frame copy in, one fresh stacked array out."""

    def __init__(self, env: gym.Env, stack_size: int = 4, padding: str = "zero") -> None:
        super().__init__(env)
        frame_space = env.observation_space
        self.observation_space = batch_space(frame_space, n=stack_size)
        self.stack_size = stack_size
        self.padding = padding
        assert frame_space.shape is not None  # the core's Box
        self._ring = np.zeros((stack_size, *frame_space.shape), dtype=frame_space.dtype)
        self._oldest = 0  # the ring slot of the oldest frame, which the next frame replaces

    def _push(self, frame: np.ndarray) -> np.ndarray:
        self._ring[self._oldest] = frame
        self._oldest = (self._oldest + 1) % self.stack_size
        oldest = self._oldest
        if oldest == 0:
            return self._ring.copy()
        return np.concatenate((self._ring[oldest:], self._ring[:oldest]))

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        frame, reward, terminated, truncated, info = self.env.step(action)
        return self._push(frame), reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        frame, info = self.env.reset(seed=seed, options=options)
        if self.padding == "reset":
            self._ring[:] = frame
        else:
            self._ring.fill(0)
        self._oldest = 0
        return self._push(frame), info

    # Its state for clone_state (torchwm.plugin_api.StatefulLayer): the ring and where it starts.
    def get_torchwm_state(self) -> dict[str, Any]:
        return {"ring": self._ring.copy(), "oldest": self._oldest}

    def set_torchwm_state(self, state: dict[str, Any]) -> None:
        ring = state["ring"]
        if np.shape(ring) != self._ring.shape:
            raise ValueError(f"a frame stack of shape {np.shape(ring)} given to one of {self._ring.shape}")
        self._ring[...] = ring
        self._oldest = state["oldest"]

    @staticmethod
    def check_torchwm_state(state: Any) -> None:
        check_state_keys("RingFrameStack", state, ("ring", "oldest"))


def _core_attribute(name: str) -> property:
    return property(
        lambda self: getattr(self._core, name),
        doc=f"AtariPreprocessing's ``{name}``, with the value Gymnasium's wrapper has.",
    )


class FusedAtariEnv(gym.Env):
    """One env equal to an Atari wrapper stack: `atari_preprocessing` then the others, in order.

    Args:
        atari_env: an `ale_py.env.AtariEnv` made with ``frameskip=1``.
        stack: the parsed stack (`torchwm.wrappers.atari_stack.parse_atari_stack`; use `build_fused_atari`,
            which also checks the env options).

    Observations are fresh arrays that later steps never change.

    Example:
        >>> import torchwm
        >>> stack = ["atari_preprocessing", "fire_reset", "frame_stack"]
        >>> env = torchwm.make_env("ALE/Breakout-v5", wrappers=stack)
        >>> type(env).__name__
        'FusedAtariEnv'
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, info["lives"]
        ((4, 84, 84), 5)
    """

    def __init__(self, atari_env: Any, stack: AtariStack) -> None:
        statistics = stack.wrappers[0].kwargs if stack.episode_statistics else {}
        core = AtariPreprocessingCore(
            atari_env, **stack.preprocessing, record_episodes=stack.episode_statistics, **statistics
        )
        top: gym.Env = core
        for layer in stack.layers:
            if layer.name == "frame_stack":
                top = RingFrameStack(top, layer.kwargs["stack_size"], layer.kwargs["padding"])
            elif layer.name == "episodic_life":
                top = EpisodicLifeEnv(top)
            elif layer.name == "fire_reset":
                top = FireResetEnv(top)
            else:  # clip_reward: parse_atari_stack lets no other name through
                top = clip_reward(top, **layer.kwargs)
        self._core = core
        self._top = top
        # The core's frame is a buffer the next step overwrites; a ring stack returns fresh arrays.
        self._copy_obs = not stack.has("frame_stack")
        self._needs_reset = True
        # A RomOnceAtariEnv loads its ROM at its first reset; a read of the emulator before it loads it then.
        self._load_rom = getattr(atari_env, "load_rom", lambda: None)
        self.action_space = core.action_space
        self.observation_space = top.observation_space
        self.metadata = core.metadata
        self.render_mode = core.render_mode
        self.stack = stack.wrappers
        if stack.episode_statistics:
            # RecordEpisodeStatistics's attributes, as get_wrapper_attr finds them in the chain.
            self.return_queue = core.return_queue
            self.length_queue = core.length_queue
            self.time_queue = core.time_queue

    # AtariPreprocessing's attributes, read-only: they are the options the fused env was built with.
    noop_max = _core_attribute("noop_max")
    frame_skip = _core_attribute("frame_skip")
    screen_size = _core_attribute("screen_size")
    terminal_on_life_loss = _core_attribute("terminal_on_life_loss")
    grayscale_obs = _core_attribute("grayscale_obs")
    grayscale_newaxis = _core_attribute("grayscale_newaxis")
    scale_obs = _core_attribute("scale_obs")

    @property
    def episode_count(self) -> int:
        """Games recorded by ``episode_statistics`` (RecordEpisodeStatistics's count)."""
        if not self._core.record_episodes:
            raise AttributeError("episode_count: the stack has no episode_statistics")
        return self._core.episode_count

    @property
    def np_random(self) -> np.random.Generator:
        """The AtariEnv's generator, the one the no-op draws come from."""
        return self._core.atari_env.np_random

    @np_random.setter
    def np_random(self, value: np.random.Generator) -> None:
        # Given to the AtariEnv, as the chain's wrappers pass it down to theirs.
        self._core.atari_env.np_random = value

    @property
    def np_random_seed(self) -> int:
        """The AtariEnv's seed, as the chain reports it (-1 after ``np_random`` was set directly)."""
        return self._core.atari_env.np_random_seed

    # What Gymnasium's env checker inspects; read-only here: the AtariEnv's, which np_random's setter
    # replaces.
    @property
    def _np_random(self) -> np.random.Generator | None:  # type: ignore[override]
        return self._core.atari_env._np_random

    @property
    def atari_env(self) -> Any:
        """The `ale_py.env.AtariEnv` underneath."""
        self._load_rom()
        return self._core.atari_env

    @property
    def ale(self) -> Any:
        """The AtariEnv's ``ale_py.ALEInterface``."""
        self._load_rom()
        return self._core.ale

    def get_action_meanings(self) -> list[str]:
        return self._core.get_action_meanings()

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            # What gym.make's OrderEnforcing says in the chain.
            raise gym.error.ResetNeeded("Cannot call env.step() before calling env.reset()")
        obs, reward, terminated, truncated, info = self._top.step(action)
        return (obs.copy() if self._copy_obs else obs), reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self._top.reset(seed=seed, options=options)
        self._needs_reset = False
        return (obs.copy() if self._copy_obs else obs), info

    def render(self) -> Any:
        return self._core.render()

    def close(self) -> None:
        self._core.close()

    # Its state for clone_state (torchwm.plugin_api.StatefulLayer): whether it was reset. Its own stack of
    # layers (the wrappers over the core, the core, the AtariEnv) is saved under it, layer by layer.
    def torchwm_layer_below(self) -> gym.Env:
        return self._top

    def get_torchwm_state(self) -> dict[str, Any]:
        return {"needs_reset": self._needs_reset}

    def set_torchwm_state(self, state: dict[str, Any]) -> None:
        self._needs_reset = state["needs_reset"]

    @staticmethod
    def check_torchwm_state(state: Any) -> None:
        check_state_keys("FusedAtariEnv", state, ("needs_reset",))

    def __repr__(self) -> str:
        stack = ", ".join(repr(w) for w in self.stack)
        return f"<FusedAtariEnv {self._core._game!r} [{stack}]>"
