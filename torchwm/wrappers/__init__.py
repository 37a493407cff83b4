"""The built-in wrappers, registered under the names the docs and config files use.

Each name maps to a factory ``factory(env, **options) -> env`` whose keyword
options (with their annotations and defaults) are what a config may set;
`torchwm.spec` checks option names and types against these signatures before
anything is built. The Atari-only ones are registered with ``family="atari"``.
The classes live in their own modules: `atari`, `episodic_life`, `fire_reset`,
`generic`; `atari_fused` replaces a whole Atari stack with one faster env (its emulator from
`atari_rom`, which loads each env's ROM once), and `atari_stack` reads a spec's Atari stack for every
fast path.
"""

from __future__ import annotations

from torchwm.hookspecs import Register, hookimpl
from torchwm.wrappers.atari import atari_preprocessing
from torchwm.wrappers.episode_statistics import episode_statistics
from torchwm.wrappers.episodic_life import EpisodicLifeEnv, episodic_life
from torchwm.wrappers.fire_reset import FireResetEnv, fire_reset
from torchwm.wrappers.generic import clip_reward, frame_stack, pixels, resize
from torchwm.wrappers.record_video import record_video

__all__ = [
    "EpisodicLifeEnv",
    "FireResetEnv",
    "atari_preprocessing",
    "clip_reward",
    "episode_statistics",
    "episodic_life",
    "fire_reset",
    "frame_stack",
    "pixels",
    "resize",
]


@hookimpl
def register_wrappers(register: Register) -> None:
    register(
        "atari_preprocessing",
        atari_preprocessing,
        family="atari",
        env_kwargs={"frameskip": 1},
        description="gymnasium AtariPreprocessing: no-op reset, frame skip + max-pool, resize, grayscale",
    )
    register("frame_stack", frame_stack, description="gymnasium FrameStackObservation")
    register(
        "episodic_life",
        episodic_life,
        family="atari",
        description="a lost life ends the episode; the game restarts only at game over (DeepMind)",
    )
    register("fire_reset", fire_reset, family="atari", description="press FIRE once after each reset")
    register("clip_reward", clip_reward, description="gymnasium ClipReward")
    register(
        "episode_statistics",
        episode_statistics,
        description="gymnasium RecordEpisodeStatistics on the env the source makes: whole games, raw rewards",
    )
    register("resize", resize, description="gymnasium ResizeObservation")
    register(
        "record_video",
        record_video,
        env_kwargs={"render_mode": "rgb_array"},
        description="MP4 videos of chosen envs (env 0 by default), gymnasium RecordVideo; needs [video]",
    )
    register(
        "pixels",
        pixels,
        env_kwargs={"render_mode": "rgb_array"},
        description="observations are the rendered RGB frames (gymnasium AddRenderObservation)",
    )
