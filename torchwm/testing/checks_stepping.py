"""Checks of stepping: spaces and dtypes, the three autoreset modes against Gymnasium's `SyncVectorEnv`,
seeding (the same seed gives the same arrays, the envs differ, `sync`'s arrays) and bad actions refused."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from torchwm.errors import UnsupportedStackError
from torchwm.testing.envs import ATARI_FRAME_LIMIT, COUNTDOWN_ID
from torchwm.testing.target import (
    BackendUnderTest,
    assert_same,
    random_actions,
)


def _compare_with_gymnasium(target: BackendUnderTest, mode: str, steps: int = 40) -> None:
    n = 3
    with target.make(n, autoreset_mode=mode) as envs:
        ref = target.reference(n, mode)
        try:
            obs, _ = envs.reset(seed=7)
            ref_obs, _ = ref.reset(seed=7)
            assert_same("reset observations", 0, ref_obs, obs)
            for t, actions in enumerate(random_actions(envs, steps), start=1):
                if mode == "disabled":
                    done = np.asarray(ref._terminations | ref._truncations)
                    if done.any():
                        ref_obs, _ = ref.reset(options={"reset_mask": done.copy()})
                        obs, _ = envs.reset(options={"reset_mask": done.copy()})
                        assert_same("observations after reset_mask", t, ref_obs, obs)
                got = envs.step(actions)
                want = ref.step(actions)
                for name, a, b in zip(
                    ("observations", "rewards", "terminations", "truncations"), want[:4], got[:4]
                ):
                    assert_same(name, t, a, b)
                if mode == "same_step":
                    want_final = want[4].get("_final_obs", np.zeros(n, bool))
                    got_final = got[4].get("_final_obs", np.zeros(n, bool))
                    assert_same("infos['_final_obs']", t, want_final, got_final)
                    for i in np.flatnonzero(want_final):
                        assert_same(
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
        for actions in random_actions(envs, 30):
            *_, infos = envs.step(actions)
            for env in np.flatnonzero(infos.get("_final_obs", np.zeros(2, bool))):
                kept.append((infos["final_obs"][env], infos["final_obs"][env].copy()))
        assert kept, "same_step: no episode ended in 30 steps of the countdown env"
        for i, (returned, snapshot) in enumerate(kept):
            assert_same(
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
    for actions in random_actions(envs, steps, seed):
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
        assert_same("arrays of two runs with the same seed", k, x, y)


def check_matches_sync(target: BackendUnderTest) -> None:
    """The same spec and seed give the same arrays as the `sync` backend."""
    steps = 30 if target.family == "generic" else 15
    with target.make(3) as envs:
        got = _rollout(envs, steps, seed=5)
    with target.make(3, backend="sync") as envs:
        want = _rollout(envs, steps, seed=5)
    for k, (x, y) in enumerate(zip(want, got)):
        assert_same(f"arrays of {target.name!r} and 'sync'", k, x, y)


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
    assert_same("reset() after make_vec(seed=21) and reset(seed=21)", 0, again, first)


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
        assert_same(
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
        for t, actions in enumerate([None, *random_actions(envs, 30)]):
            if actions is not None:
                got, want = envs.step(actions), ref.step(actions)
            for name, a, b in zip(
                ("observations", "rewards", "terminations", "truncations"), want[:-1], got[:-1]
            ):
                assert_same(name, t, a, b)
            mask = want[-1].get("_episode_seed", np.zeros(n, bool))
            assert_same("infos['_episode_seed']", t, mask, got[-1].get("_episode_seed", np.zeros(n, bool)))
            for i in np.flatnonzero(mask):
                episode_seed = int(got[-1]["episode_seed"][i])
                assert_same(f"infos['episode_seed'][{i}]", t, want[-1]["episode_seed"][i], episode_seed)
                seeds.append(episode_seed)
                start, _ = single.reset(seed=episode_seed)
                assert_same(
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
