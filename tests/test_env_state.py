"""Saving and restoring env states: `torchwm.env_state` and ``envs.clone_state``/``envs.restore_state``.

Restore then the same actions must give the same observations, rewards, terminations and truncations,
bit for bit, on every Python backend, for the stacks whose state lives in different places: the fused
Atari env (its buffers, ALE's emulator and sticky action), Gymnasium's Atari chain, a frame stack over
CartPole (a Gymnasium wrapper's queue and a plain env's attributes) and MuJoCo's physics.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm import env_state
from torchwm.env_state import (
    EnvState,
    StackIdentity,
    StatefulLayer,
    clone_env_state,
    layer_names,
    restore_env_state,
)
from torchwm.errors import AlreadyPendingCallError

BACKENDS = ["sync", "subproc", "shmem"]
POOL = {"num_workers": 2, "context": "fork"}

CASES = {
    "pong-fused": ("ALE/Pong-v5", {}),
    "pong-chain": ("ALE/Pong-v5", {"fused": False}),
    "cartpole-frame-stack": ("CartPole-v1", {"wrappers": ["frame_stack"]}),
    "half-cheetah": ("HalfCheetah-v5", {}),
}


def _make(case: str, backend: str, **extra):
    env_id, kwargs = CASES[case]
    if case == "half-cheetah":
        pytest.importorskip("mujoco")
    options = POOL if backend != "sync" else {}
    return torchwm.make_vec(
        env_id, num_envs=2, backend=backend, seed=3, backend_kwargs=options, **kwargs, **extra
    )


def _run(envs, actions):
    """Each step's (obs, rewards, terminations, truncations), copied."""
    return [tuple(np.array(part, copy=True) for part in envs.step(a)[:4]) for a in actions]


def _assert_same(first, second, what):
    for t, (a, b) in enumerate(zip(first, second, strict=True)):
        for name, x, y in zip(("observations", "rewards", "terminations", "truncations"), a, b, strict=True):
            assert np.array_equal(x, y), f"{what}: {name} differ at step {t}"


def _actions(envs, n, seed=0):
    envs.action_space.seed(seed)
    return [envs.action_space.sample() for _ in range(n)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_restore_replays_exactly_and_branches_into_another_env(case, backend):
    with _make(case, backend) as envs:
        envs.reset()
        _run(envs, _actions(envs, 20, seed=1))
        states = envs.clone_state()
        actions = _actions(envs, 120)
        first = _run(envs, actions)
        if case == "cartpole-frame-stack":  # episodes ended (and autoreset) within the replay
            assert any(te.any() or tr.any() for _, _, te, tr in first)
        states = pickle.loads(pickle.dumps(states))  # a state survives pickle
        obs, infos = envs.restore_state(states)
        assert np.array_equal(obs, np.stack([s.observation for s in states]))
        assert infos == {}
        _assert_same(first, _run(envs, actions), f"{case} on {backend}: restore then the same actions")

        # Env 0's state into env 1 (branching): env 1 follows env 0, given env 0's actions.
        obs, infos = envs.restore_state([states[0]], env_ids=[1])
        assert np.array_equal(obs[0], states[0].observation) and infos["env_id"].tolist() == [1]
        envs.restore_state([states[0]], env_ids=[0])
        same_actions = [np.stack([a[0], a[0]]) for a in actions]
        branched = _run(envs, same_actions)
        env0 = [tuple(part[:1] for part in step) for step in first]
        env1 = [tuple(part[1:] for part in step) for step in branched]
        _assert_same(env0, env1, f"{case} on {backend}: env 0's state restored into env 1")


@pytest.mark.parametrize("case", ["pong-fused", "cartpole-frame-stack"])
def test_a_state_cloned_on_shmem_restores_on_sync(case):
    with _make(case, "shmem") as envs:
        envs.reset()
        _run(envs, _actions(envs, 15, seed=2))
        states = envs.clone_state()
        actions = _actions(envs, 100)
        on_shmem = _run(envs, actions)
    with _make(case, "sync") as envs:
        envs.reset(seed=99)  # another start: the state alone decides
        envs.restore_state(states)
        _assert_same(on_shmem, _run(envs, actions), f"{case}: cloned on shmem, restored on sync")


@pytest.mark.parametrize("autoreset", ["next_step", "same_step", "disabled"])
def test_a_state_cloned_as_an_episode_ends_keeps_the_autoreset_bookkeeping(autoreset):
    with _make("cartpole-frame-stack", "sync", autoreset_mode=autoreset) as envs:
        envs.reset()
        for _ in range(500):  # until env 0 ends an episode
            _, _, te, tr, _ = envs.step(np.array([1, 1]))
            if te[0] or tr[0]:
                break
        assert te[0] or tr[0]
        states = envs.clone_state()
        assert states[0].autoreset_pending
        if autoreset == "disabled":
            envs.reset(options={"reset_mask": np.array([True, True])})
            envs.restore_state(states)
            with pytest.raises(ValueError, match=r"envs \[0(, 1)?\] ended their episode"):
                envs.step(np.array([0, 0]))
            return
        actions = [np.array([k % 2, 1]) for k in range(30)]
        first = _run(envs, actions)
        envs.restore_state(states)
        _assert_same(first, _run(envs, actions), f"{autoreset}: restored as the episode ended")


@pytest.mark.parametrize("backend", BACKENDS)
def test_restore_counts_as_a_reset_for_envs_never_reset(backend):
    with _make("cartpole-frame-stack", backend) as envs:
        envs.reset()
        states = envs.clone_state()
    with _make("cartpole-frame-stack", backend) as other:
        with pytest.raises(gym.error.ResetNeeded):
            other.step(np.array([0, 0]))
        other.restore_state(states)
        other.step(np.array([0, 0]))  # no ResetNeeded


class LockedEnv(gym.Env):
    """CartPole-like, holding a lock: it cannot be deep-copied."""

    observation_space = spaces.Box(-10, 10, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        self.lock = threading.Lock()
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_holding_a_lock_is_named_and_keeps_stepping(backend):
    options = POOL if backend != "sync" else {}
    with torchwm.make_vec_from_fns([LockedEnv] * 2, backend=backend, backend_kwargs=options) as envs:
        envs.reset()
        envs.step(np.array([0, 0]))
        with pytest.raises(TypeError, match=r"cannot save the state of LockedEnv .*lock"):
            envs.clone_state()
        obs, *_ = envs.step(np.array([0, 0]))
        assert obs[:, 0].tolist() == [2.0, 2.0]


def test_clone_and_restore_are_refused_with_a_step_in_flight():
    with _make("cartpole-frame-stack", "shmem") as envs:
        envs.reset()
        states = envs.clone_state()
        envs.send(np.array([0]), env_ids=[0])
        with pytest.raises(AlreadyPendingCallError, match="clone_state"):
            envs.clone_state(env_ids=[1])
        with pytest.raises(AlreadyPendingCallError, match="restore_state"):
            envs.restore_state(states)
        envs.recv()
        envs.restore_state(states)


def test_a_state_of_another_stack_is_refused_before_anything_changes():
    with _make("cartpole-frame-stack", "sync") as envs:
        envs.reset()
        cartpole = envs.clone_state()
    with torchwm.make_vec("CartPole-v1", num_envs=2, backend="sync", seed=0) as envs:
        envs.reset()
        own = envs.clone_state()
        envs.step(np.array([0, 0]))
        before = envs.clone_state()
        with pytest.raises(ValueError, match=r"env 1 does not fit: .*FrameStackObservation"):
            envs.restore_state([own[0], cartpole[1]])
        # env 0 was not restored: the failed call changed nothing
        assert np.array_equal(envs.envs[0].unwrapped.state, before[0].layers[-1][1]["state"])
        with pytest.raises(TypeError, match="one per env restored"):
            envs.restore_state(own[0])
        with pytest.raises(ValueError, match="expected 2 states"):
            envs.restore_state(own[:1])
        with pytest.raises(ValueError, match="has no observation"):
            envs.restore_state([own[0], clone_env_state(envs.envs[1])])


def test_ale_native_refuses_in_one_line_naming_shmem():
    with torchwm.make_vec("ALE/Pong-v5", num_envs=2, backend="ale-native", seed=0) as envs:
        envs.reset()
        with pytest.raises(NotImplementedError, match=r"^ale-native cannot .*backend='shmem'") as caught:
            envs.clone_state()
        assert "\n" not in str(caught.value)


class CounterWrapper(gym.Wrapper):
    """Counts steps in a place the generic rule cannot see (a class attribute dict per instance id), and
    says how its state is saved through the protocol."""

    counts: dict[int, int] = {}

    def step(self, action):
        self.counts[id(self)] = self.counts.get(id(self), 0) + 1
        return self.env.step(action)

    def get_torchwm_state(self):
        return {"count": self.counts.get(id(self), 0)}

    def set_torchwm_state(self, state):
        self.counts[id(self)] = state["count"]


def test_a_wrapper_saves_its_state_through_the_protocol():
    env = CounterWrapper(gym.make("CartPole-v1"))
    env.reset(seed=0)
    env.step(0)
    state = clone_env_state(env)
    assert state.layers[0] == (f"{__name__}.CounterWrapper", {"count": 1})
    env.step(0)
    env.step(0)
    restore_env_state(env, state)
    assert CounterWrapper.counts[id(env)] == 1


def test_a_lone_env_restores_its_generator_state():
    env = gym.make("CartPole-v1")
    env.reset(seed=5)
    state = clone_env_state(env)
    drawn = env.unwrapped.np_random.random(3)
    restore_env_state(env, state)
    assert np.array_equal(env.unwrapped.np_random.random(3), drawn)
    assert isinstance(state, EnvState) and "CartPoleEnv" in repr(state)


def test_torchwm_layers_save_themselves_and_the_rule_table_names_only_other_packages_classes():
    # The fused env with every layer it has, and the chain's ROM-once AtariEnv.
    stack = ["atari_preprocessing", "episodic_life", "fire_reset", "frame_stack"]
    fused = torchwm.make_env("ALE/Breakout-v5", wrappers=stack)
    chain = torchwm.make_env("ALE/Breakout-v5", wrappers=stack, fused=False)
    names = layer_names(fused) + layer_names(chain)
    own = [name for name in names if name.startswith("torchwm.")]
    assert {name.rpartition(".")[2] for name in own} >= {
        "FusedAtariEnv",
        "RingFrameStack",
        "FireResetEnv",
        "EpisodicLifeEnv",
        "AtariPreprocessingCore",
        "RomOnceAtariEnv",
    }
    for env in (fused, chain):
        layer = env
        while layer is not None:
            if type(layer).__module__.startswith("torchwm."):
                assert isinstance(layer, StatefulLayer), type(layer)
            layer = getattr(type(layer), "torchwm_layer_below", lambda _: getattr(_, "env", None))(layer)
    assert not [name for name in env_state._HANDLERS if name.startswith("torchwm.")]


def _run_and_replay(envs, before, actions):
    """The steps ``actions`` give from the envs as they are, and again from ``before`` (their states then):
    equal only if the envs were in ``before``."""
    now = _run(envs, actions)
    envs.restore_state(before)
    return now, _run(envs, actions)


def test_a_pong_state_is_refused_by_a_breakout_env_naming_both_before_anything_changes():
    with (
        torchwm.make_vec("ALE/Pong-v5", num_envs=2, backend="sync", seed=0) as pong,
        torchwm.make_vec("ALE/Breakout-v5", num_envs=2, backend="sync", seed=0) as breakout,
    ):
        pong.reset()
        breakout.reset()
        _run(pong, _actions(pong, 3))
        _run(breakout, _actions(breakout, 3))
        assert pong.observation_space == breakout.observation_space  # the same shapes, the same layers
        before = breakout.clone_state()
        with pytest.raises(ValueError, match=r"env 0 does not fit: .*ALE/Pong-v5.*ALE/Breakout-v5"):
            breakout.restore_state(pong.clone_state())
        now, replayed = _run_and_replay(breakout, before, _actions(breakout, 10, seed=3))
        _assert_same(now, replayed, "Breakout after a refused Pong state")


def _without(state, layer_suffix, key):
    layers = tuple(
        (name, {k: v for k, v in layer.items() if k != key}) if name.endswith(layer_suffix) else (name, layer)
        for name, layer in state.layers
    )
    return dataclasses.replace(state, layers=layers)


@pytest.mark.parametrize("backend", ["sync", "shmem"])
@pytest.mark.parametrize(
    ("case", "layer", "key"),
    [("cartpole-frame-stack", ".TimeLimit", "_elapsed_steps"), ("pong-fused", ".RingFrameStack", "ring")],
)
def test_a_damaged_second_state_is_refused_and_no_env_is_restored(backend, case, layer, key):
    with _make(case, backend) as envs:
        envs.reset()
        _run(envs, _actions(envs, 3, seed=1))
        states = envs.clone_state()
        _run(envs, _actions(envs, 3, seed=2))
        before = envs.clone_state()
        with pytest.raises(
            ValueError, match=rf"env 1 does not fit: the state of {layer[1:]} has no '{key}'"
        ) as caught:
            envs.restore_state([states[0], _without(states[1], layer, key)])
        assert not isinstance(caught.value, LookupError)
        # env 0 was not restored (neither was env 1): the envs step on from where they were.
        now, replayed = _run_and_replay(envs, before, _actions(envs, 12, seed=3))
        _assert_same(now, replayed, f"{case} on {backend} after a refused restore")


def test_a_state_records_its_stack_but_not_the_seed_backend_or_number_of_envs():
    with _make("cartpole-frame-stack", "shmem") as envs:
        envs.reset()
        (state, _) = envs.clone_state()
    stack = state.stack
    assert stack.env == "gym:CartPole-v1" and stack.observation_shape == (4, 4)
    assert [name for name, _ in stack.wrappers] == ["frame_stack"]
    with torchwm.make_vec(
        "CartPole-v1", num_envs=3, backend="sync", seed=11, wrappers=["frame_stack"]
    ) as other:
        assert StackIdentity.of(other.spec, other.single_observation_space) == stack
        other.restore_state([state], env_ids=[2])
        with pytest.raises(ValueError, match="records no stack"):
            other.restore_state([dataclasses.replace(state, stack=None)], env_ids=[0])
