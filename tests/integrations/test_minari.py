"""VectorDataCollector: episodes recorded from vector envs replay from their seeds, and Minari recovers the
stack they were recorded on (the tests of ``torchwm record`` itself are tests/cli/test_record.py)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("minari")

import minari  # noqa: E402
from minari import StepDataCallback  # noqa: E402
from support.datasets import replay  # noqa: E402

import torchwm  # noqa: E402
from torchwm.building import build_env  # noqa: E402
from torchwm.cli import main  # noqa: E402
from torchwm.integrations.minari import VectorDataCollector, dataset_spec, make_vec_from_dataset  # noqa: E402
from torchwm.testing import ATARI_FRAME_LIMIT  # noqa: E402

# Minari warns for each piece of metadata a dataset lacks (author, description, ...).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# Forkserver workers cannot import this test module: the envs defined here go by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(autouse=True)
def datasets_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def record(envs, n_episodes, max_steps=10_000):
    """Step ``envs`` (a VectorDataCollector) with random actions until ``n_episodes`` are recorded."""
    disabled = envs.metadata["autoreset_mode"] is gym.vector.AutoresetMode.DISABLED
    envs.action_space.seed(0)
    obs, infos = envs.reset()
    partial = envs.unwrapped.batch_size < envs.num_envs
    if partial:
        space = envs.single_action_space
        envs.send(np.array([space.sample() for _ in range(envs.num_envs)]))
    for _ in range(max_steps):
        if envs.num_episodes >= n_episodes:
            break
        if partial:
            obs, rewards, terminations, truncations, infos = envs.recv()
            ids = infos["env_id"]
            done = terminations | truncations
            if disabled and done.any():
                envs.reset(env_ids=ids[done])
            envs.send(np.array([space.sample() for _ in ids]), ids)
            continue
        obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
        done = terminations | truncations
        if disabled and done.any():
            envs.reset(options={"reset_mask": done})
    else:
        raise AssertionError(f"{envs.num_episodes} of {n_episodes} episodes after {max_steps} steps")
    if partial:
        for _ in range(envs.num_envs - envs.unwrapped.batch_size):
            if not envs.unwrapped.in_flight_ids:
                break
            envs.recv()


@pytest.mark.parametrize(
    ("backend", "mode", "batch_size"),
    [
        ("sync", "next_step", None),
        ("sync", "same_step", None),
        ("sync", "disabled", None),
        ("subproc", "next_step", None),
        ("subproc", "same_step", None),
        ("shmem", "next_step", None),
        ("shmem", "same_step", None),
        ("shmem", "disabled", None),
        ("shmem", "next_step", 2),
        ("shmem", "same_step", 2),
    ],
)
def test_cartpole_episodes_replay_from_their_seeds_in_gym_make(backend, mode, batch_size):
    kwargs = {"batch_size": batch_size} if batch_size else {}
    vec = torchwm.make_vec(
        "CartPole-v1",
        3,
        backend=backend,
        seed=7,
        autoreset_mode=mode,
        autoreset_seeds=True,
        backend_kwargs=kwargs or None,
    )
    with VectorDataCollector(vec) as envs:
        record(envs, 7)
        dataset = envs.create_dataset(f"test/cartpole-{backend}-{mode}-v0")
    assert dataset.total_episodes >= 7
    assert dataset.spec.env_spec.id == "CartPole-v1"  # a plain Gymnasium env: Minari can recover it
    metadata = replay(dataset, lambda _: gym.make("CartPole-v1"))
    seeds = [m["seed"] for m in metadata]
    assert len(set(seeds)) == len(seeds)
    # Every env's first episode keeps Gymnasium's seed + i; the others have seeds of their own. (With a
    # partial batch an env the others outrun may end no episode before the 7th, so it is not asserted.)
    first_seeds = {}
    for meta in metadata:
        first_seeds.setdefault(int(meta["env_id"]), int(meta["seed"]))
    assert first_seeds == {i: 7 + i for i in first_seeds}
    assert len(first_seeds) == 3 or batch_size


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_every_episode_has_its_seed_whatever_the_vector_env_was_made_with(backend):
    # Made without autoreset_seeds: the collector turns them on, as Minari's collector seeds every episode.
    vec = torchwm.make_vec("CartPole-v1", 2, backend=backend, seed=3)
    assert not vec.autoreset_seeds
    with VectorDataCollector(vec) as envs:
        assert vec.autoreset_seeds and envs.spec.autoreset_seeds
        record(envs, 6)
        dataset = envs.create_dataset("test/seeded-v0")
    metadata = replay(dataset, lambda _: gym.make("CartPole-v1"))  # every episode, from its seed
    seeds = [int(meta["seed"]) for meta in metadata]
    assert len(seeds) >= 6 and len(set(seeds)) == len(seeds)
    first = {}
    for meta in metadata:
        first.setdefault(int(meta["env_id"]), int(meta["seed"]))
    assert first == {0: 3, 1: 4}  # each env's first episode keeps Gymnasium's seed + i
    assert dataset_spec(dataset).autoreset_seeds  # the rebuilt stack seeds its episodes too


def test_a_vector_env_that_cannot_seed_autoresets_is_recorded_with_a_warning():
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    with pytest.warns(UserWarning, match="only the first episode of each env will have a seed"):
        envs = VectorDataCollector(vec)
    with envs:
        envs.reset(seed=3)
        envs.action_space.seed(0)
        while envs.num_episodes < 4:
            envs.step(envs.action_space.sample())
        dataset = envs.create_dataset("test/unseeded-v0")
    metadata = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    first = {}
    for meta in metadata:
        first.setdefault(int(meta["env_id"]), meta.get("seed"))
    assert first == {0: 3, 1: 4}
    assert sum(meta.get("seed") is None for meta in metadata) == len(metadata) - 2


def test_running_episodes_are_left_out_and_go_to_the_next_dataset():
    with VectorDataCollector(torchwm.make_vec("CartPole-v1", 2, seed=0, autoreset_seeds=True)) as envs:
        envs.reset()
        for _ in range(5):
            envs.step(envs.action_space.sample())
        assert envs.num_episodes == 0
        empty = envs.create_dataset("test/empty-v0")
        assert empty.total_episodes == 0
        record(envs, 1)
        # record's reset cut the running episodes: only episodes that ended after it are there
        dataset = envs.create_dataset("test/later-v0")
        assert envs.num_episodes == 0
    assert dataset.total_episodes >= 1
    replay(dataset, lambda _: gym.make("CartPole-v1"))


def test_max_episodes_keeps_the_first_to_end():
    vec = torchwm.make_vec("CartPole-v1", 4, seed=0, autoreset_seeds=True)
    with VectorDataCollector(vec, max_episodes=2) as envs:
        record(envs, 2)
        for _ in range(100):
            envs.step(envs.action_space.sample())
        assert envs.num_episodes == 2


class StepCount(gym.Wrapper):
    """Says in its infos how many steps its episode has taken."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.count = 0
        return obs, {**info, "count": 0}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        return obs, reward, terminated, truncated, {**info, "count": self.count}


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_infos_are_recorded_when_asked(mode):
    vec = torchwm.make_vec_from_fns(
        [lambda: StepCount(gym.make("CartPole-v1"))] * 2, seed=0, autoreset_mode=mode, autoreset_seeds=True
    )
    with VectorDataCollector(vec, record_infos=True) as envs:
        record(envs, 3)
        dataset = envs.create_dataset(f"test/infos-{mode}-v0")
    for episode in dataset.iterate_episodes():
        # one info per observation, the reset's first and the final step's last
        assert episode.infos["count"].tolist() == list(range(len(episode.observations)))
        assert "episode_seed" not in episode.infos and "final_obs" not in episode.infos


class ExtraKeyOnce(StepCount):
    """StepCount whose first episode's infos gain a key at its step 2 (what Minari cannot store)."""

    episodes = 0

    def reset(self, **kwargs):
        self.episodes += 1
        return super().reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.episodes == 1 and self.count >= 2:
            info = {**info, "extra": 1}
        return obs, reward, terminated, truncated, info


def test_info_keys_that_change_in_an_episode_raise_as_minaris_collector_and_lose_no_other_episode():
    vec = torchwm.make_vec_from_fns(
        [lambda: StepCount(gym.make("CartPole-v1")), lambda: ExtraKeyOnce(gym.make("CartPole-v1"))], seed=0
    )
    with VectorDataCollector(vec, record_infos=True) as envs:
        envs.reset()
        envs.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match=r"env 1 began its episode with info keys \['count'\], then"):
            envs.step(np.zeros(2, np.int64))
        envs.action_space.seed(0)
        while envs.num_episodes < 4:
            envs.step(envs.action_space.sample())  # env 0 goes on, env 1 records its next episodes
        dataset = envs.create_dataset("test/changed-keys-v0")
    metadata = replay(dataset, lambda _: gym.make("CartPole-v1"))
    first = {}
    for episode, meta in zip(dataset.iterate_episodes(), metadata, strict=True):
        first.setdefault(int(meta["env_id"]), int(meta["seed"]))
        assert episode.infos["count"].tolist() == list(range(len(episode.observations)))
    # env 0's first episode was recorded whole through the error; env 1's first episode was left out.
    assert first[0] == 0 and first.get(1, 1) != 1


class CutAfterThree(StepDataCallback):
    """Doubles every reward and truncates each recorded episode after 3 steps of its own (the env goes on, so
    the next episode starts from that step); keeps the observations it is given."""

    made: list = []

    def __init__(self):
        super().__init__()
        self.steps = 0
        self.seen = []
        CutAfterThree.made.append(self)

    def __call__(self, env, **kwargs):
        data = super().__call__(env, **kwargs)
        self.seen.append(np.array(data["observation"]))
        if data["action"] is None:  # a reset
            self.steps = 0
            return data
        self.steps += 1
        data["reward"] = 2 * data["reward"]
        if self.steps == 3:
            data["truncated"] = True
        if data["terminated"] or data["truncated"]:
            self.steps = 0
        return data


@pytest.mark.parametrize(("backend", "mode"), [("sync", "next_step"), ("shmem", "same_step")])
def test_a_step_data_callback_runs_per_env_and_changes_and_cuts_the_recorded_episodes(backend, mode):
    CutAfterThree.made = []
    vec = torchwm.make_vec("CartPole-v1", 2, backend=backend, seed=5, autoreset_mode=mode)
    with VectorDataCollector(vec, step_data_callback=CutAfterThree) as envs:
        record(envs, 30)
        dataset = envs.create_dataset(f"test/callback-{backend}-{mode}-v0")
    assert len(CutAfterThree.made) == 2  # one callback per env
    episodes = list(dataset.iterate_episodes())
    metadata = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    for env_id, callback in enumerate(CutAfterThree.made):
        mine = [(e, m) for e, m in zip(episodes, metadata, strict=True) if int(m["env_id"]) == env_id]
        # Chains of cut episodes: each starts with a reset (a seed) and goes on without one.
        chains: list = []
        for episode, meta in mine:
            assert len(episode.actions) <= 3 and (episode.terminations[-1] or episode.truncations[-1])
            assert np.all(episode.rewards == 2.0)  # CartPole's 1 per step, doubled
            if meta.get("seed") is not None:
                chains.append((int(meta["seed"]), [episode]))
            else:
                assert chains, "an episode without a seed starts no chain"
                np.testing.assert_array_equal(episode.observations[0], chains[-1][1][-1].observations[-1])
                chains[-1][1].append(episode)
        assert len(chains) >= 2 and any(len(chain) > 1 for _, chain in chains)
        seen = []
        env = gym.make("CartPole-v1")
        for number, (seed, chain) in enumerate(chains):
            obs, _ = env.reset(seed=seed)
            seen.append(obs)
            for position, episode in enumerate(chain):
                np.testing.assert_array_equal(episode.observations[0], obs)
                for action, recorded in zip(episode.actions, episode.observations[1:], strict=True):
                    obs, reward, terminated, truncated, _ = env.step(action)
                    np.testing.assert_array_equal(obs, recorded)
                    seen.append(obs)
                # The env's own episode ends where the next chain starts (its reset); the cuts before are the
                # callback's (the last chain may still run).
                if position < len(chain) - 1:
                    assert not (terminated or truncated) and episode.truncations[-1]
                elif number < len(chains) - 1:
                    assert terminated or truncated
        # This env's callback was given this env's rows, and no other env's.
        assert len(callback.seen) >= len(seen)
        for ours, theirs in zip(seen, callback.seen, strict=False):
            np.testing.assert_array_equal(ours, theirs)


class Saboteur(gym.Wrapper):
    """CartPole that raises ``ValueError`` at its steps ``raise_at`` (counted over its whole life, before
    the step is taken) and kills its own process at its step ``kill_at``, once (``marker``, a file, says
    it did: the restarted worker's env steps on)."""

    def __init__(self, raise_at=(), kill_at=None, marker=None):
        super().__init__(gym.make("CartPole-v1"))
        self.raise_at, self.kill_at, self.marker = set(raise_at), kill_at, marker
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps in self.raise_at:
            raise ValueError("the env broke on purpose")
        if self.steps == self.kill_at and not Path(self.marker).exists():
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.step(action)


@pytest.mark.parametrize(
    ("backend", "mode"), [("sync", "next_step"), ("shmem", "next_step"), ("shmem", "same_step")]
)
def test_episodes_recorded_under_env_errors_and_worker_restarts_all_replay(backend, mode, tmp_path):
    # Env 1 raises twice; on shmem env 2 kills its worker (envs 2 and 3) once, which is restarted. The
    # dataset holds whole episodes only: none with a step whose rows an error dropped (env 0's, beside
    # env 1 in the failed sends), none cut by the restart.
    kill = backend == "shmem"
    fns = [
        Saboteur,
        functools.partial(Saboteur, raise_at=(9, 40)),
        functools.partial(Saboteur, kill_at=25 if kill else None, marker=str(tmp_path / "killed")),
        Saboteur,
    ]
    options = {"num_workers": 2, "restart_on_crash": True} if kill else None
    vec = torchwm.make_vec_from_fns(
        fns, backend=backend, seed=3, autoreset_mode=mode, autoreset_seeds=True, backend_kwargs=options
    )
    errors, restarts = [], 0
    with VectorDataCollector(vec) as envs:
        envs.action_space.seed(0)
        envs.reset()
        for _ in range(2000):
            if envs.num_episodes >= 12 and len(errors) == 2 and (restarts or not kill):
                break
            try:
                *_, infos = envs.step(envs.action_space.sample())
            except ValueError as exc:
                errors.append(exc)
                envs.reset(env_ids=[1])  # the env that raised; the others step on
                continue
            restarts += int(np.sum(infos.get("worker_restarted", 0)))
        dataset = envs.create_dataset(f"test/faults-{backend}-{mode}-v0")
    assert len(errors) == 2 and all(exc.dropped_env_ids == (0, 1, 2, 3) for exc in errors)
    assert restarts == (2 if kill else 0)  # both envs of the killed worker said so
    assert dataset.total_episodes >= 12
    metadata = replay(dataset, lambda _: gym.make("CartPole-v1"))  # every episode, from its seed
    assert all(meta["seed"] is not None for meta in metadata)


class ArrayInfoEnv(gym.Env):
    """Minari's ``DummyInfoEnv``: every info is the ``info`` it was made with (arrays, nested dicts)."""

    def __init__(self, info=None):
        self.observation_space = gym.spaces.Box(-1.0, 4.0, (3,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 4.0, (2,), np.float32)
        self.info = info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.random(3, dtype=np.float32), dict(self.info)

    def step(self, action):
        self.t += 1
        return self.np_random.random(3, dtype=np.float32), 0.0, self.t >= 3, False, dict(self.info)


if "TorchwmTest/ArrayInfo-v0" not in gym.registry:
    gym.register("TorchwmTest/ArrayInfo-v0", entry_point=ArrayInfoEnv)


def test_array_infos_and_env_arguments_json_cannot_hold_are_stored():
    info = {"foo": np.ones((10, 10), dtype=np.float32), "nested": {"flag": False, "values": np.arange(4.0)}}
    vec = torchwm.make_vec("TorchwmTest/ArrayInfo-v0", 2, seed=0, info=info)
    with VectorDataCollector(vec, record_infos=True) as envs:
        record(envs, 4)
        with pytest.warns(UserWarning, match="torchwm spec of this vector env cannot be stored"):
            dataset = envs.create_dataset("test/array-infos-v0")
    assert dataset.total_episodes >= 4
    for episode in dataset.iterate_episodes():
        steps = len(episode.observations)
        assert np.array_equal(episode.infos["foo"], np.broadcast_to(info["foo"], (steps, 10, 10)))
        assert np.array_equal(episode.infos["nested"]["values"], np.broadcast_to(np.arange(4.0), (steps, 4)))
        assert episode.infos["nested"]["flag"].tolist() == [False] * steps
    with pytest.raises(ValueError, match="holds no torchwm spec"):
        dataset_spec(dataset)


class TypedRewardEnv(gym.Env):
    """Three steps an episode, whose rewards have the type ``reward_type`` names: a vector env gives them all
    as float64, where Minari's collector stores ``np.asarray`` of the env's own (ints: int64)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, reward_type="int"):
        self.reward_type = reward_type

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.random(2, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        reward = {
            "int": self.t + int(action),
            "int32": np.int32(self.t),
            "float32": np.float32(self.t / 4),
            "float": self.t / 4,
            "int-then-a-half": 0 if self.t < 3 else 0.5,  # Minari's array of such an episode: float64
        }[self.reward_type]
        return self.np_random.random(2, dtype=np.float32), reward, self.t >= 3, False, {}


if "TorchwmTest/TypedReward-v0" not in gym.registry:
    gym.register("TorchwmTest/TypedReward-v0", entry_point=f"{__name__}:TypedRewardEnv")  # Minari stores it


@pytest.mark.parametrize("backend", ["sync", "shmem"])
@pytest.mark.parametrize("reward_type", ["int", "int32", "float32", "float", "int-then-a-half"])
def test_rewards_are_stored_with_the_dtype_minaris_collector_gives_and_minari_episodes_add_to_them(
    reward_type, backend
):
    env_kwargs = {"reward_type": reward_type}
    minari_collector = minari.DataCollector(
        gym.make("TorchwmTest/TypedReward-v0", **env_kwargs), data_format="arrow"
    )
    minari_collector.reset(seed=0)
    for _ in range(2):
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, _ = minari_collector.step(minari_collector.action_space.sample())
        minari_collector.reset()
    theirs = minari_collector.create_dataset("test/typed-reward-minari-v0")
    minari_episodes = list(theirs.iterate_episodes())

    # shmem's workers forked, so that they know the env this module registers
    options = {"context": "fork"} if backend == "shmem" else None
    vec = torchwm.make_vec(
        "TorchwmTest/TypedReward-v0", 2, backend=backend, seed=0, backend_kwargs=options, **env_kwargs
    )
    with VectorDataCollector(vec, data_format="arrow") as envs:
        record(envs, 4)
        ours = envs.create_dataset("test/typed-reward-v0")
    for episode in ours.iterate_episodes():
        assert episode.rewards.dtype == minari_episodes[0].rewards.dtype, reward_type
        env = TypedRewardEnv(reward_type)  # its rewards depend on the step and the action only
        env.reset(seed=0)
        assert episode.rewards.tolist() == np.asarray([env.step(a)[1] for a in episode.actions]).tolist()
    # Minari's own episodes of the same env go into the dataset torchwm wrote, and come back.
    minari_collector.reset(seed=1)
    for _ in range(2):
        terminated = truncated = False
        while not (terminated or truncated):
            _, _, terminated, truncated, _ = minari_collector.step(minari_collector.action_space.sample())
        minari_collector.reset()
    n = ours.total_episodes
    minari_collector.add_to_dataset(ours)
    minari_collector.close()
    episodes = list(ours.iterate_episodes())
    assert len(episodes) == n + 2
    assert {episode.rewards.dtype for episode in episodes} == {minari_episodes[0].rewards.dtype}


def test_a_declared_reward_dtype_is_stored_and_a_wrapped_vector_env_s_rewards_stay_float64():
    vec = torchwm.make_vec("TorchwmTest/TypedReward-v0", 2, seed=0, reward_type="int")
    with pytest.raises(TypeError, match="reward_dtype must be a bool, int or float dtype, got 'U3'"):
        VectorDataCollector(vec, reward_dtype="U3")
    assert not vec.autoreset_seeds  # refused before the collector changed anything
    with VectorDataCollector(vec, reward_dtype=np.float32) as envs:
        record(envs, 2)
        assert {e.rewards.dtype for e in envs.create_dataset("test/declared-v0").iterate_episodes()} == {
            np.dtype(np.float32)
        }
    # A vector wrapper may change the rewards: what it gives, float64, is what is recorded.
    vec = torchwm.make_vec("TorchwmTest/TypedReward-v0", 2, seed=0, reward_type="int")
    with VectorDataCollector(gym.wrappers.vector.RecordEpisodeStatistics(vec)) as envs:
        record(envs, 2)
        assert {e.rewards.dtype for e in envs.create_dataset("test/wrapped-v0").iterate_episodes()} == {
            np.dtype(np.float64)
        }


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_pong_frames_come_back_byte_equal_and_the_stack_is_rebuilt(mode):
    limit = {"max_num_frames_per_episode": ATARI_FRAME_LIMIT}
    vec = torchwm.make_vec(
        "ALE/Pong-v5", 2, backend="shmem", seed=1, autoreset_mode=mode, autoreset_seeds=True, **limit
    )
    wrappers = [w.name for w in vec.spec.wrappers]
    with VectorDataCollector(vec) as envs:
        record(envs, 2)
        dataset = envs.create_dataset(f"test/pong-{mode}-v0")
    assert dataset.storage.metadata["jpeg_encoding"] is False
    first = next(dataset.iterate_episodes())
    assert first.observations.dtype == np.uint8 and first.observations.shape[1:] == (4, 84, 84)
    spec = dataset_spec(dataset)
    # torchwm.make_env of the same spec replays each episode, frame for frame
    replay(
        dataset,
        lambda _: torchwm.make_env(
            spec.id, wrappers=[{"name": w.name, **w.kwargs} for w in spec.wrappers], **spec.env_kwargs
        ),
    )
    assert build_env(spec).observation_space == dataset.observation_space
    with make_vec_from_dataset(dataset, 1, backend="sync") as again:
        assert [w.name for w in again.spec.wrappers] == wrappers
        assert again.spec.backend == "sync" and again.spec.num_envs == 1
        assert again.spec.env_kwargs == vec.spec.env_kwargs and again.spec.fused == vec.spec.fused


def test_minari_recovers_the_recorded_pong_stack_and_it_replays_the_first_episode_byte_for_byte():
    import minari

    argv = ["record", "pong", "--episodes", "2", "--dataset-id", "test/pong-recover-v0", "--num-envs", "2"]
    argv += ["--set", f"env_kwargs.max_num_frames_per_episode={ATARI_FRAME_LIMIT}", "--no-progress"]
    assert main(argv) == 0
    dataset = minari.load_dataset("test/pong-recover-v0")
    assert dataset.spec.env_spec.entry_point == "torchwm.integrations.minari:recorded_env"
    for env in (dataset.recover_environment(), dataset.recover_environment(eval_env=True)):
        assert env.observation_space == dataset.observation_space and env.action_space == dataset.action_space
        episode, meta = dataset[0], next(iter(dataset.storage.get_episode_metadata([0])))
        obs, _ = env.reset(seed=int(meta["seed"]))
        assert obs.tobytes() == episode.observations[0].tobytes()
        for t, action in enumerate(episode.actions):
            obs, reward, terminated, truncated, _ = env.step(action)
            assert obs.tobytes() == episode.observations[t + 1].tobytes(), t
            assert (reward, terminated, truncated) == (
                episode.rewards[t],
                episode.terminations[t],
                episode.truncations[t],
            )
        assert terminated or truncated
        env.close()


def test_a_plain_gymnasium_env_keeps_its_own_env_spec_and_a_wrapped_one_gets_the_stack():
    with VectorDataCollector(torchwm.make_vec("CartPole-v1", 2, seed=0, autoreset_seeds=True)) as envs:
        record(envs, 2)
        plain = envs.create_dataset("test/plain-v0")
    assert plain.spec.env_spec == gym.spec("CartPole-v1")  # as Minari's own collector stores it
    vec = torchwm.make_vec("CartPole-v1", 2, seed=0, wrappers=["clip_reward"], autoreset_seeds=True)
    with VectorDataCollector(vec) as envs:
        record(envs, 2)
        wrapped = envs.create_dataset("test/wrapped-v0")
    env = wrapped.recover_environment()
    assert [w.name for w in dataset_spec(wrapped).wrappers] == ["clip_reward"]
    replay(wrapped, lambda _: wrapped.recover_environment())
    env.close()


class CountedEnv(gym.Env):
    """Counts its instances not yet closed (``alive``); episodes of 3 steps."""

    alive = 0

    def __init__(self):
        self.observation_space = gym.spaces.Box(0.0, 3.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        CountedEnv.alive += 1
        self.closed = False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), float(action), self.t >= 3, False, {}

    def close(self):
        if not self.closed:
            self.closed = True
            CountedEnv.alive -= 1


if "TorchwmTest/Counted-v0" not in gym.registry:
    gym.register("TorchwmTest/Counted-v0", entry_point=f"{__name__}:CountedEnv")  # a spec JSON holds


@pytest.mark.parametrize("wrappers", [[], ["clip_reward"]], ids=["plain", "torchwm-stack"])
def test_create_dataset_leaves_no_env_open(wrappers):
    # Minari's create_dataset_from_buffers builds the recorded env (gym.make of the stored spec) to read
    # its spaces, and another for reference scores, and closes neither.
    CountedEnv.alive = 0
    vec = torchwm.make_vec("TorchwmTest/Counted-v0", 2, seed=0, wrappers=wrappers)
    with VectorDataCollector(vec) as envs:
        assert CountedEnv.alive == 2  # the vector env's own
        record(envs, 2)
        envs.create_dataset("test/counted-v0")
        assert CountedEnv.alive == 2
        record(envs, 2)
        scored = envs.create_dataset(
            "test/counted-scored-v0", expert_policy=lambda obs: 1, num_episodes_average_score=2
        )
        assert CountedEnv.alive == 2
    assert CountedEnv.alive == 0
    # The scores Minari computes: a random policy's for the minimum, the expert's for the maximum, each over
    # num_episodes_average_score episodes of the eval env.
    from minari.utils import RandomPolicy, get_average_reference_score

    eval_env = scored.recover_environment(eval_env=True)
    assert scored.storage.metadata["ref_min_score"] == get_average_reference_score(
        eval_env, RandomPolicy(eval_env), 2
    )
    assert scored.storage.metadata["ref_max_score"] == 3.0  # 3 steps of reward 1
    assert scored.storage.metadata["num_episodes_average_score"] == 2
    eval_env.close()
    with VectorDataCollector(torchwm.make_vec("CartPole-v1")) as envs:
        with pytest.raises(ValueError, match="expert_policy` and `ref_max_score"):
            envs.create_dataset("test/both-v0", expert_policy=lambda obs: 0, ref_max_score=1.0)


def test_a_missing_extra_is_one_line_naming_it():
    code = (
        "import sys; sys.modules['minari'] = None\n"
        "try:\n    import torchwm.integrations.minari\n"
        "except ImportError as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.count("\n") == 1 and "[minari]" in out and "pip install" in out


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_a_failed_write_leaves_no_dataset_and_keeps_the_episodes(failure, datasets_path, monkeypatch):
    import minari
    from minari.dataset._storages.hdf5_storage import HDF5Storage  # the default format

    def failing(self, episodes):
        raise failure("the disk is full")

    with VectorDataCollector(torchwm.make_vec("CartPole-v1", 2, seed=0, autoreset_seeds=True)) as envs:
        record(envs, 3)
        kept = envs.num_episodes
        with monkeypatch.context() as patch:
            patch.setattr(HDF5Storage, "update_episodes", failing)
            with pytest.raises(failure):
                envs.create_dataset("test/failed-v0")
        assert "test/failed-v0" not in minari.list_local_datasets()
        assert not (datasets_path / "test" / "failed-v0").exists()
        assert envs.num_episodes == kept
        dataset = envs.create_dataset("test/failed-v0")
    assert dataset.total_episodes == kept
    replay(dataset, lambda _: gym.make("CartPole-v1"))


def test_an_existing_dataset_is_refused_and_kept(datasets_path):
    with VectorDataCollector(torchwm.make_vec("CartPole-v1", 2, seed=0, autoreset_seeds=True)) as envs:
        record(envs, 2)
        first = envs.create_dataset("test/taken-v0").total_episodes
        record(envs, 2)
        with pytest.raises(ValueError, match="already exists"):
            envs.create_dataset("test/taken-v0")
    import minari

    assert minari.load_dataset("test/taken-v0").total_episodes == first
