"""`torchwm.integrations.sb3.SB3VecEnv`: what SB3's own `DummyVecEnv` returns, and PPO trains on it.

The reference is `DummyVecEnv` over the same envs (same seeds, same actions): observations, rewards,
dones, the ``terminal_observation`` and ``TimeLimit.truncated`` infos, the episode statistics and the
reset infos must be equal. Then SB3's PPO on ``shmem`` logs the same episode returns as on `DummyVecEnv`.
"""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")  # an optional extra; the [test] extra installs it

from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

import torchwm  # noqa: E402
from torchwm.integrations.sb3 import SB3VecEnv  # noqa: E402

N = 3


def short_cartpole() -> gym.Env:
    # Truncation at 30 steps, so that both ends of an episode (terminated, truncated) occur early.
    return RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=30))


def assert_info_equal(got: dict, expected: dict) -> None:
    assert set(got) == set(expected)
    for key, value in expected.items():
        if key == "episode":
            assert (got[key]["r"], got[key]["l"]) == (value["r"], value["l"])
        elif isinstance(value, np.ndarray):
            assert np.array_equal(got[key], value)
        else:
            assert got[key] == value, key


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_steps_equal_dummy_vec_env(backend):
    reference = DummyVecEnv([short_cartpole] * N)
    venv = SB3VecEnv(torchwm.make_vec_from_fns([short_cartpole] * N, backend=backend, autoreset_mode="same_step"))
    rng = np.random.default_rng(0)
    for venv_ in (reference, venv):
        venv_.seed(5)
    obs = reference.reset()
    assert np.array_equal(venv.reset(), obs)
    ended = {"terminated": 0, "truncated": 0}
    for _ in range(120):
        # Env 0 random (its pole falls: terminated), the others balanced (to the time limit: truncated).
        actions = (obs[:, 2] + obs[:, 3] > 0).astype(np.int64)
        actions[0] = rng.integers(0, 2)
        got, expected = venv.step(actions), reference.step(actions)
        for a, b in zip(got[:3], expected[:3], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        for got_info, expected_info in zip(got[3], expected[3], strict=True):
            assert_info_equal(got_info, expected_info)
        for got_info, expected_info in zip(venv.reset_infos, reference.reset_infos, strict=True):
            assert_info_equal(got_info, expected_info)
        obs = expected[0]
        for info, done in zip(expected[3], expected[2], strict=True):
            if done:
                ended["truncated" if info["TimeLimit.truncated"] else "terminated"] += 1
    assert ended["terminated"] and ended["truncated"], ended  # both ends of an episode were compared
    venv.close()


def test_other_autoreset_modes_are_refused_with_what_to_do():
    with torchwm.make_vec("CartPole-v1", 2) as vec, pytest.raises(ValueError, match="autoreset_mode='same_step'"):
        SB3VecEnv(vec)


def test_attributes_and_methods_of_the_envs():
    venv = SB3VecEnv(torchwm.make_vec("CartPole-v1", 2, backend="shmem", autoreset_mode="same_step"))
    venv.set_attr("marker", 7)
    assert venv.get_attr("marker", indices=1) == [7]
    assert venv.env_method("get_wrapper_attr", "marker", indices=[1, 0]) == [7, 7]
    assert venv.env_is_wrapped(TimeLimit) == [True, True]
    assert venv.env_is_wrapped(Monitor) == [False, False]
    with pytest.raises(ValueError, match="a subset"):
        venv.env_method("reset", indices=[0])
    with pytest.raises(ValueError, match="a subset"):
        venv.set_attr("marker", 8, indices=[0])
    venv.close()


def test_ppo_logs_the_returns_it_logs_on_dummy_vec_env():
    def returns(venv) -> list[float]:
        model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=2, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [16]})
        model.learn(total_timesteps=4 * 64 * 6)
        venv.close()
        return [episode["r"] for episode in model.ep_info_buffer]

    expected = returns(DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"))] * 4))
    got = returns(SB3VecEnv(torchwm.make_vec("CartPole-v1", 4, backend="shmem", autoreset_mode="same_step",
                                             wrappers=["episode_statistics"])))
    assert len(expected) > 10
    assert got == expected
