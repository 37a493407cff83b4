"""The parallel backends ``subproc`` and ``shmem``: same arrays as ``sync``, start methods, splits, async
batches."""

from __future__ import annotations

import multiprocessing
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from support.envs import SlowOnOneEnv
from support.processes import leaked_segments

import torchwm

BACKENDS = ["subproc", "shmem"]


START_METHODS = ["fork", "forkserver", "spawn"]


class DictObsEnv(gym.Env):
    """A Dict observation (an image and a vector) and a Box action, to exercise the shared layout."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {"image": spaces.Box(0, 255, (3, 5), np.uint8), "state": spaces.Box(-1, 1, (2,), np.float64)}
        )
        self.action_space = spaces.Box(-1, 1, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def _obs(self):
        return {
            "image": self.np_random.integers(0, 255, (3, 5), dtype=np.uint8),
            "state": self.np_random.uniform(-1, 1, 2),
        }

    def step(self, action):
        return (
            self._obs(),
            float(np.sum(action)),
            bool(self.np_random.random() < 0.2),
            False,
            {"sum": float(np.sum(action))},
        )


# Registered at import, in this module: spawn/forkserver workers get the spec sent along.
gym.register("TorchwmTest/SlowOnOne-v0", entry_point=SlowOnOneEnv)


gym.register("TorchwmTest/DictObs-v0", entry_point=DictObsEnv)


def assert_same(a, b, what=""):
    if isinstance(a, dict):
        for key in a:
            assert_same(a[key], b[key], f"{what}[{key}]")
        return
    assert np.array_equal(a, b), f"{what}: {a!r} != {b!r}"


def run_both(env_id, num_envs, steps, backend, backend_kwargs, seed=0, **make_kwargs):
    """Step sync and ``backend`` with the same random actions; compare every returned array."""
    with (
        torchwm.make_vec(env_id, num_envs, backend="sync", seed=seed, **make_kwargs) as ref,
        torchwm.make_vec(
            env_id, num_envs, backend=backend, seed=seed, backend_kwargs=backend_kwargs, **make_kwargs
        ) as vec,
    ):
        obs_ref, _ = ref.reset()
        obs, _ = vec.reset()
        assert_same(obs, obs_ref, "reset obs")
        ended = 0
        for t in range(steps):
            actions = ref.action_space.sample()
            expected = ref.step(actions)
            got = vec.step(actions)
            for name, a, b in zip(
                ("obs", "rewards", "terminations", "truncations"), got[:4], expected[:4], strict=True
            ):
                assert_same(a, b, f"step {t} {name}")
            ended += int(np.sum(expected[2] | expected[3]))
        return ended


@pytest.mark.parametrize("context", START_METHODS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_same_trajectories_as_sync_on_cartpole(backend, context):
    ended = run_both("CartPole-v1", 5, 60, backend, {"num_workers": 2, "context": context})
    assert ended > 0, "the run should cross episode ends (autoreset)"


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_trajectories_as_sync_on_atari(backend):
    run_both("ALE/Pong-v5", 2, 25, backend, {"num_workers": 2, "context": "fork"})


@pytest.mark.parametrize("mode", ["same_step", "disabled"])
def test_autoreset_modes_match_sync(mode):
    # disabled: every env that ended is reset by mask before the next step.
    with (
        torchwm.make_vec("CartPole-v1", 4, backend="sync", seed=3, autoreset_mode=mode) as ref,
        torchwm.make_vec(
            "CartPole-v1",
            4,
            backend="shmem",
            seed=3,
            autoreset_mode=mode,
            backend_kwargs={"num_workers": 2, "context": "fork"},
        ) as vec,
    ):
        ref.reset()
        vec.reset()
        for _ in range(50):
            actions = ref.action_space.sample()
            expected, got = ref.step(actions), vec.step(actions)
            for a, b in zip(got[:4], expected[:4], strict=True):
                assert np.array_equal(a, b)
            if mode == "same_step" and "final_obs" in expected[4]:
                assert np.array_equal(
                    np.stack(got[4]["final_obs"][got[4]["_final_obs"]]),
                    np.stack(expected[4]["final_obs"][expected[4]["_final_obs"]]),
                )
            if mode == "disabled":
                mask = expected[2] | expected[3]
                if mask.any():
                    assert np.array_equal(
                        vec.reset(options={"reset_mask": mask})[0], ref.reset(options={"reset_mask": mask})[0]
                    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_dict_observations_and_box_actions(backend):
    run_both("TorchwmTest/DictObs-v0", 3, 15, backend, {"num_workers": 2, "context": "spawn"})


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_env_registered_at_run_time_under_non_fork_start(context):
    with torchwm.make_vec(
        "TorchwmTest/SlowOnOne-v0",
        2,
        backend="shmem",
        seed=0,
        backend_kwargs={"num_workers": 2, "context": context},
    ) as vec:
        obs, _ = vec.reset()
        obs, rewards, *_ = vec.step(np.array([0, 0]))
    assert np.array_equal(obs[:, 0], [1, 1]) and np.array_equal(rewards, [0.0, 0.0])


def test_lambda_closure_factory_under_spawn():
    offset = 7.0

    class Shift(gym.ObservationWrapper):
        def observation(self, observation):
            return observation + offset

    factory = lambda: Shift(gym.make("CartPole-v1"))  # noqa: E731 - a lambda on purpose
    with torchwm.TorchVectorizedEnv(
        factory, num_workers=2, envs_per_worker=1, backend="subproc", seed=0, context="spawn"
    ) as vec:
        obs = vec.reset()
    reference = np.stack([gym.make("CartPole-v1").reset(seed=i)[0] for i in range(2)])
    assert np.allclose(obs, reference + offset)


@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_step_and_reset_match_sync(backend):
    with (
        torchwm.make_vec("CartPole-v1", 4, backend="sync", seed=1) as ref,
        torchwm.make_vec(
            "CartPole-v1", 4, backend=backend, seed=1, backend_kwargs={"num_workers": 2, "context": "fork"}
        ) as vec,
    ):
        ref.reset()
        vec.reset()
        for ids in ([1, 2], [3], [0, 1, 2, 3], [3, 0]):
            actions = np.ones(len(ids), dtype=np.int64)
            got, expected = vec.step(actions, env_ids=ids), ref.step(actions, env_ids=ids)
            for a, b in zip(got[:4], expected[:4], strict=True):
                assert np.array_equal(a, b)
            assert got[4]["env_id"].tolist() == ids  # rows in the order of env_ids, on every backend
        got, _ = vec.reset(env_ids=[2, 1], seed=[10, 11])
        expected, _ = ref.reset(env_ids=[2, 1], seed=[10, 11])
        assert np.array_equal(got, expected)


def _no_new_children_or_segments(before):
    assert set(multiprocessing.active_children()) <= before
    assert leaked_segments() == []


class BoxObsEnv(gym.Env):
    """Same action space as DiscreteObsEnv, another observation space."""

    observation_space = spaces.Box(0, 5, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


class DiscreteObsEnv(BoxObsEnv):
    observation_space = spaces.Discrete(5)

    def reset(self, *, seed=None, options=None):
        return 2, {}

    def step(self, action):
        return 2, 0.0, False, False, {}


class OtherActionEnv(DiscreteObsEnv):
    action_space = spaces.Discrete(3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("inline", [True, False])
@pytest.mark.parametrize("odd_one, kind", [(1, "observation"), (3, "observation"), (1, "action")])
def test_envs_with_other_spaces_are_refused_in_every_share(backend, inline, odd_one, kind):
    # Gymnasium's vector envs raise RuntimeError for this; env 1 is in the parent's share under inline.
    fns = [DiscreteObsEnv] * 4
    fns[odd_one] = BoxObsEnv if kind == "observation" else OtherActionEnv
    before = set(multiprocessing.active_children())
    with pytest.raises(RuntimeError, match=f"env {odd_one} has {kind} space"):
        torchwm.make_vec_from_fns(fns, backend=backend, backend_kwargs={"num_workers": 2, "inline": inline})
    _no_new_children_or_segments(before)


class ActionRecordingEnv(gym.Env):
    """Records the type and dtype of every action it receives (read back with get_attr)."""

    observation_space = spaces.Box(-1, 1, (1,), np.float32)
    action_space = spaces.Box(-2, 2, (1,), np.float32)

    def __init__(self):
        self.received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.received.append((type(action).__name__, str(getattr(action, "dtype", None))))
        return np.zeros(1, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("inline", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_actions_reach_every_env_as_given_on_every_backend(dtype, inline):
    actions = np.linspace(-1, 1, 4, dtype=dtype).reshape(4, 1)
    reference = gym.vector.SyncVectorEnv([ActionRecordingEnv] * 4)
    reference.reset(seed=0)
    reference.step(actions)
    expected = [env.received for env in reference.envs]
    reference.close()
    for backend in ["sync", "subproc", "shmem"]:
        kwargs = {} if backend == "sync" else {"num_workers": 2, "inline": inline}
        with torchwm.make_vec_from_fns(
            [ActionRecordingEnv] * 4, backend=backend, backend_kwargs=kwargs
        ) as envs:
            envs.reset(seed=0)
            envs.step(actions)
            envs.step(actions[[1, 3]], env_ids=[1, 3])  # a partial step too
            received = list(envs.get_attr("received"))
        assert [r[:1] for r in received] == expected, backend
        assert [r[1:] for r in received] == [[], expected[1][0:1], [], expected[3][0:1]], backend


class SlowResetEnv(gym.Env):
    """reset(options={"sleep": s}) sleeps s seconds; the observation counts resets and steps."""

    observation_space = spaces.Box(0, 1000, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.resets = 0
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        time.sleep((options or {}).get("sleep", 0))
        self.resets += 1
        self.t = 0
        return np.array([self.resets, self.t], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.resets, self.t], np.float32), 1.0, False, False, {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timed_out_reset_leaves_later_replies_correct(backend):
    with torchwm.make_vec_from_fns(
        [SlowResetEnv] * 4, backend=backend, backend_kwargs={"num_workers": 2, "timeout": 30}
    ) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(4, dtype=np.int64))
        envs.timeout = 0.5  # only for this reset: starting the workers may take longer on a loaded machine
        with pytest.raises(torchwm.errors.EnvTimeoutError):
            envs.reset(options={"sleep": 3})
        envs.timeout = 30  # the late reset replies come while the next call waits
        # The late replies of the timed-out reset must not be taken for these calls' answers.
        assert envs.call("t") == (0, 0, 0, 0)
        assert envs.get_attr("resets") == (2, 2, 2, 2)
        obs, _ = envs.reset()
        assert obs.tolist() == [[3, 0]] * 4
        obs, *_ = envs.step(np.zeros(4, dtype=np.int64))
        assert obs.tolist() == [[3, 1]] * 4


class LockHoldingEnv(SlowResetEnv):
    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("restart_on_crash", [False, True])
def test_an_unpicklable_call_result_fails_that_call_only(backend, restart_on_crash):
    with torchwm.make_vec_from_fns(
        [LockHoldingEnv] * 4,
        backend=backend,
        backend_kwargs={"num_workers": 2, "restart_on_crash": restart_on_crash},
    ) as envs:
        pids = envs.worker_pids
        envs.reset(seed=0)
        with pytest.raises(torchwm.errors.WorkerError, match="cannot be pickled.*env 0.*lock"):
            envs.get_attr("lock")
        assert envs.worker_pids == pids  # nobody died, nobody was restarted
        assert envs.get_attr("resets") == (1, 1, 1, 1)
        obs, *_ = envs.step(np.zeros(4, dtype=np.int64))
        assert obs.tolist() == [[1, 1]] * 4
