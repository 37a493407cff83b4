"""`torchwm.integrations.sb3.SB3VecEnv`: what SB3's own `DummyVecEnv` returns, and PPO trains on it.

The reference is `DummyVecEnv` over the same envs (same seeds, same actions): observations, rewards,
dones, the ``terminal_observation`` and ``TimeLimit.truncated`` infos, the episode statistics and the
reset infos must be equal; so must Dict and Tuple actions (SB3 gives one per env), calls on a subset of
envs (``indices``) and per-env reset options. Then SB3's PPO on ``shmem`` logs the same episode returns
as on `DummyVecEnv`, and DQN with a `HerReplayBuffer` (which calls ``compute_reward`` on env 0 only)
learns the same network on 4 envs on ``shmem`` as on `DummyVecEnv`.
"""

import copy
import functools
import os
import signal
import warnings

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3")  # an optional extra; the [test] extra installs it
import torch  # noqa: E402  (installed with stable_baselines3)
from gymnasium import spaces  # noqa: E402
from gymnasium.envs.classic_control import CartPoleEnv  # noqa: E402
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit  # noqa: E402
from stable_baselines3 import DQN, PPO, HerReplayBuffer  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.envs import BitFlippingEnv  # noqa: E402
from stable_baselines3.common.evaluation import evaluate_policy  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402
from support.processes import wait_until_ended  # noqa: E402

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
    venv = SB3VecEnv(
        torchwm.make_vec_from_fns([short_cartpole] * N, backend=backend, autoreset_mode="same_step")
    )
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
    # In torchwm's spelling (the word make_vec takes), not Gymnasium's enum value ('NextStep').
    with torchwm.make_vec("CartPole-v1", 2) as vec, pytest.raises(ValueError) as refused:
        SB3VecEnv(vec)
    said = str(refused.value)
    assert "autoreset_mode='next_step'" in said and "NextStep" not in said
    assert "pass autoreset_mode='same_step' to torchwm.make_vec" in said
    with (
        torchwm.make_vec("CartPole-v1", 2, autoreset_mode="disabled") as vec,
        pytest.raises(ValueError) as refused,
    ):
        SB3VecEnv(vec)
    assert "autoreset_mode='disabled'" in str(refused.value)


# The spaces of SB3's test_vec_envs.py (test_vecenv_dict_spaces, test_vecenv_tuple_spaces).
SPACES = {
    "discrete": spaces.Discrete(2),
    "multidiscrete": spaces.MultiDiscrete([2, 3]),
    "multibinary": spaces.MultiBinary(3),
    "continuous": spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32)),
}


class EchoEnv(gym.Env):
    """SB3's CustomGymEnv (action space = observation space, 4-step episodes), made deterministic: the
    observation is the action taken, the reward its flattened sum, so that two vector envs given the same
    actions must return equal arrays."""

    def __init__(self, space: gym.Space) -> None:
        self.action_space = self.observation_space = copy.deepcopy(space)  # each env draws from its own
        self.current_step = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.current_step = 0
        return self.observation_space.sample() if options is None else options["obs"], {"options": options}

    def step(self, action):
        self.current_step += 1
        reward = float(spaces.flatten(self.action_space, action).sum())
        ended = self.current_step >= 4
        return action, reward, ended, False, {}

    @staticmethod
    def custom_method(dim_0=1, dim_1=1):
        return np.ones((dim_0, dim_1))


def assert_obs_equal(got, expected) -> None:
    if isinstance(expected, dict):
        # Key order aside: DummyVecEnv's terminal_observation is the env's own dict, in the env's order.
        assert sorted(got) == sorted(expected)
        for key in expected:
            assert_obs_equal(got[key], expected[key])
    elif isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for a, b in zip(got, expected, strict=True):
            assert_obs_equal(a, b)
    else:
        assert got.dtype == expected.dtype and np.array_equal(got, expected)


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
@pytest.mark.parametrize("kind", ["dict", "unordered_dict", "tuple"])
def test_dict_and_tuple_actions_equal_dummy_vec_env(backend, kind):
    space = spaces.Tuple(tuple(SPACES.values())) if kind == "tuple" else spaces.Dict(SPACES)
    make = functools.partial(EchoEnv, space)
    reference = DummyVecEnv([make] * N)
    venv = SB3VecEnv(torchwm.make_vec_from_fns([make] * N, backend=backend, autoreset_mode="same_step"))
    for venv_ in (reference, venv):
        venv_.seed(3)
    assert_obs_equal(venv.reset(), reference.reset())
    space.seed(0)
    ended = 0
    for _ in range(6):
        # As SB3's check_vecenv_spaces: a list of one sampled action per env.
        actions = [space.sample() for _ in range(N)]
        if kind == "unordered_dict":
            actions = [dict(reversed(list(action.items()))) for action in actions]
        got, expected = venv.step(actions), reference.step(actions)
        assert_obs_equal(got[0], expected[0])
        if kind != "tuple":
            assert list(got[0]) == list(expected[0]) == list(space.spaces)
        for a, b in zip(got[1:3], expected[1:3], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        for got_info, expected_info in zip(got[3], expected[3], strict=True):
            assert set(got_info) == set(expected_info)
            if "terminal_observation" in expected_info:
                ended += 1
                assert_obs_equal(got_info["terminal_observation"], expected_info["terminal_observation"])
    assert ended == N  # every env ended once, at step 4
    with pytest.raises(ValueError, match="one per env"):
        venv.step(actions[:2])
    venv.close()


@pytest.mark.parametrize("backend", ["sync", "subproc", "shmem"])
def test_calls_on_a_subset_of_envs_equal_dummy_vec_env(backend):
    """SB3's test_vecenv_custom_calls, against DummyVecEnv: env_method, get_attr and set_attr with indices
    (an int, a list, negative ones) reach those envs only."""
    make = functools.partial(EchoEnv, spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32)))
    results = []
    for venv in (
        DummyVecEnv([make] * N),
        SB3VecEnv(torchwm.make_vec_from_fns([make] * N, backend=backend, autoreset_mode="same_step")),
    ):
        venv.reset()
        calls = [
            venv.env_method("custom_method", 1, indices=None, dim_1=2),
            venv.env_method("custom_method", 1, indices=[0, 2], dim_1=3),
        ]
        for env_idx in range(N):
            venv.set_attr("current_step", env_idx, indices=env_idx)
        attrs = [venv.get_attr("current_step")]
        venv.set_attr("current_step", 12, indices=[0, -1])
        venv.set_attr("marker", [1, 2], indices=[1])  # a list value is set whole, on env 1 only
        attrs += [
            venv.get_attr("current_step"),
            venv.get_attr("current_step", indices=[-1, 1]),
            venv.get_attr("marker", indices=1),
        ]
        wrapped = [
            venv.env_is_wrapped(Monitor),
            venv.env_is_wrapped(gym.wrappers.PassiveEnvChecker, indices=2),
        ]
        venv.close()
        results.append((calls, attrs, wrapped))
    (calls, attrs, wrapped), (expected_calls, expected_attrs, expected_wrapped) = results
    assert attrs == expected_attrs == [[0, 1, 2], [12, 1, 12], [12, 1], [[1, 2]]]
    assert [[a.tolist() for a in c] for c in calls] == [[a.tolist() for a in c] for c in expected_calls]
    assert [len(c) for c in calls] == [N, 2]
    assert wrapped == expected_wrapped == [[False] * N, [False]]


def test_attributes_and_methods_of_the_envs():
    venv = SB3VecEnv(torchwm.make_vec("CartPole-v1", 2, backend="shmem", autoreset_mode="same_step"))
    venv.set_attr("marker", 7)
    assert venv.get_attr("marker", indices=1) == [7]
    assert venv.env_method("get_wrapper_attr", "marker", indices=[1, 0]) == [7, 7]
    venv.set_attr("marker", 8, indices=[0])
    assert venv.get_attr("marker") == [8, 7]
    assert venv.env_is_wrapped(TimeLimit) == [True, True]
    assert venv.env_is_wrapped(Monitor) == [False, False]
    with pytest.raises(IndexError, match=r"env indices \[2\] out of range for 2 envs"):
        venv.get_attr("marker", indices=[2])
    venv.close()


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_per_env_reset_options_equal_dummy_vec_env(backend):
    space = spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32))
    make = functools.partial(EchoEnv, space)
    options = [{"obs": np.full(2, 0.25, np.float32)}, {}, {"obs": np.full(2, 0.5, np.float32)}]
    results = []
    for venv in (
        DummyVecEnv([make] * N),
        SB3VecEnv(torchwm.make_vec_from_fns([make] * N, backend=backend, autoreset_mode="same_step")),
    ):
        venv.seed(1)
        venv.set_options(options)
        obs = venv.reset()
        results.append((obs, [info["options"] for info in venv.reset_infos]))
        venv.close()
    (obs, infos), (expected_obs, expected_infos) = results
    assert_obs_equal(obs, expected_obs)
    assert np.array_equal(obs[0], options[0]["obs"]) and np.array_equal(obs[2], options[2]["obs"])
    assert [None if o is None else o["obs"].tolist() for o in infos] == [
        None if o is None else o["obs"].tolist() for o in expected_infos
    ]


def test_her_trains_with_4_envs_on_shmem_as_on_dummy_vec_env():
    """SB3's HerReplayBuffer calls env_method("compute_reward", ..., indices=[0]): DQN+HER on 4 envs on shmem
    learns the network it learns on DummyVecEnv (same seed, same arrays, same updates)."""

    def make():
        return BitFlippingEnv(n_bits=4, continuous=False, max_steps=4)

    def learn(venv):
        model = DQN(
            "MultiInputPolicy",
            venv,
            replay_buffer_class=HerReplayBuffer,
            replay_buffer_kwargs={"n_sampled_goal": 2, "goal_selection_strategy": "future"},
            learning_starts=64,
            batch_size=32,
            train_freq=4,
            gradient_steps=1,
            seed=0,
            device="cpu",
            policy_kwargs={"net_arch": [16]},
        )
        model.learn(total_timesteps=400)
        venv.close()
        return model

    expected = learn(DummyVecEnv([make] * 4))
    got = learn(SB3VecEnv(torchwm.make_vec_from_fns([make] * 4, backend="shmem", autoreset_mode="same_step")))
    assert got.replay_buffer.size() == expected.replay_buffer.size() > 64
    assert got._n_updates == expected._n_updates > 0
    for (name, a), (_, b) in zip(
        got.policy.state_dict().items(), expected.policy.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_ppo_logs_the_returns_it_logs_on_dummy_vec_env():
    def returns(venv) -> list[float]:
        model = PPO(
            "MlpPolicy",
            venv,
            n_steps=64,
            batch_size=64,
            n_epochs=2,
            seed=0,
            device="cpu",
            policy_kwargs={"net_arch": [16]},
        )
        model.learn(total_timesteps=4 * 64 * 6)
        venv.close()
        return [episode["r"] for episode in model.ep_info_buffer]

    expected = returns(DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"))] * 4))
    got = returns(
        SB3VecEnv(
            torchwm.make_vec(
                "CartPole-v1", 4, backend="shmem", autoreset_mode="same_step", wrappers=["episode_statistics"]
            )
        )
    )
    assert len(expected) > 10
    assert got == expected


@pytest.mark.parametrize(
    ("backend", "backend_kwargs"),
    [("sync", {}), ("subproc", {"num_workers": 1}), ("shmem", {"num_workers": 1})],
)
def test_a_factory_that_returns_one_env_every_time_is_refused_as_dummy_vec_env_refuses_it(
    backend, backend_kwargs
):
    env = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match="returned the same instance") as expected:
        DummyVecEnv([lambda: env] * N)
    sentence = str(expected.value).split(" instead")[0]
    with pytest.raises(ValueError, match=sentence):
        torchwm.make_vec_from_fns([lambda: env] * N, backend=backend, backend_kwargs=backend_kwargs)
    env.close()


def test_per_env_options_keep_the_make_vec_seed_of_the_first_reset():
    make = functools.partial(EchoEnv, spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32)))
    with torchwm.make_vec_from_fns([make] * N, seed=7, autoreset_mode="same_step") as plain:
        expected = plain.reset()[0]
    venv = SB3VecEnv(torchwm.make_vec_from_fns([make] * N, seed=7, autoreset_mode="same_step"))
    # Env 0's group is reset first: envs 1 and 2 still get make_vec's seed (7 + i).
    venv.set_options([{"obs": np.zeros(2, np.float32)}, {}, {}])
    obs = venv.reset()
    venv.close()
    assert np.array_equal(obs[1:], expected[1:]) and not obs[0].any()


# -- infos with keys of any kind, indices empty or repeated (DummyVecEnv's answers) ------------------------


class CountingEnv(EchoEnv):
    """EchoEnv with a method and a property setter that count their calls."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__(space)
        self.calls = 0
        self.knob_sets: list = []

    def count(self, step=1):
        self.calls += step
        return self.calls

    @property
    def knob(self):
        return self.knob_sets[-1] if self.knob_sets else None

    @knob.setter
    def knob(self, value):
        self.knob_sets.append(value)


class KeyedInfoEnv(EchoEnv):
    """EchoEnv whose infos have a key that is no string and one that starts with ``_`` (DummyVecEnv passes
    both through)."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs, {**info, 1: -1, "_private": -0.5}

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {1: self.current_step, "_private": 0.5 * self.current_step}


def dummy_and_sb3_vec_envs(env_class, backend):
    make = functools.partial(env_class, spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32)))
    return (
        DummyVecEnv([make] * N),
        SB3VecEnv(torchwm.make_vec_from_fns([make] * N, backend=backend, autoreset_mode="same_step")),
    )


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_info_keys_that_are_not_strings_pass_through_as_in_dummy_vec_env(backend):
    reference, venv = dummy_and_sb3_vec_envs(KeyedInfoEnv, backend)
    for venv_ in (reference, venv):
        venv_.seed(2)
    assert_obs_equal(venv.reset(), reference.reset())
    for got_info, expected_info in zip(venv.reset_infos, reference.reset_infos, strict=True):
        assert_info_equal(got_info, expected_info)
    assert reference.reset_infos[0][1] == -1 and reference.reset_infos[0]["_private"] == -0.5
    ended = 0
    for t in range(6):
        actions = np.full((N, 2), 0.25 * (t % 3), np.float32)
        got, expected = venv.step(actions), reference.step(actions)
        assert_obs_equal(got[0], expected[0])
        for got_info, expected_info in zip(got[3], expected[3], strict=True):
            assert_info_equal(got_info, expected_info)
            ended += "terminal_observation" in expected_info
        for got_info, expected_info in zip(venv.reset_infos, reference.reset_infos, strict=True):
            assert_info_equal(got_info, expected_info)
    assert ended == N  # the ended step's infos (final_info in torchwm) were compared too
    reference.close()
    venv.close()


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_empty_and_repeated_indices_answer_as_dummy_vec_env(backend):
    results = []
    for venv in dummy_and_sb3_vec_envs(CountingEnv, backend):
        venv.reset()
        answers = {
            "get_attr []": venv.get_attr("current_step", indices=[]),
            "env_method []": venv.env_method("count", indices=[]),
            "env_is_wrapped []": venv.env_is_wrapped(Monitor, indices=[]),
        }
        venv.set_attr("knob", "none", indices=[])
        # Copies: DummyVecEnv answers with the envs' own lists, which the calls below change.
        answers["knob_sets after []"] = copy.deepcopy(venv.get_attr("knob_sets"))
        # Env 0 three times (-3 is env 0): each call reaches it, in order.
        answers["env_method [0, 0, 2, -3]"] = venv.env_method("count", 2, indices=[0, 0, 2, -3])
        answers["get_attr [1, 1]"] = venv.get_attr("current_step", indices=[1, 1])
        answers["env_is_wrapped [2, 2]"] = venv.env_is_wrapped(Monitor, indices=[2, 2])
        venv.set_attr("knob", "twice", indices=[1, -2])
        venv.set_attr("knob", "once", indices=[2])
        answers["knob_sets"] = venv.get_attr("knob_sets")
        answers["calls"] = venv.get_attr("calls", indices=[0, 0, 1])
        venv.close()
        results.append(answers)
    got, expected = results[1], results[0]
    assert got == expected
    assert expected["env_method [0, 0, 2, -3]"] == [2, 4, 2, 6]
    assert expected["knob_sets"] == [[], ["twice", "twice"], ["once"]]


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_indices_out_of_range_raise_as_dummy_vec_env(backend):
    # DummyVecEnv indexes its list of envs: IndexError, and no env reached (it finds every env first).
    make = functools.partial(
        CountingEnv, spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32))
    )
    calls = {
        "get_attr": lambda venv, indices: venv.get_attr("calls", indices=indices),
        "set_attr": lambda venv, indices: venv.set_attr("knob", "set", indices=indices),
        "env_method": lambda venv, indices: venv.env_method("count", indices=indices),
        "env_is_wrapped": lambda venv, indices: venv.env_is_wrapped(Monitor, indices=indices),
    }
    results = []
    for venv in (
        DummyVecEnv([make] * 2),
        SB3VecEnv(torchwm.make_vec_from_fns([make] * 2, backend=backend, autoreset_mode="same_step")),
    ):
        raised = {}
        for indices in (2, -3, [0, 5], [-3, 1], [1.0]):
            for name, call in calls.items():
                with pytest.raises(Exception) as info:  # noqa: PT011  (the type is compared below)
                    call(venv, indices)
                raised[name, repr(indices)] = info.type
        raised["untouched"] = (venv.get_attr("calls"), venv.get_attr("knob_sets"))
        venv.close()
        results.append(raised)
    expected, got = results
    assert got == expected
    assert expected["get_attr", "[0, 5]"] is IndexError and expected["set_attr", "-3"] is IndexError
    assert expected["env_method", "[1.0]"] is TypeError
    assert expected["untouched"] == ([0, 0], [[], []])


class SubMonitor(Monitor):
    """A subclass of SB3's Monitor: ``isinstance`` says it is one, its class name does not."""


def make_sub_monitored():
    return SubMonitor(gym.make("CartPole-v1"))


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_env_is_wrapped_has_isinstance_answers_as_dummy_vec_env(backend):
    make = make_sub_monitored
    results = []
    for venv in (
        DummyVecEnv([make] * 2),
        SB3VecEnv(torchwm.make_vec_from_fns([make] * 2, backend=backend, autoreset_mode="same_step")),
    ):
        classes = [Monitor, SubMonitor, gym.Wrapper, TimeLimit, CartPoleEnv]  # the last: the env itself
        results.append([venv.env_is_wrapped(cls) for cls in classes])
        venv.close()
    got, expected = results[1], results[0]
    assert expected == [[True, True], [True, True], [True, True], [True, True], [False, False]]
    assert got == expected


# -- a worker that dies under learning (restart_on_crash) ---------------------------------------------------


class DropFinalObs(gym.vector.VectorWrapper):
    """A vector wrapper that drops what same_step adds for ended envs (final_obs, final_info)."""

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        infos = {
            k: v
            for k, v in infos.items()
            if k not in ("final_obs", "_final_obs", "final_info", "_final_info")
        }
        return obs, rewards, terminations, truncations, infos


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_an_ended_env_without_final_obs_gets_its_current_observation(backend):
    reference = DummyVecEnv([short_cartpole] * N)
    vec = torchwm.make_vec_from_fns([short_cartpole] * N, backend=backend, autoreset_mode="same_step")
    venv = SB3VecEnv(DropFinalObs(vec))
    for venv_ in (reference, venv):
        venv_.seed(4)
    assert np.array_equal(venv.reset(), reference.reset())
    ended = 0
    for _ in range(40):
        actions = np.ones(N, dtype=np.int64)  # the pole falls within a few steps
        (obs, _, dones, infos), expected = venv.step(actions), reference.step(actions)
        assert np.array_equal(obs, expected[0]) and np.array_equal(dones, expected[2])
        for i in np.flatnonzero(dones):
            ended += 1
            assert np.array_equal(infos[i]["terminal_observation"], obs[i])
            assert infos[i]["TimeLimit.truncated"] == expected[3][i]["TimeLimit.truncated"]
    assert ended >= N
    venv.close()
    reference.close()


class KillWorkerZero(BaseCallback):
    """Kills worker 0 after step ``at`` (so that the next step finds it dead), and records the infos of
    the step after: what SB3's learner read for the restarted envs, and the observations it had before."""

    def __init__(self, vec, at):
        super().__init__()
        self.vec, self.at, self.seen = vec, at, []
        self.killed = self.killed_at_call = None

    def _on_step(self):
        if self.killed is not None and not self.seen:
            self.seen = [
                (info, self.model._last_obs[i], done)
                for i, (info, done) in enumerate(zip(self.locals["infos"], self.locals["dones"], strict=True))
            ]
        if self.n_calls == self.at:
            self.killed = self.vec.worker_pids[0]
            os.kill(self.killed, signal.SIGKILL)
            wait_until_ended([self.killed], 30)
        return True


@pytest.mark.parametrize("backend", ["subproc", "shmem"])
def test_ppo_learns_on_when_a_worker_is_killed_with_restart_on_crash(backend):
    vec = torchwm.make_vec(
        "CartPole-v1",
        4,
        backend=backend,
        autoreset_mode="same_step",
        backend_kwargs={"num_workers": 2, "restart_on_crash": True, "timeout": 60},
    )
    venv = SB3VecEnv(vec)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=32,
        batch_size=64,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )
    callback = KillWorkerZero(vec, at=20)
    model.learn(total_timesteps=300, callback=callback)
    assert model.num_timesteps >= 300
    assert vec.worker_pids[0] != callback.killed
    # Worker 0 held envs 0 and 1: their episodes ended truncated, flagged, with the observation SB3 had
    # (the terminal_observation that bootstraps a truncated episode); envs 2 and 3 carried on.
    restarted = [info.get("worker_restarted", False) for info, _, _ in callback.seen]
    assert restarted == [True, True, False, False]
    for info, last_obs, done in callback.seen[:2]:
        assert done and info["TimeLimit.truncated"] is True
        assert np.array_equal(info["terminal_observation"], last_obs)
    venv.close()


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_an_env_that_returns_some_envs_per_step_is_refused(backend):
    # SB3 steps every env each step: with batch_size=2 of 4, infos_to_rows failed with an IndexError.
    with torchwm.make_vec(
        "CartPole-v1", 4, backend=backend, autoreset_mode="same_step", backend_kwargs={"batch_size": 2}
    ) as envs:
        with pytest.raises(ValueError, match=r"SB3VecEnv steps every env.*batch_size=2 of its num_envs=4"):
            SB3VecEnv(envs)
        assert not envs.closed
    with torchwm.make_vec(
        "CartPole-v1", 4, backend=backend, autoreset_mode="same_step", backend_kwargs={"batch_size": 4}
    ) as envs:
        venv = SB3VecEnv(envs)
        venv.reset()
        assert venv.step(np.zeros(4, dtype=np.int64))[0].shape == (4, 4)


def evaluate(venv):
    """SB3's evaluate_policy of an untrained, seeded PPO on ``venv``: (episode returns, lengths, warnings)."""
    model = PPO("MlpPolicy", venv, seed=0, device="cpu")
    venv.seed(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returns, lengths = evaluate_policy(model, venv, n_eval_episodes=4, return_episode_rewards=True)
    venv.close()
    return returns, lengths, [str(w.message) for w in caught if "Monitor" in str(w.message)]


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_evaluate_policy_reads_episode_statistics_as_monitor(backend):
    # SB3 asks env_is_wrapped(Monitor) to know whether infos carry "episode"; episode_statistics records
    # it as Monitor does (r and l at the episode's real end), so it answers yes and SB3 does not warn.
    def make_vec(**kwargs):
        return SB3VecEnv(
            torchwm.make_vec("CartPole-v1", 2, backend=backend, autoreset_mode="same_step", **kwargs)
        )

    expected = evaluate(DummyVecEnv([lambda: Monitor(gym.make("CartPole-v1"))] * 2))
    got = evaluate(make_vec(wrappers=["episode_statistics"]))
    assert got[2] == expected[2] == []
    np.testing.assert_allclose(got[0], expected[0])
    assert got[1] == expected[1]
    unmonitored = evaluate(make_vec())
    assert len(unmonitored[2]) == 1 and "not wrapped with a ``Monitor`` wrapper" in unmonitored[2][0]
    assert unmonitored[:2] == evaluate(DummyVecEnv([lambda: gym.make("CartPole-v1")] * 2))[:2]


def test_env_is_wrapped_monitor_on_fused_atari_stacks():
    # The fused Atari env records the episodes itself (no RecordEpisodeStatistics in its chain).
    stack = ["atari_preprocessing", "episodic_life", "frame_stack"]
    for wrappers, recorded in ((["episode_statistics", *stack], True), (stack, False)):
        envs = torchwm.make_vec("ALE/Pong-v5", 2, autoreset_mode="same_step", wrappers=wrappers)
        assert envs.spec.fused
        venv = SB3VecEnv(envs)
        assert venv.env_is_wrapped(Monitor) == [recorded] * 2
        assert venv.env_is_wrapped(SubMonitor) == [False] * 2  # only Monitor itself is answered so
        venv.close()


# -- torchwm.multiagent's agents layout: SB3's envs are the rows ------------------------------------------


def spread_env():
    from mpe2 import simple_spread_v3

    # 5 cycles: episode ends (and same-step resets) early.
    return simple_spread_v3.parallel_env(max_cycles=5)


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_agents_layout_rows_step_as_supersuit_s_concat_vec_env(backend):
    import supersuit

    import torchwm.multiagent

    venv = SB3VecEnv(torchwm.multiagent.make_vec(spread_env, 2, backend=backend))
    theirs = supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(spread_env()), 2)
    assert venv.num_envs == theirs.num_envs == 6
    assert venv.observation_space == theirs.observation_space
    venv.seed(7)
    assert venv._seeds == [7, 7, 7, 8, 8, 8]  # PettingZoo env i gets 7 + i, as SuperSuit's reset(seed=7)
    obs = venv.reset()
    expected_obs, _ = theirs.reset(seed=7)
    assert np.array_equal(obs, expected_obs)
    rng = np.random.default_rng(0)
    for _ in range(7):
        actions = rng.integers(0, 5, 6)
        obs, rewards, dones, infos = venv.step(actions)
        expected = theirs.step(list(actions))
        assert np.array_equal(obs, expected[0]) and np.array_equal(rewards, expected[1])
        assert np.array_equal(dones, expected[2].astype(bool) | expected[3].astype(bool))
        for info, expected_info in zip(infos, expected[4], strict=True):
            if "terminal_observation" in expected_info:
                assert np.array_equal(info["terminal_observation"], expected_info["terminal_observation"])
                assert info["TimeLimit.truncated"] is True  # MPE's episodes end by max_cycles
            else:
                assert "terminal_observation" not in info
    venv.close()


def test_agents_layout_calls_answer_per_row_and_reach_the_row_s_pettingzoo_env():
    import torchwm.multiagent

    venv = SB3VecEnv(torchwm.multiagent.make_vec(spread_env, 2))
    venv.reset()
    assert venv.get_attr("render_mode") == [None] * 6
    assert venv.env_is_wrapped(Monitor) == [False] * 6
    venv.set_attr("marker", "a")
    venv.set_attr("marker", "b", indices=[4])  # a row of PettingZoo env 1: all its rows see it
    assert venv.get_attr("marker") == ["a", "a", "a", "b", "b", "b"]
    assert venv.get_attr("marker", indices=[-1, 0, 3]) == ["b", "a", "b"]
    ids = venv.env_method("__getattribute__", "par_env", indices=[0, 1, 5])
    assert ids[0] is ids[1] and ids[0] is not ids[2]  # rows 0 and 1: one env, reached once (sync)
    with pytest.raises(IndexError, match="out of range for 6 envs"):
        venv.get_attr("marker", indices=[6])
    venv.close()


def test_agents_layout_rows_of_one_env_must_have_the_same_options():
    import torchwm.multiagent

    venv = SB3VecEnv(torchwm.multiagent.make_vec(spread_env, 2))
    venv.set_options([{}, {}, {}, {"x": 1}, {"x": 1}, {"x": 1}])
    venv.reset()  # one options dict per PettingZoo env: reset in two groups
    venv.set_options([{}, {"x": 1}, {}, {}, {}, {}])
    with pytest.raises(ValueError, match=r"rows 0\.\.2 are the agents of PettingZoo env 0"):
        venv.reset()
    venv.close()


def test_an_agents_layout_is_a_full_batch_when_every_pettingzoo_env_returns():
    import torchwm.multiagent

    # batch_size counts PettingZoo envs (2 here), not rows (6): a full batch.
    venv = SB3VecEnv(
        torchwm.multiagent.make_vec(spread_env, 2, backend="shmem", backend_kwargs={"batch_size": 2})
    )
    venv.close()
    with pytest.raises(ValueError, match="batch_size=1"):
        SB3VecEnv(
            torchwm.multiagent.make_vec(spread_env, 2, backend="shmem", backend_kwargs={"batch_size": 1})
        )


def training_recipe(heading: str) -> str:
    """The Python block of docs/training.md's section whose heading starts with ``heading``."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = text.split(f"\n## {heading}", 1)[1]
    return re.search(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE).group(1)


def test_ppo_trains_on_pistonball_with_the_docs_multi_agent_recipe(monkeypatch):
    # The recipe as written; PPO's learn and the SB3 vector env's steps recorded around it.
    seen: dict = {"obs": [], "rewards": []}
    learn, reset, step_wait = PPO.learn, SB3VecEnv.reset, SB3VecEnv.step_wait

    def recording_learn(self, *args, **kwargs):
        seen["before"] = [p.detach().clone() for p in self.policy.parameters()]
        done = learn(self, *args, **kwargs)
        seen["after"] = [p.detach().clone() for p in self.policy.parameters()]
        seen["buffer"] = self.rollout_buffer
        return done

    def recording_reset(self, *args, **kwargs):
        obs = reset(self, *args, **kwargs)
        seen["obs"].append(obs.copy())
        return obs

    def recording_step_wait(self):
        obs, rewards, dones, infos = step_wait(self)
        seen["obs"].append(obs.copy())
        seen["rewards"].append(rewards.copy())
        return obs, rewards, dones, infos

    monkeypatch.setattr(PPO, "learn", recording_learn)
    monkeypatch.setattr(SB3VecEnv, "reset", recording_reset)
    monkeypatch.setattr(SB3VecEnv, "step_wait", recording_step_wait)
    exec(compile(training_recipe("Multi-agent"), "docs/training.md (multi-agent)", "exec"), {})

    assert any(not torch.equal(a, b) for a, b in zip(seen["before"], seen["after"], strict=True))
    buffer, n_steps = seen["buffer"], 32
    # 1024 steps of 16 rows: two rollouts of 32 steps; the buffer holds the second, flattened env-major
    # (SB3's swap_and_flatten) and channels first (SB3's VecTransposeImage before CnnPolicy).
    assert len(seen["obs"]) == 1 + 64 and seen["obs"][0].shape == (16, 64, 64, 3)
    last = np.stack(seen["obs"][-n_steps - 1 : -1])  # the observations the second rollout acted on
    expected_obs = last.transpose(1, 0, 4, 2, 3).reshape(16 * n_steps, 3, 64, 64)
    assert np.array_equal(buffer.observations, expected_obs)
    # Rewards stay (steps, envs): SB3 flattens only what its minibatches read (no truncation in 64 steps
    # of 125-cycle episodes, so no bootstrapped reward either).
    assert np.array_equal(buffer.rewards, np.stack(seen["rewards"][-n_steps:]))
