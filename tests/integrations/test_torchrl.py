"""`torchwm.integrations.torchrl.make_torchrl_env`: TorchRL's gymnasium vector-env tests, and TorchRL's data.

The tests marked "ported" are TorchRL 0.14's own tests of `GymWrapper`/`GymEnv` over Gymnasium vector
envs (``test/libs/test_gym.py``: ``test_vecenvs_wrapper``, ``test_vecenvs_env``, ``test_vecenvs_nan``,
``test_gymnasium_autoreset``, ``test_resetting_strategies``, ``test_gymnasium_num_envs``,
``test_set_seed_and_reset_works``), run through `make_torchrl_env` with no keyword a TorchRL user would
not give, on ``sync`` and ``shmem``. Where TorchRL checks only specs and shapes, the data is also
compared with TorchRL over Gymnasium's own ``SyncVectorEnv`` of the same envs, seeds and actions.

Those tests are adapted from TorchRL (https://github.com/pytorch/rl), under its MIT licence:

    Copyright (c) Meta Platforms, Inc. and affiliates.

    This source code is licensed under the MIT license found in the
    LICENSE file in the root directory of this source tree.
"""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("torchrl")  # the [torchrl] extra
import torch  # noqa: E402  (a dependency of torchrl)
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation  # noqa: E402
from tensordict import TensorDict, assert_allclose_td  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import GymWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402
from torchrl.modules import RandomPolicy  # noqa: E402
from torchrl.testing import rollout_consistency_assertion  # noqa: E402

import torchwm  # noqa: E402
from torchwm.integrations.torchrl import TorchRLInfos, make_torchrl_env  # noqa: E402

gym.register_envs(ale_py)
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP
BACKENDS = {"sync": {}, "shmem": {"backend_kwargs": {"context": "fork"}}}
ENV_NAMES = ["CartPole-v1", "ALE/Pong-v5"] + (["HalfCheetah-v4"] if find_spec("mujoco") else [])


def torchwm_env(name: str, num_envs: int, backend: str, **kwargs):
    return make_torchrl_env(name, num_envs, backend=backend, **BACKENDS[backend], **kwargs)


def gymnasium_make(name: str) -> gym.Env:
    """The env torchwm's ``make_vec(name)`` runs, built with Gymnasium alone (the ALE default stack)."""
    if not name.startswith("ALE/"):
        return gym.make(name)
    env = AtariPreprocessing(gym.make(name, frameskip=1), noop_max=30, frame_skip=4, screen_size=84)
    return FrameStackObservation(env, 4, padding_type="zero")


def gymnasium_env(name: str, num_envs: int):
    """TorchRL over Gymnasium's own SyncVectorEnv of the same envs (ALE's seeds info left out there too)."""
    make = functools.partial(gymnasium_make, name)
    vec = gym.vector.SyncVectorEnv([make] * num_envs, autoreset_mode=SAME_STEP)
    return GymWrapper(TorchRLInfos(vec))


def seeded_rollout(env, steps: int, seed: int = 0, **kwargs):
    env.set_seed(seed)
    torch.manual_seed(seed)  # RandomPolicy draws TorchRL's actions from torch's generator
    return env.rollout(steps, break_when_any_done=False, **kwargs)


def assert_same_data(got, expected) -> None:
    assert set(got.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        assert torch.equal(got[key], expected[key]), key


@pytest.fixture(params=list(BACKENDS))
def backend(request):
    return request.param


# -- ported: test_vecenvs_wrapper, test_vecenvs_env ---------------------------------------------------------


@pytest.mark.parametrize("envname", ENV_NAMES)
def test_vecenvs_wrapper(envname, backend):  # ported
    env = torchwm_env(envname, 2, backend)
    reference = gymnasium_env(envname, 2)
    try:
        assert env.batch_size == torch.Size([2])
        check_env_specs(env)
        assert env.observation_spec == reference.observation_spec
        assert env.action_spec == reference.action_spec
        steps = 20 if envname.startswith("ALE/") else 100
        assert_same_data(seeded_rollout(env, steps), seeded_rollout(reference, steps))
    finally:
        env.close()
        reference.close()


@pytest.mark.parametrize("envname", ENV_NAMES)
def test_vecenvs_env(envname, backend):  # ported (GymEnv(envname, num_envs=2) becomes make_torchrl_env)
    env = torchwm_env(envname, 2, backend)
    try:
        env.set_seed(0)
        check_env_specs(env)
        rollout = env.rollout(100, break_when_any_done=False)
        for obs_key in env.observation_spec.keys(True, True):
            rollout_consistency_assertion(
                rollout, done_key="done", observation_key=obs_key, done_strict="CartPole" in envname
            )
        if "CartPole" in envname:
            assert rollout["next", "done"].any(), "no episode ended: the consistency check proved little"
    finally:
        env.close()


# -- ported: test_vecenvs_nan -----------------------------------------------------------------------------


def test_vecenvs_nan(backend):  # ported
    # the next observations of a step that ends an episode are the episode's last, never NaN
    torch.manual_seed(0)
    env = torchwm_env("CartPole-v1", 2, backend)
    env.set_seed(0)
    rollout = env.rollout(200)
    assert torch.isfinite(rollout.get("observation")).all()
    assert torch.isfinite(rollout.get(("next", "observation"))).all()
    assert rollout["next", "done"].any()
    env.close()

    env = torchwm_env("CartPole-v1", 2, backend)
    env.set_seed(0)
    collector = Collector(env, RandomPolicy(env.action_spec), total_frames=2000, frames_per_batch=200)
    try:
        for rollout in collector:
            assert torch.isfinite(rollout.get("observation")).all()
            assert torch.isfinite(rollout.get(("next", "observation"))).all()
            break
    finally:
        collector.shutdown()
        env.close()


# -- ported: test_gymnasium_autoreset ------------------------------------------------------------------------


class CountingEnvRandomReset(gym.Env):
    def __init__(self, i=0):
        self.counter = 1
        self.i = i
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,))
        self.action_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,))
        self.rng = np.random.RandomState(0)

    def step(self, action):
        self.counter += 1
        done = bool(self.rng.random() < 0.05)
        return np.asarray([self.counter]), 0, done, done, {}

    def reset(self, *, seed=None, options=None):
        self.counter = 1
        if seed is not None:
            self.rng = np.random.RandomState(seed)
        return np.asarray([self.counter]), {}


def test_gymnasium_autoreset(backend):  # ported
    fns = [functools.partial(CountingEnvRandomReset, i) for i in range(2)]
    envs0 = torchwm.make_vec_from_fns(fns, backend=backend, autoreset_mode="disabled", **BACKENDS[backend])
    env = make_torchrl_env(envs0)
    envs0.reset(seed=0)
    torch.manual_seed(0)
    r0 = env.rollout(20, break_when_any_done=False)
    env.close()
    envs1 = torchwm.make_vec_from_fns(fns, backend=backend, autoreset_mode="same_step", **BACKENDS[backend])
    env = make_torchrl_env(envs1)
    envs1.reset(seed=0)
    torch.manual_seed(0)
    r1 = []
    t_ = env.reset()
    for s in r0.unbind(-1):
        t_.set("action", s["action"])
        t, t_ = env.step_and_maybe_reset(t_)
        r1.append(t)
    r1 = torch.stack(r1, -1)
    env.close()
    torch.testing.assert_close(r0["observation"], r1["observation"])
    torch.testing.assert_close(r0["next", "observation"], r1["next", "observation"])
    torch.testing.assert_close(r0["next", "done"], r1["next", "done"])
    assert r0["next", "done"].any()

    # ... and TorchRL's data over Gymnasium's own SyncVectorEnv in torchwm's disabled mode.
    reference_vec = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    reference = GymWrapper(reference_vec)
    reference_vec.reset(seed=0)
    torch.manual_seed(0)
    assert_same_data(r0, reference.rollout(20, break_when_any_done=False))
    reference.close()


# -- ported: test_resetting_strategies --------------------------------------------------------------------


class CustomEnv(gym.Env):
    def __init__(self, dim=3, use_termination=True, max_steps=4):
        self.dim = dim
        self.use_termination = use_termination
        self.observation_space = gym.spaces.Box(low=-np.inf, high=np.inf, shape=(self.dim,), dtype=np.float32)
        self.action_space = gym.spaces.Box(low=-np.inf, high=np.inf, shape=(1,), dtype=np.float32)
        self.max_steps = max_steps

    def _get_info(self):
        return {"field1": self.state**2}

    def _get_obs(self):
        return self.state.copy()

    def reset(self, seed=0, options=None):
        self.state = np.zeros(self.observation_space.shape, dtype=np.float32)
        observation = self._get_obs()
        info = self._get_info()
        assert (observation < self.max_steps).all()
        return observation, info

    def step(self, action):
        self.state += 1
        truncated, terminated = False, False
        if self.use_termination:
            terminated = self.state[0] == 4
        reward = 1 if terminated else 0  # Binary sparse rewards
        observation = self._get_obs()
        info = self._get_info()
        return observation, reward, terminated, truncated, info


@pytest.mark.parametrize("heterogeneous", [False, True])
def test_resetting_strategies(heterogeneous, backend):  # ported
    steps = 5
    if not heterogeneous:
        fns = [CustomEnv] * 4
    else:
        fns = [functools.partial(CustomEnv, max_steps=i + 4) for i in range(4)]
    vec = torchwm.make_vec_from_fns(fns, backend=backend, autoreset_mode="same_step", **BACKENDS[backend])
    env = make_torchrl_env(vec)
    try:
        check_env_specs(env)
        td = env.rollout(steps, break_when_any_done=False)
        if not heterogeneous:
            assert not (td["observation"] == 4).any()
            assert (td["next", "observation"] == 4).sum() == 3 * 4

        # check with manual reset
        torch.manual_seed(0)
        env.set_seed(0)
        reset = env.reset(TensorDict({"_reset": torch.ones(4, 1, dtype=torch.bool)}, [4]))
        r0 = env.rollout(10, break_when_any_done=False, auto_reset=False, tensordict=reset)
        torch.manual_seed(0)
        env.set_seed(0)
        reset = env.reset()
        r1 = env.rollout(10, break_when_any_done=False, auto_reset=False, tensordict=reset)
        torch.manual_seed(0)
        env.set_seed(0)
        r2 = env.rollout(10, break_when_any_done=False)
        assert_allclose_td(r0, r1)
        assert_allclose_td(r1, r2)
        for r in (r0, r1, r2):
            torch.testing.assert_close(r["field1"], r["observation"].pow(2))
            torch.testing.assert_close(r["next", "field1"], r["next", "observation"].pow(2))
    finally:
        env.close()


# -- ported: test_gymnasium_num_envs, test_set_seed_and_reset_works --------------------------------------


@pytest.mark.parametrize("num_envs", [1, 2])
def test_gymnasium_num_envs(num_envs, backend):  # ported (num_envs=0, a single env, is not a vector env)
    env = torchwm_env("CartPole-v1", num_envs, backend)
    try:
        assert env.batch_size == torch.Size([num_envs])
        check_env_specs(env)
        td = env.rand_step(env.reset())
        assert td["next", "reward"].shape == torch.Size([num_envs, 1])
    finally:
        env.close()


def test_set_seed_and_reset_works():  # ported
    env = make_torchrl_env("CartPole-v1")
    final_seed = env.set_seed(0)
    assert final_seed is not None
    td = env.reset()
    assert isinstance(td, TensorDict)
    env.close()


# -- seeding: TorchRL's set_seed(s) is torchwm's reset(seed=s) ---------------------------------------------


@pytest.mark.parametrize("envname", ["CartPole-v1", "ALE/Pong-v5"])
def test_set_seed_gives_torchwms_seeded_reset(envname):
    n, seed = 3, 7
    actions = np.arange(n) % 2
    vec = torchwm.make_vec(envname, n, autoreset_mode="same_step")
    expected_reset, _ = vec.reset(seed=seed)
    expected_step = vec.step(actions)[0]
    expected_next_reset, _ = vec.reset()
    vec.close()

    env = make_torchrl_env(envname, n, categorical_action_encoding=True)
    env.set_seed(seed)
    # TorchRL steps from the seeded reset: the step's observation is that of the seeded episode.
    td = env.step(TensorDict({"action": torch.as_tensor(actions)}, [n]))
    np.testing.assert_array_equal(td["next", "observation"].numpy(), expected_step)
    np.testing.assert_array_equal(env.reset()["observation"].numpy(), expected_next_reset)
    np.testing.assert_array_equal(env.reset(seed=seed)["observation"].numpy(), expected_reset)
    env.close()

    # seed= does the same once the env is built, whatever construction ran through.
    env = make_torchrl_env(envname, n, seed=seed, categorical_action_encoding=True)
    td = env.step(TensorDict({"action": torch.as_tensor(actions)}, [n]))
    np.testing.assert_array_equal(td["next", "observation"].numpy(), expected_step)
    env.close()


# -- what GymWrapper alone does with a torchwm env, and what make_torchrl_env does instead -----------------


def test_gym_wrapper_refuses_next_step_and_make_torchrl_env_says_what_to_do():
    vec = torchwm.make_vec("CartPole-v1", 2)
    try:
        with pytest.raises(RuntimeError, match="SAME_STEP or DISABLED"):
            GymWrapper(vec)
        with pytest.raises(ValueError, match=r"autoreset_mode='same_step'.*got 'next_step'"):
            make_torchrl_env(vec)
    finally:
        vec.close()
    with pytest.raises(ValueError, match=r"autoreset_mode='same_step'.*got 'next_step'"):
        make_torchrl_env("CartPole-v1", 2, autoreset_mode="next_step")


def test_ale_seeds_info_is_what_breaks_gym_wrapper_and_is_left_out():
    # make_vec(seed=0) seeds the first reset, the one GymWrapper reads its info specs from: ALE reports
    # the seeds it drew there, one tuple per env, which TorchRL stacks into a (2, num_envs) tensor.
    vec = torchwm.make_vec("ALE/Pong-v5", 3, seed=0, autoreset_mode="same_step")
    with pytest.raises(RuntimeError, match=r"batch dimension mismatch.*torch.Size\(\[2, 3\]\)"):
        GymWrapper(vec)
    vec.close()

    class WithoutSeeds(gym.vector.VectorWrapper):  # only that key left out
        autoreset_mode = SAME_STEP

        def reset(self, **kwargs):
            obs, infos = self.env.reset(**kwargs)
            assert "seeds" in infos or kwargs.get("seed") is None
            return obs, {k: v for k, v in infos.items() if k not in ("seeds", "_seeds")}

    vec = torchwm.make_vec("ALE/Pong-v5", 3, seed=0, autoreset_mode="same_step")
    env = GymWrapper(WithoutSeeds(vec))
    assert env.batch_size == torch.Size([3])
    env.close()

    env = make_torchrl_env("ALE/Pong-v5", 3, seed=0)
    try:
        check_env_specs(env)
        assert "seeds" not in env.observation_spec.keys()
        assert {"lives", "frame_number", "episode_frame_number"} <= set(env.observation_spec.keys())
    finally:
        env.close()


def test_bad_arguments_are_refused_before_anything_is_built():
    with pytest.raises(TypeError, match="env id .* or a Gymnasium vector env, got CartPoleEnv"):
        make_torchrl_env(gym.make("CartPole-v1").unwrapped)
    vec = torchwm.make_vec("CartPole-v1", 2, autoreset_mode="same_step")
    try:
        with pytest.raises(ValueError, match="num_envs=3 does not match the env given, which has 2"):
            make_torchrl_env(vec, 3)
        with pytest.raises(TypeError, match=r"\['backend', 'wrappers'\]|\['wrappers', 'backend'\]"):
            make_torchrl_env(vec, backend="shmem", wrappers=[])
    finally:
        vec.close()
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        make_torchrl_env("CartPole-v1", autoreset_mode="sometimes")


def test_an_env_that_returns_some_envs_per_step_is_refused(monkeypatch):
    # TorchRL reads one row per env: with batch_size=2 of 4 its step failed with "Shape mismatch".
    vec = torchwm.make_vec("CartPole-v1", 4, autoreset_mode="same_step", backend_kwargs={"batch_size": 2})
    try:
        with pytest.raises(ValueError, match=r"steps every env.*batch_size=2 of its num_envs=4.*set it to 4"):
            make_torchrl_env(vec)
        assert not vec.closed  # the caller's env, for the caller to close
    finally:
        vec.close()
    env = make_torchrl_env("CartPole-v1", 4, backend_kwargs={"batch_size": 4})
    assert env.batch_size == torch.Size([4])
    env.close()

    def no_build(*args, **kwargs):
        raise AssertionError("make_vec was called: the option is refused before any env is built")

    monkeypatch.setattr(torchwm, "make_vec", no_build)
    with pytest.raises(ValueError, match=r"batch_size=2 of its num_envs=4"):
        make_torchrl_env("CartPole-v1", 4, backend="shmem", backend_kwargs={"batch_size": 2})


def test_missing_torchrl_names_the_extra():
    code = "import sys; sys.modules['torchrl'] = None; import torchwm.integrations.torchrl"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "MissingExtraError: torchwm.integrations.torchrl needs torchrl" in result.stderr
    assert '[torchrl]"' in result.stderr and "pip install" in result.stderr


# -- a TorchRL Collector ---------------------------------------------------------------------------------


def collect(env, frames: int, frames_per_batch: int) -> list:
    env.set_seed(0)
    torch.manual_seed(0)
    policy = RandomPolicy(env.action_spec)
    collector = Collector(env, policy, frames_per_batch=frames_per_batch, total_frames=frames)
    try:
        return [batch.clone() for batch in collector]
    finally:
        collector.shutdown()


def assert_consistent(batches: list, num_envs: int, frames_per_batch: int) -> None:
    data = torch.cat(batches, dim=1)  # (envs, time)
    assert all(b.batch_size == torch.Size([num_envs, frames_per_batch // num_envs]) for b in batches)
    done = data["next", "done"].squeeze(-1)
    # Within an episode, each step starts from the previous step's next observation; after an episode
    # ends, from the new episode's first.
    continues = ~done[:, :-1]
    assert torch.equal(data["observation"][:, 1:][continues], data["next", "observation"][:, :-1][continues])
    assert torch.equal(done, data["next", "terminated"].squeeze(-1) | data["next", "truncated"].squeeze(-1))
    # The collector's trajectory ids change exactly where an episode ended.
    traj = data["collector", "traj_ids"]
    assert torch.equal(traj[:, 1:] != traj[:, :-1], done[:, :-1])


def test_collector_on_cartpole(backend):
    batches = collect(torchwm_env("CartPole-v1", 2, backend), 1000, 200)
    assert sum(b.numel() for b in batches) == 1000
    assert_consistent(batches, 2, 200)
    data = torch.cat(batches, dim=1)
    done = data["next", "done"].squeeze(-1)
    assert done.sum() > 10
    # CartPole ends an episode exactly when the cart or the pole leaves its bounds (its 500-step limit
    # is not reached by random actions); the step after starts from a fresh state.
    next_obs = data["next", "observation"]
    out_of_bounds = (next_obs[..., 0].abs() > 2.4) | (next_obs[..., 2].abs() > 12 * 2 * np.pi / 360)
    assert torch.equal(done, out_of_bounds)
    assert (data["observation"][:, 1:][done[:, :-1]].abs() <= 0.05).all()
    reference = collect(gymnasium_env("CartPole-v1", 2), 1000, 200)
    for got, expected in zip(batches, reference, strict=True):
        assert_same_data(got, expected)


def test_collector_on_pong():
    batches = collect(torchwm_env("ALE/Pong-v5", 2, "shmem"), 200, 100)
    assert sum(b.numel() for b in batches) == 200
    assert_consistent(batches, 2, 100)
    data = torch.cat(batches, dim=1)
    assert data["next", "observation"].shape == torch.Size([2, 100, 4, 84, 84])
    assert data["next", "observation"].dtype == torch.uint8
    assert set(data["next", "reward"].unique().tolist()) <= {-1.0, 0.0, 1.0}
    reference = collect(gymnasium_env("ALE/Pong-v5", 2), 200, 100)
    for got, expected in zip(batches, reference, strict=True):
        assert_same_data(got, expected)


# -- the example of docs/training.md ----------------------------------------------------------------------


def test_training_page_example_counts_the_episodes_gymnasiums_env_gives(monkeypatch, tmp_path):
    page = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = page.split("\n## TorchRL\n", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(example, "docs/training.md (TorchRL)", "exec"), namespace)
    assert namespace["env"].is_closed  # the collector's shutdown closed it, workers included
    reference = collect(gymnasium_env("CartPole-v1", 4), 1000, 200)
    expected = sum(int(batch["next", "done"].sum()) for batch in reference)
    assert expected > 10
    assert namespace["episodes"] == expected
