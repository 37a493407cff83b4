"""Seeded autoresets (``make_vec(..., autoreset_seeds=True)``, `torchwm.vector.episode_seeds`): every episode
of every env starts from a seed of its own, drawn from ``numpy.random.SeedSequence`` of the vector env's
seed and reported in ``infos["episode_seed"]``; the reported seed replays the episode in a plain
``gym.make`` env, on every backend, autoreset mode and worker split. Without the option nothing changes
(Gymnasium's arrays, no key). The parent's `EpisodeSeedBook` and the runtime switch ``envs.autoreset_seeds``
are tested here too.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.config import ConfigError
from torchwm.errors import UnsupportedStackError
from torchwm.spec import VecSpec
from torchwm.vector.episode_seeds import EpisodeSeedBook, SeedStream, episode_seed

ENV_ID = "CartPole-v1"
N = 3
STEPS = 150
MODES = ["next_step", "same_step", "disabled"]
BACKENDS = [("sync", {}), ("subproc", {"num_workers": 2}), ("shmem", {"num_workers": 2})]


def expected_seed(seed: int, env: int, k: int) -> int:
    """The k-th drawn seed (k = 0: the first autoreset) of env ``env`` under seed ``seed``, by the documented
    rule, written with SeedSequence's spawn (the module computes it from the spawn key)."""
    child = np.random.SeedSequence(seed).spawn(N)[env]
    return int(child.spawn(k + 1)[k].generate_state(1)[0])


def run(envs, mode: str, steps: int = STEPS, seed=None, action_seed: int = 0):
    """Step ``envs`` with random actions; returns every finished episode as a dict (env, seed, obs: the
    start observation then one per action, actions, rewards, ended: (terminated, truncated) of its last
    step) and the arrays of every step."""
    rng = np.random.default_rng(action_seed)
    obs, infos = envs.reset(seed=seed)
    current = [None] * N
    finished, arrays = [], [obs.copy()]

    def start(i, obs_i, infos):
        assert infos["_episode_seed"][i], f"env {i} started an episode without an episode_seed"
        current[i] = {
            "env": i,
            "seed": int(infos["episode_seed"][i]),
            "obs": [obs_i.copy()],
            "actions": [],
            "rewards": [],
        }

    for i in range(N):
        start(i, obs[i], infos)
    needs_reset = np.zeros(N, bool)
    for _ in range(steps):
        actions = rng.integers(0, 2, size=N)
        obs, rewards, term, trunc, infos = envs.step(actions)
        arrays.append((obs.copy(), rewards.copy(), term.copy(), trunc.copy()))
        mask = infos.get("_episode_seed", np.zeros(N, bool))
        for i in range(N):
            if mode == "next_step" and needs_reset[i]:
                start(i, obs[i], infos)
                needs_reset[i] = False
                continue
            starts = mode == "same_step" and (term[i] or trunc[i])
            assert mask[i] == starts, f"env {i}: episode_seed reported {mask[i]}, an episode starts: {starts}"
            episode = current[i]
            episode["actions"].append(int(actions[i]))
            episode["rewards"].append(float(rewards[i]))
            if term[i] or trunc[i]:
                last = infos["final_obs"][i] if mode == "same_step" else obs[i]
                episode["obs"].append(np.array(last))
                episode["ended"] = (bool(term[i]), bool(trunc[i]))
                finished.append(episode)
                if mode == "same_step":
                    start(i, obs[i], infos)
                else:
                    needs_reset[i] = True
            else:
                episode["obs"].append(obs[i].copy())
        if mode == "disabled" and needs_reset.any():
            obs, infos = envs.reset(options={"reset_mask": needs_reset.copy()})
            for i in np.flatnonzero(needs_reset):
                start(i, obs[i], infos)
            assert not infos["_episode_seed"][~needs_reset].any()
            needs_reset[:] = False
    return finished, arrays


def replay(episode: dict) -> None:
    """The episode again in a plain Gymnasium env reset with its reported seed: the same observations,
    rewards and end."""
    env = gym.make(ENV_ID)
    try:
        obs, _ = env.reset(seed=episode["seed"])
        np.testing.assert_array_equal(
            obs, episode["obs"][0], err_msg=f"start of {episode['env'], episode['seed']}"
        )
        for t, action in enumerate(episode["actions"]):
            obs, reward, term, trunc, _ = env.step(action)
            np.testing.assert_array_equal(obs, episode["obs"][t + 1])
            assert reward == episode["rewards"][t]
            last = t == len(episode["actions"]) - 1
            assert (term or trunc) == last, f"replay ended at step {t} of {len(episode['actions'])}"
        assert (term, trunc) == episode["ended"]
    finally:
        env.close()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("backend", "options"), BACKENDS, ids=[b for b, _ in BACKENDS])
def test_reported_seeds_replay_episodes(backend, options, mode):
    with torchwm.make_vec(
        ENV_ID, N, backend=backend, seed=11, autoreset_mode=mode, autoreset_seeds=True, backend_kwargs=options
    ) as envs:
        finished, _ = run(envs, mode)
    assert len(finished) >= 2 * N, f"only {len(finished)} episodes ended in {STEPS} steps"
    for episode in finished:
        replay(episode)
    # The first episode of env i has Gymnasium's seed 11 + i; its k-th next one the k-th drawn seed.
    for i in range(N):
        seeds = [e["seed"] for e in finished if e["env"] == i]
        assert seeds == [11 + i] + [expected_seed(11, i, k) for k in range(len(seeds) - 1)]
    every = [e["seed"] for e in finished]
    assert len(set(every)) == len(every), f"two episodes share a seed: {sorted(every)}"


@pytest.mark.parametrize("mode", MODES)
def test_same_seeds_and_arrays_on_every_backend_and_split(mode):
    def outcome(backend, **options):
        with torchwm.make_vec(
            ENV_ID,
            N,
            backend=backend,
            seed=4,
            autoreset_mode=mode,
            autoreset_seeds=True,
            backend_kwargs=options,
        ) as envs:
            finished, arrays = run(envs, mode, steps=80)
        return [(e["env"], e["seed"]) for e in finished], arrays

    seeds, arrays = outcome("sync")
    assert len(seeds) > N
    for backend, options in [
        ("subproc", {"num_workers": 1}),
        ("subproc", {"num_workers": 3}),
        ("shmem", {"num_workers": 2}),
        ("shmem", {"num_workers": 2, "inline": True}),
    ]:
        other_seeds, other_arrays = outcome(backend, **options)
        assert other_seeds == seeds, (backend, options)
        np.testing.assert_array_equal(other_arrays[0], arrays[0])
        for a, b in zip(arrays[1:], other_arrays[1:], strict=True):
            for x, y in zip(a, b, strict=True):
                np.testing.assert_array_equal(x, y)


def test_reset_with_a_seed_restarts_the_sequence():
    with torchwm.make_vec(ENV_ID, N, seed=1, autoreset_seeds=True) as envs:
        run(envs, "next_step", steps=60)
        again, _ = run(envs, "next_step", steps=60, seed=8)
    with torchwm.make_vec(ENV_ID, N, seed=8, autoreset_seeds=True) as envs:
        fresh, _ = run(envs, "next_step", steps=60)
    assert [(e["env"], e["seed"]) for e in again] == [(e["env"], e["seed"]) for e in fresh]
    assert any(e["seed"] == expected_seed(8, e["env"], 0) for e in again)


def test_a_reset_without_seed_draws_the_next_seed():
    """reset() after episodes were drawn starts each env's next episode from its next seed."""
    with torchwm.make_vec(ENV_ID, N, seed=2, autoreset_seeds=True) as envs:
        _, infos = envs.reset()
        assert infos["episode_seed"].tolist() == [2, 3, 4]
        _, infos = envs.reset()
        assert infos["episode_seed"].tolist() == [expected_seed(2, i, 0) for i in range(N)]
        _, infos = envs.reset(options={"reset_mask": np.array([False, True, False])})
        assert infos["_episode_seed"].tolist() == [False, True, False]
        assert infos["episode_seed"][1] == expected_seed(2, 1, 1)


def test_a_list_of_seeds_starts_each_envs_sequence_from_its_own_seed():
    with torchwm.make_vec(ENV_ID, N, autoreset_seeds=True) as envs:
        _, infos = envs.reset(seed=[10, 20, 0])
        assert infos["episode_seed"].tolist() == [10, 20, 0]
        _, infos = envs.reset()
    # env i's own seed x is its root: SeedSequence(x, spawn_key=(i, 0)), no arithmetic on the index
    assert infos["episode_seed"].tolist() == [
        expected_seed(10, 0, 0),
        expected_seed(20, 1, 0),
        expected_seed(0, 2, 0),
    ]


def test_without_a_seed_every_episode_is_drawn_and_replays():
    with torchwm.make_vec(ENV_ID, N, autoreset_mode="same_step", autoreset_seeds=True) as envs:
        finished, _ = run(envs, "same_step", steps=80)
    with torchwm.make_vec(ENV_ID, N, autoreset_mode="same_step", autoreset_seeds=True) as envs:
        other, _ = run(envs, "same_step", steps=80)
    for episode in finished:
        replay(episode)
    seeds = [e["seed"] for e in finished]
    assert len(set(seeds)) == len(seeds)
    # Fresh entropy: another vector env without a seed draws other seeds.
    assert not set(seeds) & {e["seed"] for e in other}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_default_is_gymnasiums_behaviour(backend, mode):
    """Without the option: no episode_seed anywhere, and Gymnasium's SyncVectorEnv's arrays."""
    autoreset = torchwm.spec.AUTORESET_MODES[mode]
    ref = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID)] * N, autoreset_mode=autoreset)
    rng = np.random.default_rng(0)
    with torchwm.make_vec(ENV_ID, N, backend=backend, seed=6, autoreset_mode=mode) as envs:
        assert envs.spec.autoreset_seeds is False
        obs, infos = envs.reset()
        ref_obs, _ = ref.reset(seed=6)
        np.testing.assert_array_equal(obs, ref_obs)
        assert "episode_seed" not in infos
        for _ in range(80):
            actions = rng.integers(0, 2, size=N)
            got, want = envs.step(actions), ref.step(actions)
            for a, b in zip(got[:4], want[:4], strict=True):
                np.testing.assert_array_equal(a, b)
            assert "episode_seed" not in got[4]
            done = want[2] | want[3]
            if mode == "disabled" and done.any():
                obs, infos = envs.reset(options={"reset_mask": done.copy()})
                ref_obs, _ = ref.reset(options={"reset_mask": done.copy()})
                np.testing.assert_array_equal(obs, ref_obs)
                assert "episode_seed" not in infos
    ref.close()


def test_make_vec_from_fns_takes_the_option():
    fns = [lambda: gym.make(ENV_ID)] * N
    with torchwm.make_vec_from_fns(fns, backend="subproc", seed=11, autoreset_seeds=True) as envs:
        finished, _ = run(envs, "next_step", steps=60)
    for i in range(N):
        seeds = [e["seed"] for e in finished if e["env"] == i]
        assert seeds == [11 + i] + [expected_seed(11, i, k) for k in range(len(seeds) - 1)]


def test_spec_and_config_carry_the_option():
    spec = torchwm.factory.resolve_spec(ENV_ID, 2, seed=0, autoreset_seeds=True)
    data = spec.to_dict()
    assert data["autoreset_seeds"] is True
    assert VecSpec.from_dict(data) == spec
    assert "autoreset_seeds=True" in repr(spec)
    # A dict written before the option existed loads with Gymnasium's behaviour.
    old = {k: v for k, v in data.items() if k != "autoreset_seeds"}
    assert VecSpec.from_dict(old).autoreset_seeds is False
    assert torchwm.load_config({"id": ENV_ID, "autoreset_seeds": True}).autoreset_seeds is True
    assert torchwm.load_config({"id": ENV_ID}).autoreset_seeds is False
    with pytest.raises(ConfigError, match="autoreset_seeds"):
        torchwm.load_config({"id": ENV_ID, "autoreset_seeds": "yes"})


def test_bad_option_values_are_refused_before_anything_starts():
    with pytest.raises(TypeError, match="autoreset_seeds must be a bool, got 'yes'"):
        torchwm.make_vec(ENV_ID, 2, autoreset_seeds="yes")
    with pytest.raises(TypeError, match="autoreset_seeds must be a bool"):
        torchwm.make_vec_from_fns([lambda: gym.make(ENV_ID)], autoreset_seeds=1)
    with pytest.raises(UnsupportedStackError, match="autoreset_seeds .* backend 'ale-native'.*'shmem'"):
        torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native", autoreset_seeds=True)


def test_conformance_check_catches_a_backend_that_ignores_the_option(monkeypatch):
    from torchwm import testing
    from torchwm.vector import sync

    testing.check_seeded_autoresets(testing.BackendUnderTest("sync"))
    # A backend that resets its envs without the streams it is given: no seed is reported, and the check
    # says so.
    reset_envs = sync.SyncStepper.reset_envs
    monkeypatch.setattr(
        sync.SyncStepper,
        "reset_envs",
        lambda self, ids, seeds, options, streams=None: reset_envs(self, ids, seeds, options),
    )
    with pytest.raises(AssertionError, match="episode_seed"):
        testing.check_seeded_autoresets(testing.BackendUnderTest("sync"))


# -- the parent's book: roots given, never recovered ---------------------------------------------------


def test_the_book_gives_roots_from_the_reset_not_from_the_index():
    book = EpisodeSeedBook(3)
    assert book.for_reset([0, 1, 2], [5, 6, 7], 5) is None  # off: nothing is sent
    book.switch(True)
    # reset(seed=5): root 5 for every env; a list: each env's own seed
    assert book.for_reset([0, 1, 2], [5, 6, 7], 5) == [SeedStream(5, 0)] * 3
    assert book.for_reset([0, 1, 2], [10, 20, 0], None) == [
        SeedStream(10, 0),
        SeedStream(20, 0),
        SeedStream(0, 0),
    ]
    # no seed and no root yet: one root of fresh entropy, drawn once in the parent for all of them
    fresh = book.for_reset([0, 1, 2], [None, None, None], None)
    assert fresh is not None and len({stream.root for stream in fresh}) == 1 and fresh[0].episode == 0


def test_the_book_counts_what_reached_the_caller():
    book = EpisodeSeedBook(2)
    book.switch(True)
    streams = book.for_reset([0, 1], [3, 4], 3)
    book.was_reset([0, 1], [3, 4], streams)
    assert book.of([0, 1]) == [SeedStream(3, 0), SeedStream(3, 0)] and book.drawing
    book.count_drawn([1, 0], [{"episode_seed": 1}, {}])
    assert book.of([0, 1]) == [SeedStream(3, 0), SeedStream(3, 1)]
    # an unseeded reset draws its stream's episode; a seeded one starts the count again
    streams = book.for_reset([0, 1], [None, 9], None)
    assert streams == [SeedStream(3, 0), SeedStream(9, 0)]
    book.was_reset([0, 1], [None, 9], streams)
    assert book.of([0, 1]) == [SeedStream(3, 1), SeedStream(9, 0)]
    # turned off, the next reset sends nothing and the envs stop drawing
    book.switch(False)
    book.was_reset([0, 1], [None, None], book.for_reset([0, 1], [None, None], None))
    assert book.of([0, 1]) is None and not book.drawing


def test_episode_seed_is_the_documented_spawn():
    assert episode_seed(7, 1, 0) == 75971499  # issue 51 item 5's value
    assert episode_seed(42, 0, 1) == expected_seed(42, 0, 1)


# -- the runtime switch: envs.autoreset_seeds ----------------------------------------------------------


@pytest.mark.parametrize(("backend", "options"), BACKENDS, ids=[b for b, _ in BACKENDS])
def test_the_switch_takes_effect_at_the_next_reset(backend, options):
    with torchwm.make_vec(ENV_ID, N, backend=backend, seed=5, backend_kwargs=options) as envs:
        assert envs.autoreset_seeds is False
        _, infos = envs.reset()
        assert "episode_seed" not in infos
        envs.autoreset_seeds = True
        assert envs.autoreset_seeds is True and envs.spec.autoreset_seeds is True
        finished, _ = run(envs, "next_step", steps=60, seed=5)
        envs.autoreset_seeds = False
        assert envs.spec.autoreset_seeds is False
        _, infos = envs.reset(seed=5)
        assert "episode_seed" not in infos
        for _ in range(20):
            assert "episode_seed" not in envs.step(np.zeros(N, np.int64))[4]
    with torchwm.make_vec(ENV_ID, N, seed=5, autoreset_seeds=True) as envs:
        made_on, _ = run(envs, "next_step", steps=60, seed=5)
    assert [(e["env"], e["seed"]) for e in finished] == [(e["env"], e["seed"]) for e in made_on]


def test_the_switch_refuses_bad_values_and_backends_before_anything_changes():
    with torchwm.make_vec(ENV_ID, 2) as envs:
        with pytest.raises(TypeError, match="autoreset_seeds must be a bool, got 'yes'"):
            envs.autoreset_seeds = "yes"
        assert envs.autoreset_seeds is False and envs.spec.autoreset_seeds is False
    with torchwm.make_vec("ALE/Pong-v5", 2, backend="ale-native") as envs:
        with pytest.raises(UnsupportedStackError, match="autoreset_seeds .* backend 'ale-native'.*'shmem'"):
            envs.autoreset_seeds = True
        assert envs.spec.autoreset_seeds is False
        envs.autoreset_seeds = False  # off is what it does anyway
