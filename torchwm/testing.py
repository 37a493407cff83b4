"""The conformance kit: the checks every torchwm backend must pass, for us and for plugin authors.

Each check in `CHECKS` takes a `BackendUnderTest` and raises `AssertionError`
(with a message saying what was expected and what came) when the backend
breaks the vector contract of docs/concepts.md. torchwm's own ``tests/conformance``
runs every check on every registered backend; a plugin author runs them on
theirs::

    import pytest
    import torchwm.testing

    @pytest.mark.parametrize("check", torchwm.testing.checks_for("mybackend"), ids=lambda c: c.__name__)
    def test_conformance(check):
        check(torchwm.testing.BackendUnderTest("mybackend"))

or from the command line: ``torchwm check mybackend``.

Generic backends are checked on `CountdownEnv` (registered as
``torchwm/Countdown-v0``), whose episodes have a known, seed-dependent length
and end by termination or truncation, against Gymnasium's own
`SyncVectorEnv` in each autoreset mode. Backends registered with
``family="atari"`` (such as ``ale-native``) are checked on Pong with a short
frame limit. A backend that cannot meet a check registers
``conformance={"skip": {"check_name": "why"}}``, and ``conformance={"variants":
[{...backend_kwargs...}, ...]}`` runs every check once per variant (start
methods, for example).

`leaked_segments` and `mapped_segments` show torchwm shared blocks (``shmem``'s, and a plugin's that uses
them) that a test left behind, from outside the backend: in ``/dev/shm`` and in a process's mappings.
`process_running` and `wait_until_ended` do the same for a backend's processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import torchwm
from torchwm.errors import AlreadyPendingCallError, ClosedEnvironmentError, UnsupportedStackError
from torchwm.plugins import registry
from torchwm.vector.transports.shared_block import SEGMENT_PREFIX

COUNTDOWN_ID = "torchwm/Countdown-v0"
ATARI_ID = "ALE/Pong-v5"
ATARI_FRAME_LIMIT = 400  # frames; with frame_skip 4, about 100 steps an episode
DEADLINE = 60.0  # seconds a check waits for what must happen, generous for a loaded machine


class CountdownEnv(gym.Env):
    """An env whose episodes last 3 to 7 steps, drawn from the reset seed.

    The observation holds the steps left, a number drawn from the env's RNG at
    reset (so envs with different seeds differ), the last action and the step
    count; the reward depends on the action. An episode of even length ends by
    termination, of odd length by truncation, so both flags are exercised.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}
    # Seconds each step sleeps (set per env with set_attr): a slow env among fast ones.
    delay = 0.0
    # Set True (set_attr) to make the next steps raise: one env's error among envs that step on.
    broken = False
    # A process id (set_attr): the next step ends the process it runs in (a worker's crash), unless that is
    # this process (the checks' own, where a backend of threads runs its envs).
    crash = 0
    # Seconds close() sleeps (set_attr): an env slow to close.
    close_delay = 0.0

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.render_mode = render_mode
        self.length = 0
        self.steps = 0
        self.mark = 0.0

    def _obs(self, action: int) -> np.ndarray:
        return np.array([self.length - self.steps, self.mark, action, self.steps], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.length = int(self.np_random.integers(3, 8))
        self.mark = float(self.np_random.random())
        self.steps = 0
        return self._obs(-1), {"length": self.length}

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        if self.broken:
            raise RuntimeError("CountdownEnv broke on purpose")
        if self.crash and self.crash != os.getpid():
            os._exit(3)
        self.steps += 1
        reward = float(self.steps + 0.5 * int(action))
        ended = self.steps >= self.length
        terminated = ended and self.length % 2 == 0
        truncated = ended and not terminated
        return self._obs(int(action)), reward, terminated, truncated, {"steps": self.steps}

    def close(self) -> None:
        if self.close_delay:
            time.sleep(self.close_delay)

    def render(self) -> np.ndarray:
        frame = np.zeros((8, 8, 3), dtype=np.uint8)
        frame[: self.steps] = 255
        return frame


if COUNTDOWN_ID not in gym.registry:
    # By path, so that worker processes started with spawn can make it too.
    gym.register(COUNTDOWN_ID, entry_point="torchwm.testing:CountdownEnv")


@dataclasses.dataclass
class BackendUnderTest:
    """A backend and the options to build it with, as the checks see it."""

    name: str
    backend_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def metadata(self) -> dict[str, Any]:
        return registry("backend").get(self.name).metadata

    @property
    def family(self) -> str:
        return self.metadata.get("family", "generic")

    @property
    def skips(self) -> dict[str, str]:
        return dict(self.metadata.get("conformance", {}).get("skip", {}))

    def make(
        self,
        num_envs: int = 4,
        *,
        autoreset_mode: str = "next_step",
        seed: int | None = None,
        backend: str | None = None,
        autoreset_seeds: bool = False,
        **backend_kwargs: Any,
    ) -> Any:
        """The check env on this backend (or on ``backend``, for comparisons)."""
        kwargs = {**self.backend_kwargs, **backend_kwargs} if backend is None else {}
        if self.family == "atari":
            return torchwm.make_vec(
                ATARI_ID,
                num_envs,
                backend=backend or self.name,
                seed=seed,
                autoreset_mode=autoreset_mode,
                autoreset_seeds=autoreset_seeds,
                backend_kwargs=kwargs,
                max_num_frames_per_episode=ATARI_FRAME_LIMIT,
            )
        return torchwm.make_vec(
            COUNTDOWN_ID,
            num_envs,
            backend=backend or self.name,
            seed=seed,
            autoreset_mode=autoreset_mode,
            autoreset_seeds=autoreset_seeds,
            backend_kwargs=kwargs,
        )

    def reference(self, num_envs: int, autoreset_mode: str) -> gym.vector.SyncVectorEnv:
        """Gymnasium's own SyncVectorEnv on the check env."""
        mode = torchwm.spec.AUTORESET_MODES[autoreset_mode]
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make(COUNTDOWN_ID) for _ in range(num_envs)], autoreset_mode=mode
        )


@dataclasses.dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    message: str = ""
    skipped: bool = False


def _actions(envs: Any, steps: int, seed: int = 0) -> list[np.ndarray]:
    space = envs.single_action_space
    rng = np.random.default_rng(seed)
    return [rng.integers(0, space.n, size=envs.num_envs) for _ in range(steps)]


def _assert_same(what: str, step: int, expected: Any, got: Any) -> None:
    if not np.array_equal(np.asarray(expected), np.asarray(got)):
        raise AssertionError(f"{what} differ at step {step}:\nexpected {expected!r}\ngot      {got!r}")


def _compare_with_gymnasium(target: BackendUnderTest, mode: str, steps: int = 40) -> None:
    n = 3
    with target.make(n, autoreset_mode=mode) as envs:
        ref = target.reference(n, mode)
        try:
            obs, _ = envs.reset(seed=7)
            ref_obs, _ = ref.reset(seed=7)
            _assert_same("reset observations", 0, ref_obs, obs)
            for t, actions in enumerate(_actions(envs, steps), start=1):
                if mode == "disabled":
                    done = np.asarray(ref._terminations | ref._truncations)
                    if done.any():
                        ref_obs, _ = ref.reset(options={"reset_mask": done.copy()})
                        obs, _ = envs.reset(options={"reset_mask": done.copy()})
                        _assert_same("observations after reset_mask", t, ref_obs, obs)
                got = envs.step(actions)
                want = ref.step(actions)
                for name, a, b in zip(
                    ("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]
                ):
                    _assert_same(name, t, a, b)
                if mode == "same_step":
                    want_final = want[4].get("_final_obs", np.zeros(n, bool))
                    got_final = got[4].get("_final_obs", np.zeros(n, bool))
                    _assert_same("infos['_final_obs']", t, want_final, got_final)
                    for i in np.flatnonzero(want_final):
                        _assert_same(
                            f"infos['final_obs'][{i}]", t, want[4]["final_obs"][i], got[4]["final_obs"][i]
                        )
        finally:
            ref.close()


def _atari_autoreset(target: BackendUnderTest, mode: str) -> None:
    """On Atari the RNG streams of a native backend may differ from Gymnasium's; check the semantics."""
    n = 2
    with target.make(n, autoreset_mode=mode, seed=0) as envs:
        envs.reset()
        actions = np.zeros(n, dtype=np.int64)
        ended_at = None
        for t in range(ATARI_FRAME_LIMIT):
            obs, rewards, term, trunc, infos = envs.step(actions)
            done = term | trunc
            if ended_at is not None:
                if mode == "next_step":
                    assert rewards[0] == 0 and not done[0], (
                        f"next_step: the step after an episode end must be a reset step (reward 0, no "
                        f"flags), got reward {rewards[0]}, flags {done[0]}"
                    )
                return
            if done[0]:
                if mode == "same_step":
                    assert infos.get("_final_obs", np.zeros(n, bool))[0], (
                        f"same_step: infos must carry final_obs for env 0, got keys {sorted(infos)}"
                    )
                    assert not np.shares_memory(infos["final_obs"][0], obs), (
                        "same_step: final_obs must be a copy, not a view of the observation batch"
                    )
                if mode == "disabled":
                    try:
                        envs.step(actions)
                    except ValueError:
                        return
                    raise AssertionError(
                        "disabled: stepping an env whose episode ended must raise ValueError"
                    )
                ended_at = t
        raise AssertionError(
            f"no episode ended within {ATARI_FRAME_LIMIT} steps under a {ATARI_FRAME_LIMIT}-frame limit"
        )


# -- the checks --------------------------------------------------------------------------------------


def check_spaces_and_dtypes(target: BackendUnderTest) -> None:
    """Batched spaces are the single spaces batched; results have their shapes and dtypes."""
    n = 3
    with target.make(n, seed=1) as envs:
        assert envs.num_envs == n, f"num_envs: expected {n}, got {envs.num_envs}"
        assert envs.observation_space == gym.vector.utils.batch_space(envs.single_observation_space, n), (
            f"observation_space {envs.observation_space} is not {envs.single_observation_space} batched "
            f"{n} times"
        )
        assert envs.action_space == gym.vector.utils.batch_space(envs.single_action_space, n), (
            f"action_space {envs.action_space} is not {envs.single_action_space} batched {n} times"
        )
        assert envs.metadata.get("autoreset_mode") is gym.vector.AutoresetMode.NEXT_STEP, (
            f"metadata['autoreset_mode']: expected AutoresetMode.NEXT_STEP, "
            f"got {envs.metadata.get('autoreset_mode')!r}"
        )
        obs, infos = envs.reset()
        assert isinstance(infos, dict), f"reset infos: expected a dict, got {type(infos).__name__}"
        assert envs.observation_space.contains(obs), (
            f"reset observations {obs.shape} {obs.dtype} not in {envs.observation_space}"
        )
        obs, rewards, term, trunc, infos = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs), (
            f"step observations {obs.shape} {obs.dtype} not in {envs.observation_space}"
        )
        assert rewards.shape == (n,) and rewards.dtype.kind in "fi", (
            f"rewards: expected ({n},) numbers, got {rewards.shape} {rewards.dtype}"
        )
        for name, flags in (("terminations", term), ("truncations", trunc)):
            assert flags.shape == (n,) and flags.dtype == np.bool_, (
                f"{name}: expected ({n},) bool, got {flags.shape} {flags.dtype}"
            )


def check_autoreset_next_step(target: BackendUnderTest) -> None:
    """next_step: the step after an episode end resets that env, as Gymnasium's SyncVectorEnv does."""
    if target.family == "atari":
        return _atari_autoreset(target, "next_step")
    _compare_with_gymnasium(target, "next_step")


def check_autoreset_same_step(target: BackendUnderTest) -> None:
    """same_step: the ending step returns the reset observation and final_obs / final_info, copies."""
    if target.family == "atari":
        return _atari_autoreset(target, "same_step")
    _compare_with_gymnasium(target, "same_step")
    # The final observations must be copies: a later step must not change one already returned.
    with target.make(2, autoreset_mode="same_step", seed=3) as envs:
        envs.reset()
        kept = []
        for actions in _actions(envs, 30):
            *_, infos = envs.step(actions)
            for env in np.flatnonzero(infos.get("_final_obs", np.zeros(2, bool))):
                kept.append((infos["final_obs"][env], infos["final_obs"][env].copy()))
        assert kept, "same_step: no episode ended in 30 steps of the countdown env"
        for i, (returned, snapshot) in enumerate(kept):
            _assert_same(
                f"final_obs #{i} (changed after it was returned: a view of a reused buffer?)",
                i,
                snapshot,
                returned,
            )


def check_autoreset_disabled(target: BackendUnderTest) -> None:
    """disabled: envs stay ended until reset(options={'reset_mask': m}); stepping one first raises."""
    if target.family == "atari":
        return _atari_autoreset(target, "disabled")
    _compare_with_gymnasium(target, "disabled")
    with target.make(1, autoreset_mode="disabled", seed=0) as envs:
        envs.reset()
        for _ in range(8):
            _, _, term, trunc, _ = envs.step(np.zeros(1, dtype=np.int64))
            if term[0] or trunc[0]:
                break
        try:
            envs.step(np.zeros(1, dtype=np.int64))
        except ValueError:
            return
        raise AssertionError("disabled: stepping an env whose episode ended must raise ValueError")


def _rollout(envs: Any, steps: int, seed: int) -> list[np.ndarray]:
    # Copies: a backend made with copy=False returns the same buffer every step.
    obs, _ = envs.reset(seed=seed)
    out = [np.array(obs)]
    for actions in _actions(envs, steps, seed):
        obs, rewards, term, trunc, _ = envs.step(actions)
        out += [np.array(obs), rewards, term, trunc]
    return out


def check_same_seed_same_trajectory(target: BackendUnderTest) -> None:
    """Two envs built alike and reset with one seed give the same arrays."""
    steps = 30 if target.family == "generic" else 15
    with target.make(2) as a:
        first = _rollout(a, steps, seed=11)
    with target.make(2) as b:
        second = _rollout(b, steps, seed=11)
    for k, (x, y) in enumerate(zip(first, second)):
        _assert_same("arrays of two runs with the same seed", k, x, y)


def check_matches_sync(target: BackendUnderTest) -> None:
    """The same spec and seed give the same arrays as the `sync` backend."""
    steps = 30 if target.family == "generic" else 15
    with target.make(3) as envs:
        got = _rollout(envs, steps, seed=5)
    with target.make(3, backend="sync") as envs:
        want = _rollout(envs, steps, seed=5)
    for k, (x, y) in enumerate(zip(want, got)):
        _assert_same(f"arrays of {target.name!r} and 'sync'", k, x, y)


def check_envs_differ(target: BackendUnderTest) -> None:
    """Envs of one vector env get different seeds (s + i), so their streams differ."""
    with target.make(2) as envs:
        obs, _ = envs.reset(seed=0)
        for _ in range(20):
            # The same action everywhere, so only the seeds can make the envs differ.
            step_obs = envs.step(np.zeros(2, dtype=np.int64))[0]
            obs = np.concatenate([obs, step_obs], axis=1)
        assert not np.array_equal(obs[0], obs[1]), (
            "env 0 and env 1 gave the same observations: are both seeded alike?"
        )


def check_first_reset_uses_make_seed(target: BackendUnderTest) -> None:
    """make_vec(seed=s) seeds the first reset: it equals reset(seed=s)."""
    with target.make(2, seed=21) as envs:
        first, _ = envs.reset()
    with target.make(2) as envs:
        again, _ = envs.reset(seed=21)
    _assert_same("reset() after make_vec(seed=21) and reset(seed=21)", 0, again, first)


def check_seeded_autoresets(target: BackendUnderTest) -> None:
    """``autoreset_seeds=True``: every episode starts from a seed of its own, reported in
    ``infos["episode_seed"]`` of the reset or step that starts it; the seeds and arrays are `sync`'s, and
    ``gym.make`` reset with a reported seed starts the same episode. A backend that cannot seed its
    autoresets refuses the option with UnsupportedStackError when the vector env is made."""
    n, seed = 3, 9
    try:
        envs = target.make(n, seed=seed, autoreset_seeds=True)
    except UnsupportedStackError:
        return
    if target.family != "generic":
        with envs:
            _, infos = envs.reset()
        _assert_same(
            "reset infos['episode_seed'] (Gymnasium's seed + i)",
            0,
            np.arange(n) + seed,
            infos.get("episode_seed"),
        )
        return
    seeds: list[int] = []
    single = gym.make(COUNTDOWN_ID)
    with envs, target.make(n, seed=seed, autoreset_seeds=True, backend="sync") as ref:
        got, want = envs.reset(), ref.reset()
        for t, actions in enumerate([None, *_actions(envs, 30)]):
            if actions is not None:
                got, want = envs.step(actions), ref.step(actions)
            for name, a, b in zip(
                ("observations", "rewards", "terminations", "truncations"), want[:-1], got[:-1]
            ):
                _assert_same(name, t, a, b)
            mask = want[-1].get("_episode_seed", np.zeros(n, bool))
            _assert_same("infos['_episode_seed']", t, mask, got[-1].get("_episode_seed", np.zeros(n, bool)))
            for i in np.flatnonzero(mask):
                episode_seed = int(got[-1]["episode_seed"][i])
                _assert_same(f"infos['episode_seed'][{i}]", t, want[-1]["episode_seed"][i], episode_seed)
                seeds.append(episode_seed)
                start, _ = single.reset(seed=episode_seed)
                _assert_same(
                    f"env {i}'s episode start and gym.make's reset with its seed", t, start, got[0][i]
                )
    single.close()
    assert len(seeds) > n, f"30 steps reported no episode_seed after the reset's ({seeds})"
    assert len(set(seeds)) == len(seeds), f"two episodes share a seed: {seeds}"


def check_bad_actions_rejected(target: BackendUnderTest) -> None:
    """Wrong count, shape or dtype of actions raises ValueError naming the shape, and the env goes on.

    Out-of-range values are refused only by a backend that checks them (``check_action_values``: an engine
    they would crash); otherwise they reach the env, as in Gymnasium.
    """
    n = 2
    with target.make(n, seed=0) as envs:
        envs.reset()
        bad = {
            "too few actions": np.zeros(n - 1, dtype=np.int64),
            "too many actions": np.zeros(n + 1, dtype=np.int64),
            "an extra dimension": np.zeros((n, 2), dtype=np.int64),
            "float actions for a discrete space": np.zeros(n, dtype=np.float32) + 0.5,
        }
        if getattr(envs, "check_action_values", False):
            bad["an action out of range"] = np.full(n, envs.single_action_space.n + 5)
        for what, actions in bad.items():
            try:
                envs.step(actions)
            except ValueError as exc:
                assert str(n) in str(exc) or "range" in str(exc) or "dtype" in str(exc), (
                    f"the error for {what} should name the expected shape: {exc}"
                )
                continue
            raise AssertionError(f"{what} ({actions!r}) was accepted; expected ValueError")
        obs = envs.step(np.zeros(n, dtype=np.int64))[0]
        assert envs.observation_space.contains(obs), "the env did not go on after rejected actions"


def check_partial_and_async(target: BackendUnderTest) -> None:
    """reset(env_ids=), step(actions, env_ids=) and send/recv return the right rows and infos['env_id']."""
    n = 4
    with target.make(n, seed=0) as envs, target.make(n, backend="sync", seed=0) as ref:
        envs.reset()
        ref.reset()
        ids = [1, 3]
        actions = np.array([1, 2])
        got = envs.step(actions, env_ids=ids)
        want = ref.step(actions, env_ids=ids)
        _assert_same("infos['env_id'] of step(env_ids=[1, 3])", 1, np.array(ids), got[4].get("env_id"))
        for name, a, b in zip(("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]):
            _assert_same(f"{name} of step(env_ids=[1, 3])", 1, a, b)
        # Every env, listed in another order: each env gets its own action, rows come in that order.
        order = [3, 0, 2, 1]
        actions = np.array([2, 0, 1, 2])  # env 3's, env 0's, env 2's, env 1's
        got = envs.step(actions, env_ids=order)
        want = ref.step(actions[np.argsort(order)])
        _assert_same(f"infos['env_id'] of step(env_ids={order})", 1, np.array(order), got[4].get("env_id"))
        for name, a, b in zip(("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]):
            _assert_same(f"{name} of step(env_ids={order})", 1, a[order], b)
        obs, infos = envs.reset(env_ids=[2], seed=40)
        ref_obs, _ = ref.reset(env_ids=[2], seed=40)
        _assert_same("reset(env_ids=[2]) observations", 2, ref_obs, obs)
        envs.send(np.zeros(n, dtype=np.int64))
        got = envs.recv()
        ref.send(np.zeros(n, dtype=np.int64))
        want = ref.recv()
        for name, a, b in zip(("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]):
            _assert_same(f"{name} of send/recv", 3, a, b)


def _env_info(infos: dict[str, Any], row: int) -> dict[str, Any]:
    """Row ``row``'s own infos, read back from a batch of infos by their ``_key`` masks (``env_id`` left
    out: Gymnasium's vector envs have none)."""
    own: dict[str, Any] = {}
    for key, value in infos.items():
        if key == "env_id" or (isinstance(key, str) and key.startswith("_") and key[1:] in infos):
            continue
        mask = infos.get(f"_{key}")
        if mask is None or mask[row]:
            own[key] = _env_info(value, row) if isinstance(value, dict) else value[row]
    return own


def _assert_same_info(what: str, step: int, expected: dict[str, Any], got: dict[str, Any]) -> None:
    if set(expected) != set(got):
        raise AssertionError(
            f"{what} differ at step {step}: expected keys {sorted(expected)}, got {sorted(got)}"
        )
    for key, value in expected.items():
        if isinstance(value, dict):
            _assert_same_info(f"{what}[{key!r}]", step, value, got[key])
        else:
            _assert_same(f"{what}[{key!r}]", step, value, got[key])


def _ordered_ids(rng: np.random.Generator, n: int, whole: bool) -> list[int]:
    """Env ids in a random order: every env (``whole``), or a random subset."""
    count = n if whole else int(rng.integers(1, n + 1))
    return rng.permutation(n)[:count].tolist()


def check_env_ids_order(target: BackendUnderTest) -> None:
    """step(actions, env_ids=...) with ids in any order: each env gets its own action, the rows come in
    the order of ``env_ids``, and each row's infos (``final_obs`` included) are its env's.

    Generic backends are compared, step by step, with one Gymnasium ``SyncVectorEnv`` per env (same
    seed, same autoreset mode); Atari backends, which step every env at once, with the same backend
    stepped in env order.
    """
    n, steps = 4, 24
    rng = np.random.default_rng(5)
    atari = target.family == "atari"
    for mode in ("next_step", "same_step"):
        try:
            envs = target.make(n, autoreset_mode=mode, seed=11)
        except UnsupportedStackError:
            if mode == "next_step":
                raise
            continue  # a backend without same_step (EnvPool's) says so at construction
        with envs:
            if atari:
                twin = target.make(n, autoreset_mode=mode, seed=11)
                references: list[Any] = []
            else:
                twin = None
                references = [target.reference(1, mode) for _ in range(n)]
            try:
                envs.reset()
                if twin is not None:
                    twin.reset()
                for i, ref in enumerate(references):
                    ref.reset(seed=11 + i)
                for t in range(1, steps + 1):
                    ids = _ordered_ids(rng, n, whole=atari or t % 4 == 0)
                    actions = rng.integers(0, envs.single_action_space.n, size=len(ids))
                    obs, rewards, term, trunc, infos = envs.step(actions, env_ids=ids)
                    _assert_same(
                        f"infos['env_id'] of step(env_ids={ids})", t, np.array(ids), infos.get("env_id")
                    )
                    if twin is not None:
                        by_env = np.argsort(ids)
                        want = twin.step(actions[by_env])
                        want_rows = [tuple(np.asarray(a)[ids] for a in want[:4])]
                        want_infos = [_env_info(want[4], i) for i in ids]
                    else:
                        want_rows, want_infos = [], []
                        for k, i in enumerate(ids):
                            result = references[i].step(actions[k : k + 1])
                            want_rows.append(tuple(np.asarray(a)[0] for a in result[:4]))
                            want_infos.append(_env_info(result[4], 0))
                        want_rows = [tuple(np.stack(column) for column in zip(*want_rows))]
                    for name, a, b in zip(
                        ("observations", "rewards", "terminations", "truncations"),
                        want_rows[0],
                        (obs, rewards, term, trunc),
                    ):
                        _assert_same(f"{name} of step(env_ids={ids}) ({mode})", t, a, b)
                    for k, i in enumerate(ids):
                        _assert_same_info(
                            f"infos of env {i} (row {k}) of step(env_ids={ids}) ({mode})",
                            t,
                            want_infos[k],
                            _env_info(infos, k),
                        )
            finally:
                if twin is not None:
                    twin.close()
                for ref in references:
                    ref.close()


def check_reset_while_others_step(target: BackendUnderTest) -> None:
    """An env whose result was received can be reset, and stepped again, while other envs are in flight;
    every env's rows stay its own (compared with one Gymnasium ``SyncVectorEnv`` per env). An env in
    flight cannot be reset (AlreadyPendingCallError, nothing changes). A backend that steps its batch as a
    whole (``resets_while_stepping = False``) refuses any reset while a step is in flight."""
    n, k = 4, 2
    with target.make(n, seed=0, batch_size=k) as envs:
        if not envs.resets_while_stepping or target.family == "atari":
            _, infos = envs.reset()
            # An asynchronous reset returns whichever envs were ready first, not necessarily 0..k-1.
            ready = infos["env_id"].tolist() if "env_id" in infos else list(range(envs.batch_size))
            envs.send(np.zeros(envs.batch_size, dtype=np.int64), env_ids=ready)
            try:
                envs.reset(env_ids=[0])
            except AlreadyPendingCallError:
                envs.recv()
                return
            if envs.resets_while_stepping:
                return  # an Atari backend that resets freely: its streams are not Gymnasium's to compare
            raise AssertionError("resets_while_stepping is False, but a reset ran while a step was in flight")
        references = [target.reference(1, "next_step") for _ in range(n)]
        rng = np.random.default_rng(2)
        try:
            envs.reset(seed=3)
            for i, ref in enumerate(references):
                ref.reset(seed=3 + i)
            idle = list(range(n))
            sent: dict[int, int] = {}  # the action in flight of each env
            for t in range(1, 13):
                actions = rng.integers(0, 3, size=len(idle))
                envs.send(actions, env_ids=idle)
                sent.update(zip(idle, actions.tolist(), strict=True))
                obs, rewards, *_, infos = envs.recv()
                ids = infos["env_id"].tolist()
                for row, i in enumerate(ids):
                    want = references[i].step(np.array([sent[i]]))
                    _assert_same(f"observation of env {i}", t, want[0][0], obs[row])
                    _assert_same(f"reward of env {i}", t, want[1][0], rewards[row])
                in_flight = sorted(set(range(n)) - set(ids))
                try:
                    envs.reset(env_ids=in_flight[:1])
                except AlreadyPendingCallError:
                    pass
                else:
                    raise AssertionError(f"reset(env_ids={in_flight[:1]}) of an env in flight was accepted")
                # Reset one of the envs just received while the others are in flight.
                seed = 100 + t
                obs, _ = envs.reset(env_ids=ids[:1], seed=seed)
                want_obs, _ = references[ids[0]].reset(seed=seed + ids[0])
                _assert_same(
                    f"reset observation of env {ids[0]} while envs {in_flight} step", t, want_obs, obs
                )
                idle = ids
        finally:
            for ref in references:
                ref.close()


def check_recv_deadline(target: BackendUnderTest) -> None:
    """recv(timeout=T, min_ready=1) returns the envs ready by T (at least one) instead of raising, and the
    others come back with a later recv, with their own results."""
    if target.family == "atari":
        return  # the check slows one env down through CountdownEnv's `delay`
    n, slow = 4, 0
    with target.make(n, seed=0) as envs, target.make(n, seed=0, backend="sync") as ref:
        envs.reset()
        ref.reset()
        envs.set_attr("delay", [1.5 if i == slow else 0.0 for i in range(n)])
        actions = np.array([0, 1, 2, 1])
        envs.send(actions)
        want = ref.step(actions)
        got_ids: list[int] = []
        while len(got_ids) < n:
            obs, rewards, term, trunc, infos = envs.recv(timeout=0.3, min_ready=1)
            ids = infos["env_id"].tolist() if "env_id" in infos else list(range(n))
            assert ids and not set(ids) & set(got_ids), (
                f"recv(timeout=0.3, min_ready=1) returned envs {ids} after envs {got_ids} came back"
            )
            for row, i in enumerate(ids):
                _assert_same(f"observation of env {i}", 1, want[0][i], obs[row])
                _assert_same(f"reward of env {i}", 1, want[1][i], rewards[row])
            got_ids += ids
        assert sorted(got_ids) == list(range(n)), f"every env must come back once, got {got_ids}"


def check_timeout_setter(target: BackendUnderTest) -> None:
    """Setting ``timeout`` checks the value as the constructor's ``timeout`` option is checked: a number of
    seconds > 0 or None (``math.inf``: None). A bad one (0, -1, NaN: ValueError; a str, a bool: TypeError)
    names ``timeout``, is not kept, and the env goes on."""
    with target.make(2, seed=0) as envs:
        for value, want in ((30, 30.0), (float("inf"), None), (None, None), (12.5, 12.5)):
            envs.timeout = value
            assert envs.timeout == want, (
                f"after timeout = {value!r}, timeout is {envs.timeout!r}, not {want!r}"
            )
        bad: list[tuple[Any, type[Exception]]] = [
            (0, ValueError),
            (-1, ValueError),
            (float("nan"), ValueError),
            ("5", TypeError),
            (True, TypeError),
        ]
        for wrong, error in bad:
            try:
                envs.timeout = wrong
            except error as exc:
                assert "timeout" in str(exc) and repr(wrong) in str(exc), (
                    f"the error for timeout = {wrong!r} should name timeout and the value: {exc}"
                )
            else:
                raise AssertionError(f"timeout = {wrong!r} was accepted; expected {error.__name__}")
            assert envs.timeout == 12.5, f"a refused timeout = {wrong!r} changed timeout to {envs.timeout!r}"
        envs.reset()
        obs = envs.step(np.zeros(2, dtype=np.int64))[0]
        assert envs.observation_space.contains(obs), "the env did not go on after refused timeouts"


def check_batch_size(target: BackendUnderTest) -> None:
    """With batch_size=k, recv() returns k envs with infos['env_id'], and every env comes back."""
    n, k = 4, 2
    with target.make(n, seed=0, batch_size=k) as envs:
        envs.reset()
        envs.send(np.zeros(n, dtype=np.int64))
        seen: list[int] = []
        for _ in range(n // k):
            obs, rewards, *_, infos = envs.recv()
            assert obs.shape[0] == k and rewards.shape == (k,), (
                f"recv with batch_size={k}: expected {k} rows, got {obs.shape[0]}"
            )
            seen += infos["env_id"].tolist()
        assert sorted(seen) == list(range(n)), f"every env must come back exactly once, got env ids {seen}"
        envs.send(np.zeros(k, dtype=np.int64), env_ids=seen[:k])
        *_, infos = envs.recv()
        assert sorted(infos["env_id"].tolist()) == sorted(seen[:k]), (
            f"recv after send(env_ids={seen[:k]}) returned {infos['env_id']}"
        )


def check_close(target: BackendUnderTest) -> None:
    """close() twice is fine; any use after close raises ClosedEnvironmentError; also works as a context
    manager."""
    envs = target.make(2, seed=0)
    envs.reset()
    envs.close()
    envs.close()
    for what, call in (("reset", envs.reset), ("step", lambda: envs.step(np.zeros(2, dtype=np.int64)))):
        try:
            call()
        except ClosedEnvironmentError:
            continue
        raise AssertionError(f"{what}() after close() must raise ClosedEnvironmentError")
    with target.make(2, seed=0) as envs:
        envs.reset()
    assert envs.closed, "leaving a with-block must close the env"


def check_close_from_two_threads_at_once(target: BackendUnderTest) -> None:
    """close() from two threads at once: both return quietly (no error of a double close), and the env is
    closed."""
    envs = target.make(2, seed=0)
    envs.reset()
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    def close() -> None:
        try:
            go.wait(DEADLINE)
            envs.close()
        except BaseException as error:  # noqa: BLE001 - the check looks at it
            errors.append(error)

    threads = [threading.Thread(target=close, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE)
    assert not any(thread.is_alive() for thread in threads), f"a close() still runs after {DEADLINE} s"
    assert errors == [], f"close() from two threads at once raised {errors!r}"
    assert envs.closed, "the env is not closed after two close() calls"


def check_close_from_another_thread(target: BackendUnderTest) -> None:
    """close() from another thread while a loop of steps and calls runs: the loop ends in one
    ClosedEnvironmentError (never the raw error of what the close freed under it), and nothing hangs.
    Closed at two moments of the loop."""
    for delay in (0.0, 0.003):
        envs = target.make(2, seed=0)
        envs.reset()
        errors: list[BaseException] = []
        started = threading.Event()
        user = threading.Thread(target=_step_until_error, args=(envs, errors, started), daemon=True)
        user.start()
        assert started.wait(DEADLINE), f"no step of the loop ended within {DEADLINE} s"
        time.sleep(delay)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Gymnasium's warning about the step pending in the other thread
            envs.close()
        user.join(DEADLINE)
        assert not user.is_alive(), f"the stepping thread still runs {DEADLINE} s after close()"
        assert len(errors) == 1 and isinstance(errors[0], ClosedEnvironmentError), (
            f"the loop closed from another thread {delay} s after its first step ended in {errors!r}, "
            f"expected one ClosedEnvironmentError"
        )


def _step_until_error(envs: Any, errors: list[BaseException], started: threading.Event) -> None:
    """Step ``envs`` (and read an attribute every third step) until a call raises; keep what it raised."""
    actions = np.zeros(envs.num_envs, dtype=np.int64)
    try:
        for calls in itertools.count():
            envs.step(actions)
            if calls % 3 == 2:
                envs.get_attr("action_space")
            started.set()
    except BaseException as error:  # noqa: BLE001 - the check looks at it
        errors.append(error)
        started.set()


def check_attributes(target: BackendUnderTest) -> None:
    """get_attr / call read every env; set_attr writes every env."""
    with target.make(2, seed=0) as envs:
        spaces_ = envs.get_attr("action_space")
        assert len(spaces_) == 2 and all(s == envs.single_action_space for s in spaces_), (
            f"get_attr('action_space') gave {spaces_}"
        )
        envs.set_attr("torchwm_probe", [5, 6])
        assert tuple(envs.get_attr("torchwm_probe")) == (5, 6), (
            f"set_attr then get_attr gave {envs.get_attr('torchwm_probe')}"
        )


def check_env_ids_in_calls(target: BackendUnderTest) -> None:
    """call / get_attr / set_attr with ``env_ids`` reach those envs only, in that order; bad ``env_ids`` are a
    ValueError, as in reset and step. A backend whose envs have no Python attributes may refuse set_attr
    (NotImplementedError), as it does without ``env_ids``."""
    with target.make(4, seed=0) as envs:
        spaces_ = envs.get_attr("action_space", env_ids=[2, 0])
        assert len(spaces_) == 2 and all(s == envs.single_action_space for s in spaces_), (
            f"get_attr('action_space', env_ids=[2, 0]) gave {spaces_}"
        )
        for bad in ([4], [-1], [1, 1], []):
            for name, args in (
                ("get_attr", ("action_space",)),
                ("call", ("action_space",)),
                ("set_attr", ("torchwm_probe", 1)),
            ):
                try:
                    getattr(envs, name)(*args, env_ids=bad)
                except ValueError:
                    continue
                except Exception as exc:
                    raise AssertionError(
                        f"{name}(env_ids={bad}) raised {exc!r}, expected a ValueError"
                    ) from exc
                raise AssertionError(f"{name}(env_ids={bad}) was accepted, expected a ValueError")
        try:
            envs.set_attr("torchwm_probe", [0, 0, 0, 0])
        except NotImplementedError:
            try:
                envs.set_attr("torchwm_probe", 1, env_ids=[1])
            except NotImplementedError:
                return
            raise AssertionError("set_attr is refused on every env but accepted with env_ids=[1]") from None
        envs.set_attr("torchwm_probe", [7, 9], env_ids=[3, 1])
        envs.set_attr("torchwm_probe", 5, env_ids=[2])
        got = tuple(envs.get_attr("torchwm_probe"))
        assert got == (0, 9, 5, 7), f"set_attr with env_ids [3, 1] then [2] gave {got}, expected (0, 9, 5, 7)"
        got = tuple(envs.call("torchwm_probe", env_ids=[1, 3, 0]))
        assert got == (9, 7, 0), f"call('torchwm_probe', env_ids=[1, 3, 0]) gave {got}, expected (9, 7, 0)"
        got = tuple(envs.get_attr("torchwm_probe", env_ids=[2]))
        assert got == (5,), f"get_attr('torchwm_probe', env_ids=[2]) gave {got}, expected (5,)"


def check_reset_rows_in_env_ids_order(target: BackendUnderTest) -> None:
    """reset(env_ids=..., seed=[...]) in any order: each row is the env of ``env_ids`` at that position,
    reset with its own seed (compared with Gymnasium's SyncVectorEnv), whether the ids are one worker's
    envs or all of them."""
    if target.family == "atari":
        return
    n = 4
    with target.make(n, seed=0) as envs, contextlib.closing(target.reference(n, "next_step")) as ref:
        envs.reset(seed=0)
        for ids in ([3, 2], [3, 2, 1, 0], [1, 0, 3]):
            seeds = [20 + i for i in range(len(ids))]
            obs, infos = envs.reset(env_ids=ids, seed=seeds)
            by_env = dict(zip(ids, seeds, strict=True))
            want, _ = ref.reset(seed=[by_env.get(i, 0) for i in range(n)])
            _assert_same(f"observations of reset(env_ids={ids}, seed={seeds})", 0, want[ids], obs)


def check_rows_of_a_send_without_env_ids_come_in_env_order(target: BackendUnderTest) -> None:
    """A send of every env without ``env_ids`` whose envs come back in parts (``recv(timeout=,
    min_ready=)``): each part's rows are in env order, whatever order an earlier send named."""
    if target.family == "atari":
        return
    n = 4
    with target.make(n, seed=0) as envs:
        envs.reset(seed=0)
        envs.step(np.zeros(n, dtype=np.int64), env_ids=[3, 2, 1, 0])
        envs.set_attr("delay", [1.0, 1.0, 0.0, 0.0])
        envs.send(np.zeros(n, dtype=np.int64))
        got: list[int] = []
        while len(got) < n:
            *_, infos = envs.recv(timeout=0.3, min_ready=1)
            ids = infos["env_id"].tolist() if "env_id" in infos else list(range(n))
            assert ids == sorted(ids), f"a send without env_ids came back as rows of envs {ids}, not in order"
            got += ids


def _raises(call: Callable[[], Any]) -> BaseException | None:
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the check looks at it
        return error
    return None


def check_an_env_error_fails_its_own_send_only(target: BackendUnderTest) -> None:
    """One env's error is raised by the call that collects that env, as soon as it is known: a step sent
    before it comes back afterwards with its own rows; a reset of another env beside the failing step
    resets that env; the error does not wait for a slow env of another send. On a backend that steps in
    ``send`` the error may come from ``send``."""
    if target.family == "atari":
        return
    n, one = 4, np.array([1])
    with target.make(n, seed=0) as envs, target.make(n, seed=0, backend="sync") as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        want = ref.step(one, env_ids=[2])
        envs.set_attr("delay", [0.0, 0.0, 0.5, 0.0])
        envs.set_attr("broken", [True, False, False, False])
        envs.send(one, env_ids=[2])
        error = _raises(lambda: (envs.send(one, env_ids=[0]), envs.recv()))
        assert error is not None and "broke on purpose" in str(error), (
            f"env 0's error was not raised by its send or recv: {error!r}"
        )
        obs, rewards, *_, infos = envs.recv()
        assert infos.get("env_id", np.arange(n)).tolist() == [2], (
            f"the recv after env 0's error returned envs {infos.get('env_id')}, expected env 2's step"
        )
        _assert_same("observation of env 2 sent before env 0's error", 1, want[0], obs)
        _assert_same("reward of env 2 sent before env 0's error", 1, want[1], rewards)
        # A reset of env 1 while env 0's step fails resets env 1; env 0's error is its own recv's.
        envs.reset(env_ids=[0], seed=0)
        envs.set_attr("delay", [0.3, 0.0, 0.0, 0.0])
        sent = _raises(lambda: envs.send(one, env_ids=[0]))
        obs, _ = envs.reset(env_ids=[1], seed=5)
        want_obs, _ = ref.reset(env_ids=[1], seed=5)
        _assert_same("reset of env 1 beside env 0's failing step", 0, want_obs, obs)
        error = sent or _raises(envs.recv)
        assert error is not None and "broke on purpose" in str(error), (
            f"env 0's error was not raised by the recv that collects it: {error!r}"
        )
        # The error comes when it is known, not after a slow step of another env.
        envs.reset(env_ids=[0], seed=0)
        envs.set_attr("delay", [0.0, 0.0, 3.0, 0.0])
        started = time.monotonic()
        error = _raises(lambda: (envs.send(np.zeros(n, dtype=np.int64)), envs.recv()))
        waited = time.monotonic() - started
        assert error is not None and "broke on purpose" in str(error), f"expected env 0's error: {error!r}"
        assert waited < 2.0, f"env 0's error came after {waited:.1f} s: it waited for env 2's 3 s step"


def check_recv_waits_again_after_a_timeout(target: BackendUnderTest) -> None:
    """A step that outlasts the backend's timeout: recv() raises EnvTimeoutError (a TimeoutError), the
    step stays in flight, and recv(timeout=longer) returns its own rows."""
    if target.family == "atari":
        return
    n = 2
    with target.make(n, seed=0) as envs, target.make(n, seed=0, backend="sync") as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        actions = np.array([1, 2])
        want = ref.step(actions)
        envs.set_attr("delay", [1.5, 0.0])
        envs.timeout = 0.5
        first = _raises(lambda: envs.step(actions))
        if first is None:
            return  # a backend that steps in the caller's process has nothing to time out
        assert isinstance(first, TimeoutError), f"a step past the timeout raised {first!r}"
        obs, rewards, *_ = envs.recv(timeout=DEADLINE)
        _assert_same("observations of the step waited for again", 1, want[0], obs)
        _assert_same("rewards of the step waited for again", 1, want[1], rewards)


def check_a_restart_announces_every_lost_episode(target: BackendUnderTest) -> None:
    """With ``restart_on_crash`` (on a backend that has it), a worker that dies restarts, and every env it
    held says that its episode ended (truncated, ``infos["worker_restarted"]``): the env in flight in its
    result, the idle ones in their next step. Every other env steps on as Gymnasium's SyncVectorEnv."""
    if target.family == "atari":
        return
    n = 4
    try:
        envs = target.make(n, seed=0, restart_on_crash=True)
    except TypeError:
        return  # no restart_on_crash on this backend
    with envs, contextlib.closing(target.reference(n, "next_step")) as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        ref.step(np.zeros(n, dtype=np.int64))
        envs.step(np.zeros(n, dtype=np.int64))
        # The last env: with ``inline`` the first worker's envs run in this process.
        envs.set_attr("crash", os.getpid(), env_ids=[n - 1])
        *_, truncations, infos = envs.step(np.array([1]), env_ids=[n - 1])
        if "worker_restarted" not in infos and not truncations[0]:
            return  # the env runs in this process (a backend of threads): it did not crash
        assert truncations[0] and infos.get("worker_restarted", [False])[0], (
            f"the crashed env's step: truncated {truncations}, infos {infos}"
        )
        others = list(range(n - 1))
        want = ref.step(np.ones(n, dtype=np.int64))
        obs, rewards, _, truncations, infos = envs.step(np.ones(n - 1, dtype=np.int64), env_ids=others)
        restarted = infos.get("worker_restarted", np.zeros(n - 1, dtype=bool))
        for row, i in enumerate(others):
            if restarted[row]:
                assert truncations[row], f"env {i}, restarted while idle, did not end its episode"
                continue
            _assert_same(f"observation of env {i}, not restarted", 2, want[0][i], obs[row])
            _assert_same(f"reward of env {i}, not restarted", 2, want[1][i], rewards[row])


def check_restore_state(target: BackendUnderTest) -> None:
    """``restore_state(clone_state())`` then the same actions gives the same observations, rewards,
    terminations and truncations (episodes ending and autoresetting meanwhile); a state survives pickle
    and restored into another env, that env follows the first."""
    import pickle

    steps = 30
    with target.make(2, seed=0) as envs:
        envs.reset()
        for actions in _actions(envs, 5, seed=1):
            envs.step(actions)
        states = envs.clone_state()
        plan = _actions(envs, steps, seed=2)
        first = [tuple(np.array(x, copy=True) for x in envs.step(a)[:4]) for a in plan]
        obs, _ = envs.restore_state(pickle.loads(pickle.dumps(states)))
        _assert_same(
            "observations returned by restore_state", 0, np.stack([s.observation for s in states]), obs
        )
        names = ("observations", "rewards", "terminations", "truncations")
        for t, actions in enumerate(plan, start=1):
            got = envs.step(actions)
            for name, want, part in zip(names, first[t - 1], got[:4], strict=True):
                _assert_same(f"after restore_state, {name}", t, want, part)
        envs.restore_state([states[0], states[0]])
        for t, actions in enumerate(plan, start=1):
            got = envs.step(np.array([actions[0], actions[0]]))
            for name, want, part in zip(names, first[t - 1], got[:4], strict=True):
                _assert_same(f"env 0's state restored into env 1, {name}", t, want[0], part[1])


CHECKS: list[Callable[[BackendUnderTest], None]] = [
    check_spaces_and_dtypes,
    check_autoreset_next_step,
    check_autoreset_same_step,
    check_autoreset_disabled,
    check_same_seed_same_trajectory,
    check_matches_sync,
    check_envs_differ,
    check_first_reset_uses_make_seed,
    check_seeded_autoresets,
    check_bad_actions_rejected,
    check_partial_and_async,
    check_env_ids_order,
    check_reset_while_others_step,
    check_recv_deadline,
    check_timeout_setter,
    check_batch_size,
    check_close,
    check_close_from_two_threads_at_once,
    check_close_from_another_thread,
    check_attributes,
    check_env_ids_in_calls,
    check_reset_rows_in_env_ids_order,
    check_rows_of_a_send_without_env_ids_come_in_env_order,
    check_an_env_error_fails_its_own_send_only,
    check_recv_waits_again_after_a_timeout,
    check_a_restart_announces_every_lost_episode,
    check_restore_state,
]


def checks_for(backend: str) -> list[Callable[[BackendUnderTest], None]]:
    """The checks that apply to ``backend`` (all but those it registered as skipped, with a reason)."""
    skips = BackendUnderTest(backend).skips
    return [check for check in CHECKS if check.__name__ not in skips]


def variants(backend: str) -> list[dict[str, Any]]:
    """The backend_kwargs variants a backend asks to be checked with (``[{}]`` by default)."""
    return list(BackendUnderTest(backend).metadata.get("conformance", {}).get("variants", [{}]))


def run_checks(backend: str, backend_kwargs: dict[str, Any] | None = None) -> list[CheckResult]:
    """Run every check on ``backend``; one result per check, failures with their message."""
    target = BackendUnderTest(backend, dict(backend_kwargs or {}))
    results = []
    for check in CHECKS:
        if check.__name__ in target.skips:
            results.append(CheckResult(check.__name__, True, target.skips[check.__name__], skipped=True))
            continue
        try:
            check(target)
        except AssertionError as exc:
            results.append(CheckResult(check.__name__, False, str(exc)))
        except Exception:
            results.append(CheckResult(check.__name__, False, traceback.format_exc()))
        else:
            results.append(CheckResult(check.__name__, True))
    return results


def leaked_segments() -> list[str]:
    """Names of torchwm shared blocks in ``/dev/shm`` created by this process (torchwm itself leaves none
    there, even while running: its blocks have no path)."""
    prefix = f"{SEGMENT_PREFIX}{os.getpid()}_"
    try:
        return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))
    except FileNotFoundError:
        return []


def mapped_segments(pid: int | str = "self") -> list[str]:
    """Names of the torchwm shared blocks that process ``pid`` maps (Linux: ``/proc/<pid>/maps``; empty
    elsewhere), to see a block's memory freed once every process that mapped it let it go."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            lines = maps.read().splitlines()
    except (FileNotFoundError, ProcessLookupError):  # no /proc, or the process ended while we read
        return []
    names = {
        line.split("/memfd:", 1)[1].split(" ")[0] for line in lines if f"/memfd:{SEGMENT_PREFIX}" in line
    }
    return sorted(names)


def process_running(pid: int) -> bool:
    """Whether process ``pid`` runs (Linux: ``/proc/<pid>/stat``; False elsewhere). A zombie has ended:
    only its parent's bookkeeping is left. A process that ends while this reads has ended, not an error."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_until_ended(pids: Iterable[int], seconds: float = DEADLINE) -> None:
    """Waits until no process of ``pids`` runs: a killed process, or one that a ``close()`` ended, may take a
    moment to go (Ray ends its actors after ``close()`` returns). `AssertionError` naming those still
    running after ``seconds``."""
    pids, deadline = list(pids), time.monotonic() + seconds
    while running := [pid for pid in pids if process_running(pid)]:
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {running} still run after {seconds:g} s")
        time.sleep(0.02)
