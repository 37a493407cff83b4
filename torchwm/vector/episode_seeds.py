"""Seeded autoresets: where each env's episode seeds come from, and what the parent knows of them.

With seeded autoresets on (docs/datasets.md, "Seeded autoresets"; the vector env's switch),
every episode that starts without a seed gets one drawn by the `torchwm.vector.env_group.EnvGroup` that
resets the env: episode ``k`` of env ``i`` (its global index) under root ``r`` starts with `episode_seed`
``(r, i, k)``, the first word of ``SeedSequence(r, spawn_key=(i, k))``. Nothing is recovered: the root and
the count ``k`` of each env come with the `Reset` that resets it, as a `SeedStream` (None: seeded
autoresets off for that env), and the group counts on from there for the autoresets inside ``step``.

The parent decides them (`EpisodeSeedBook`, held by the stepper): ``reset(seed=s)`` gives every env
the root ``s`` (the env's seed stays Gymnasium's ``s + i``), a list of seeds gives env ``i`` its own seed
as root, and an env reset with no seed and no root yet gets a root drawn once from fresh entropy. The book
counts the episodes whose seeds reached the caller (the reset's infos and every ``EPISODE_SEED`` of a
step's infos), so that a worker restarted after a crash is sent each env's root and next count: its envs
go on with their own sequences, and the run replays from its seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from torchwm.errors import UnsupportedStackError

# The info key (with its ``_episode_seed`` mask once batched) that reports the seed an episode started with.
EPISODE_SEED = "episode_seed"


def episode_seed(root: int, env_index: int, episode: int) -> int:
    """The seed of episode ``episode`` (0: the first drawn after a seeded reset) of env ``env_index`` under
    ``root``: the first word of ``SeedSequence(root, spawn_key=(env_index, episode))``, which is
    ``SeedSequence(root).spawn(n)[env_index].spawn(episode + 1)[episode]``'s; an int ``env.reset(seed=...)``
    takes."""
    sequence = np.random.SeedSequence(root, spawn_key=(env_index, episode))
    return int(sequence.generate_state(1)[0])


def switch(book: EpisodeSeedBook | None, on: bool, backend: str) -> None:
    """Turn seeded autoresets on or off in a stepper's ``book`` (`EpisodeSeedBook.switch`); a stepper with
    none (its envs are not reset by an `EnvGroup`: backend ``backend``) refuses ``on`` with
    `UnsupportedStackError`."""
    if book is not None:
        book.switch(on)
    elif on:
        raise unseedable_backend(backend)


def unseedable_backend(backend: str) -> UnsupportedStackError:
    """The error for seeded autoresets on ``backend``, which builds its own envs (ale-native, envpool): the
    seeds are drawn by torchwm's `EnvGroup`, which resets only the envs a backend builds in Python."""
    return UnsupportedStackError(
        f"autoreset_seeds needs a backend that builds its envs in Python: backend {backend!r} builds its "
        f"own; use 'sync', 'subproc', 'shmem' or 'ray' (torchwm-ray)"
    )


class SeedStream(NamedTuple):
    """Where one env's next unseeded episode takes its seed: `episode_seed` ``(root, env, episode)``."""

    root: int
    episode: int


def fresh_root() -> int:
    """A root from fresh entropy, for envs reset before any seed was given."""
    return int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]


class EpisodeSeedBook:
    """The parent's record of each env's `SeedStream` (None: seeded autoresets off for it), and the switch
    for the next reset.

    Args:
        num_envs: envs of the vector env.
    """

    def __init__(self, num_envs: int) -> None:
        self.on = False  # the vector env turns it on (`switch`)
        # As last sent to each env, counted on by the caller's infos; None: the env draws nothing.
        self.streams: list[SeedStream | None] = [None] * num_envs
        self.drawing = False  # some env has a stream: a step's infos may report a drawn seed

    def switch(self, on: bool) -> None:
        """Turn seeded autoresets on or off from the next reset of each env. Turned on again, an env reset
        without a seed starts from a fresh root (as a vector env never seeded), so that no earlier seed
        comes back."""
        if on and not self.on:
            self.streams = [None] * len(self.streams)
            self.drawing = False
        self.on = on

    def for_reset(
        self, ids: Sequence[int], seeds: Sequence[int | None], vector_seed: int | None
    ) -> list[SeedStream | None] | None:
        """The streams a reset of envs ``ids`` sends (None: off). ``seeds``: the seed each env is reset with
        (None: none); ``vector_seed``: ``s`` of ``reset(seed=s)``, the root of every env (None: the seeds
        came as a list, and each env's own seed is its root)."""
        if not self.on:
            return None
        fresh: int | None = None
        streams: list[SeedStream | None] = []
        for env, seed in zip(ids, seeds, strict=True):
            if seed is not None:
                streams.append(SeedStream(seed if vector_seed is None else vector_seed, 0))
                continue
            current = self.streams[env]
            if current is None:
                fresh = fresh_root() if fresh is None else fresh
                current = SeedStream(fresh, 0)
            streams.append(current)
        return streams

    def was_reset(
        self, ids: Sequence[int], seeds: Sequence[int | None], streams: list[SeedStream | None] | None
    ) -> None:
        """Envs ``ids`` were reset with ``seeds`` and ``streams`` (as `for_reset` gave them), and the caller
        has their infos: an unseeded reset drew its stream's episode."""
        for p, env in enumerate(ids):
            stream = None if streams is None else streams[p]
            if stream is not None and seeds[p] is None:
                stream = stream._replace(episode=stream.episode + 1)
            self.streams[env] = stream
        self.drawing = any(stream is not None for stream in self.streams)

    def count_drawn(self, ids: Sequence[int], infos: Sequence[dict]) -> None:
        """The caller got these infos of a step: each one that reports an `EPISODE_SEED` started a drawn
        episode (an autoreset, or a restarted worker's reset)."""
        streams = self.streams
        for env, info in zip(ids, infos, strict=True):
            if EPISODE_SEED in info:
                stream = streams[env]
                if stream is not None:
                    streams[env] = stream._replace(episode=stream.episode + 1)

    def of(self, ids: Sequence[int]) -> list[SeedStream | None] | None:
        """The streams of envs ``ids`` as the caller knows them (None: none has one): what a restarted
        worker's envs go on from."""
        streams = [self.streams[env] for env in ids]
        return streams if any(stream is not None for stream in streams) else None
