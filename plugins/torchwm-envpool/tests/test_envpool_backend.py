"""The ``envpool`` backend against ``sync`` where EnvPool is deterministic, and its seeds and limits."""

import math

import gymnasium as gym
import numpy as np
import pytest

import torchwm
from torchwm.errors import UnsupportedStackError
from torchwm.plugins import registry

# Without randomness (no sticky actions, exactly one no-op at reset) EnvPool's Atari pipeline
# and Gymnasium's wrappers see the same frames, so the arrays can be compared one for one.
DETERMINISTIC = {"repeat_action_probability": 0.0, "max_num_frames_per_episode": 400}
PREPROCESS = {"name": "atari_preprocessing", "noop_max": 1}


def test_backend_comes_from_the_plugin_entry_point():
    entry = registry("backend").get("envpool")
    assert (entry.plugin, entry.distribution) == ("envpool", "torchwm-envpool")


@pytest.mark.parametrize(
    "stack",
    [
        [PREPROCESS, "frame_stack"],  # zero padding, emulated
        [PREPROCESS, {"name": "frame_stack", "padding": "reset"}],  # EnvPool's own padding
        [PREPROCESS],  # no stack: EnvPool's stack axis dropped
        [PREPROCESS, "frame_stack", "clip_reward"],
    ],
    ids=["zero-padding", "reset-padding", "no-frame-stack", "clip-reward"],
)
def test_pong_matches_sync_frame_for_frame(stack):
    rng = np.random.default_rng(0)
    kwargs = {"wrappers": stack, "seed": 0, **DETERMINISTIC}
    with (
        torchwm.make_vec("ALE/Pong-v5", 2, backend="envpool", **kwargs) as envs,
        torchwm.make_vec("ALE/Pong-v5", 2, backend="sync", **kwargs) as ref,
    ):
        assert envs.single_observation_space == ref.single_observation_space
        assert np.array_equal(envs.reset()[0], ref.reset()[0])
        truncated_at = []
        for t in range(230):
            actions = rng.integers(0, envs.single_action_space.n, size=2)
            obs, rewards, terminations, truncations, _ = envs.step(actions)
            want = ref.step(actions)
            for a, b in zip((rewards, terminations, truncations), want[1:4]):
                assert np.array_equal(a, b), f"step {t}"
            if truncations.any():
                # ALE counts the reset no-op against the frame limit, EnvPool does not: the last
                # step of a truncated episode runs one frame more there, so only its frame differs.
                truncated_at.append(t)
                continue
            assert np.array_equal(obs, want[0]), f"observations differ at step {t}"
        assert truncated_at == [99, 200], "both time limits (100 steps of 4 frames) should have been reached"


def test_reset_seed_remakes_the_pool_and_repeats_episodes():
    with torchwm.make_vec("ALE/Pong-v5", 2, backend="envpool") as envs:
        runs = []
        for _ in range(2):
            frames = [envs.reset(seed=5)[0]]
            frames += [envs.step(np.full(2, 2))[0] for _ in range(30)]
            runs.append(np.stack(frames))
        assert np.array_equal(runs[0], runs[1])
        assert not np.array_equal(runs[0][:, 0], runs[0][:, 1]), "envs 0 and 1 got the same seed"


def test_seeding_some_envs_only_is_refused():
    with torchwm.make_vec("CartPole-v1", 4, backend="envpool", seed=0) as envs:
        envs.reset()
        with pytest.raises(ValueError, match="seed only a reset of every env"):
            envs.reset(seed=3, env_ids=[1])
        obs, infos = envs.reset(env_ids=[1, 2])
        assert obs.shape == (2, 4) and infos["env_id"].tolist() == [1, 2]


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (-1, "seed must be an int >= 0"),  # the check every backend shares (Gymnasium's rule)
        (2**31 - 1, r"seeds must be ints in \[0, 2147483647\].*for env 1"),  # what EnvPool adds: int32
        (2**40, r"seeds must be ints in \[0, 2147483647\].*for env 0"),
    ],
)
def test_seeds_envpool_cannot_take_are_refused_and_change_nothing(seed, message):
    """EnvPool asserts on seeds outside int32 (after the old pool was closed) and takes negative ones."""
    with (
        torchwm.make_vec("CartPole-v1", 2, backend="envpool", seed=3) as envs,
        torchwm.make_vec("CartPole-v1", 2, backend="envpool", seed=3) as fresh,
    ):
        with pytest.raises(ValueError, match=message):
            envs.reset(seed=seed)
        assert np.array_equal(envs.reset()[0], fresh.reset()[0])  # the make_vec seed, on the same pool


def test_a_make_vec_seed_envpool_cannot_take_is_refused_before_a_pool_is_made(monkeypatch):
    import envpool

    monkeypatch.setattr(envpool, "make_gymnasium", lambda *a, **k: pytest.fail("a pool was made"))
    with pytest.raises(
        ValueError, match=r"seeds must be ints in \[0, 2147483647\].*got 2147483648 for env 1"
    ):
        torchwm.make_vec("CartPole-v1", 2, backend="envpool", seed=2**31 - 1)


@pytest.mark.parametrize(
    ("timeout", "error"), [(math.nan, ValueError), (-1, ValueError), (0, ValueError), ("a", TypeError)]
)
def test_a_bad_timeout_is_refused_before_a_pool_is_made(monkeypatch, timeout, error):
    import envpool

    monkeypatch.setattr(envpool, "make_gymnasium", lambda *a, **k: pytest.fail("a pool was made"))
    with pytest.raises(error, match="timeout must be a number of seconds > 0, or None for no limit"):
        torchwm.make_vec("CartPole-v1", 2, backend="envpool", backend_kwargs={"timeout": timeout})


@pytest.mark.parametrize("batch_size", [None, 2])
def test_recv_checks_its_timeout_as_every_backend_does(batch_size):
    with torchwm.make_vec(
        "CartPole-v1",
        4,
        backend="envpool",
        seed=0,
        backend_kwargs={"batch_size": batch_size, "timeout": math.inf},
    ) as envs:
        assert envs.timeout is None  # inf: no limit
        envs.reset()
        envs.send(np.zeros(4, dtype=np.int64))
        for bad, error in ((-1, ValueError), (math.nan, ValueError), ("a", TypeError)):
            with pytest.raises(error, match=r"recv\(timeout=\) must be a number of seconds > 0"):
                envs.recv(timeout=bad)
        assert envs.recv(timeout=30)[1].shape == (batch_size or 4,)  # the refused waits changed nothing


def test_a_second_send_before_recv_is_gymnasiums_error():
    with torchwm.make_vec("CartPole-v1", 4, backend="envpool", seed=0) as envs:
        envs.reset()
        envs.send(np.zeros(2, dtype=np.int64), env_ids=[0, 1])
        with pytest.raises(
            gym.error.AlreadyPendingCallError, match="recv\\(\\) before sending again"
        ) as caught:
            envs.send(np.zeros(2, dtype=np.int64), env_ids=[2, 3])
        assert caught.value.name == "step"
        assert envs.recv()[1].shape == (2,)


def test_cartpole_keeps_gymnasiums_time_limit():
    with torchwm.make_vec("CartPole-v1", 1, backend="envpool", seed=0) as envs:
        assert envs.envpool.config["max_episode_steps"] == 500


def test_recv_that_could_never_complete_is_refused():
    with torchwm.make_vec(
        "CartPole-v1", 4, backend="envpool", seed=0, backend_kwargs={"batch_size": 2}
    ) as envs:
        envs.reset()
        envs.send(np.zeros(1, dtype=np.int64), env_ids=[3])
        with pytest.raises(ValueError, match="exactly batch_size=2 envs per wait and only 1 are in flight"):
            envs.recv()


def test_a_stack_envpool_cannot_run_fails_before_a_pool_is_made(monkeypatch):
    import envpool

    monkeypatch.setattr(envpool, "make_gymnasium", lambda *a, **k: pytest.fail("a pool was made"))
    with pytest.raises(UnsupportedStackError, match="autoreset_mode='disabled'"):
        torchwm.make_vec("ALE/Pong-v5", 2, backend="envpool", autoreset_mode="disabled")


def test_the_shortcut_for_full_batches_gives_what_the_base_class_gives():
    """recv() of every env takes a shortcut; torchwm.VectorEnv.recv must give the same results."""
    rng = np.random.default_rng(1)
    with (
        torchwm.make_vec("ALE/Pong-v5", 3, backend="envpool", seed=2) as fast,
        torchwm.make_vec("ALE/Pong-v5", 3, backend="envpool", seed=2) as general,
    ):
        fast.reset()
        general.reset()
        for t in range(120):
            actions = rng.integers(0, 6, size=3)
            got = fast.step(actions)
            general.send(actions)
            want = torchwm.VectorEnv.recv(general)
            for a, b in zip(got[:4], want[:4]):
                assert np.array_equal(a, b), f"step {t}"
            assert got[4].keys() == want[4].keys() and got[4]["lives"].dtype == want[4]["lives"].dtype
            for key in got[4]:
                assert np.array_equal(got[4][key], want[4][key]), f"infos[{key!r}] at step {t}"


def test_the_envpool_direct_bench_peer_runs_the_backends_pool():
    # `torchwm bench --backends envpool,envpool-direct` compares the two: they must do the same work.
    from torchwm.bench import plugin_peers
    from torchwm.factory import resolve_spec

    owner, factory = plugin_peers()["envpool-direct"]
    assert owner == "envpool"
    direct = factory(resolve_spec("ALE/Pong-v5", 3, backend="envpool", seed=0))
    rng = np.random.default_rng(0)
    with torchwm.make_vec("ALE/Pong-v5", 3, backend="envpool", seed=0) as envs:
        obs, _ = envs.reset()
        direct_obs, _ = direct.reset(seed=0)
        # The newest frame of each stack (torchwm blanks the padding frames EnvPool repeats).
        assert np.array_equal(obs[:, -1], direct_obs[:, -1])
        for _ in range(50):
            actions = direct.action_space.sample() if _ % 2 else rng.integers(0, 6, size=3)
            obs, rewards, terminations, truncations, _ = envs.step(actions)
            direct_obs, direct_rewards, *_ = direct.step(actions)
            assert np.array_equal(obs[:, -1], direct_obs[:, -1]) and np.array_equal(rewards, direct_rewards)
    direct.close()


@pytest.mark.parametrize("batch_size", [None, 1])
def test_evaluate_runs_each_envs_quota(batch_size):
    """`torchwm.evaluate` over EnvPool: each env's share of the episodes fixed in advance, as SB3's
    evaluate_policy fixes it, also in EnvPool's asynchronous mode (``batch_size``)."""
    frames = 40  # 10 agent steps an episode
    with torchwm.make_vec(
        "ALE/Pong-v5",
        2,
        backend="envpool",
        seed=0,
        max_num_frames_per_episode=frames,
        backend_kwargs={"batch_size": batch_size},
    ) as envs:
        result = torchwm.evaluate(envs, lambda obs: np.zeros(len(obs), dtype=np.int64), n_episodes=3)
    assert sorted(result.env_ids.tolist()) == [0, 1, 1]
    assert result.lengths.tolist() == [frames // 4] * 3
