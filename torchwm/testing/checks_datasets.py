"""Checks of what a dataset recorded over the backend holds: every episode a
`torchwm.integrations.minari.VectorDataCollector` records has the seed that replays it, as Minari's own
`DataCollector` gives every episode one.

A check here needs the ``minari`` extra, and a backend that seeds autoresets (the collector turns them
on): without either it raises `CheckSkipped`, saying which.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

from torchwm.extras import missing_extra
from torchwm.testing.envs import COUNTDOWN_ID
from torchwm.testing.target import BackendUnderTest, CheckSkipped, assert_same, random_actions

# Episodes recorded per autoreset mode: several of each env, CountdownEnv's lasting 3 to 7 steps, within
# steps enough for about four times as many.
_EPISODES = 8
_MAX_STEPS = 60


@contextlib.contextmanager
def _datasets_folder() -> Iterator[None]:
    """Minari's local datasets in a folder of their own while the check runs (``MINARI_DATASETS_PATH``),
    removed after: the check leaves nothing in the user's datasets."""
    before = os.environ.get("MINARI_DATASETS_PATH")
    with tempfile.TemporaryDirectory(prefix="torchwm-check-") as folder:
        os.environ["MINARI_DATASETS_PATH"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["MINARI_DATASETS_PATH"]
            else:
                os.environ["MINARI_DATASETS_PATH"] = before


def _replay(what: str, episode: Any, seed: Any) -> None:
    """``episode`` again in ``gym.make`` of the check env, from ``seed`` with its actions."""
    if seed is None:
        raise AssertionError(f"{what} has no seed in its metadata: every recorded episode must have one")
    env = gym.make(COUNTDOWN_ID)
    try:
        obs, _ = env.reset(seed=int(seed))
        assert_same(f"{what}: the reset's observation from seed {seed}", 0, episode.observations[0], obs)
        for t, action in enumerate(episode.actions):
            obs, reward, terminated, truncated, _ = env.step(action)
            assert_same(f"{what}: observations from seed {seed}", t + 1, episode.observations[t + 1], obs)
            assert_same(f"{what}: rewards", t + 1, episode.rewards[t], reward)
            assert_same(f"{what}: terminations", t + 1, episode.terminations[t], terminated)
            assert_same(f"{what}: truncations", t + 1, episode.truncations[t], truncated)
    finally:
        env.close()


def check_every_recorded_episode_replays_from_its_seed(target: BackendUnderTest) -> None:
    """A `VectorDataCollector` over the backend, whose vector env was made without ``autoreset_seeds``,
    records episodes that each have a seed in their metadata, all different, from which ``gym.make`` and
    the recorded actions give the recorded observations, rewards and flags again (``next_step`` and
    ``same_step``)."""
    try:
        from torchwm.integrations.minari import VectorDataCollector
    except ImportError as exc:
        raise CheckSkipped(f"{missing_extra('minari', 'this check')} ({exc})") from None
    n = 3
    for mode in ("next_step", "same_step"):
        vec = target.make(n, seed=11, autoreset_mode=mode)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            envs = VectorDataCollector(vec)
        with envs, _datasets_folder():
            refused = [str(w.message) for w in caught if "cannot seed its autoresets" in str(w.message)]
            if refused:
                raise CheckSkipped(f"the backend cannot seed autoresets: {refused[0]}")
            if target.family != "generic":
                raise CheckSkipped(f"replayed on the generic check env only, not on family {target.family!r}")
            envs.reset()
            steps = 0
            for actions in random_actions(envs, _MAX_STEPS, seed=5):
                if envs.num_episodes >= _EPISODES:
                    break
                envs.step(actions)
                steps += 1
            if envs.num_episodes < _EPISODES:
                raise AssertionError(
                    f"{mode}: {envs.num_episodes} episodes recorded in {steps} steps, expected {_EPISODES}"
                )
            dataset = envs.create_dataset(
                f"torchwm-check/replay-{mode}-v0",
                eval_env=COUNTDOWN_ID,
                algorithm_name="random actions",
                author="torchwm.testing",
                author_email="torchwm.testing@localhost",
                code_permalink="torchwm.testing.checks_datasets",
                description="torchwm's conformance check of VectorDataCollector",
            )
            metadata = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
            for number, (episode, meta) in enumerate(zip(dataset.iterate_episodes(), metadata, strict=True)):
                _replay(f"{mode}: episode {number} (env {meta.get('env_id')})", episode, meta.get("seed"))
            seeds = [int(meta["seed"]) for meta in metadata]
            if len(set(seeds)) != len(seeds):
                raise AssertionError(f"{mode}: recorded episodes share seeds: {seeds}")
