"""Infos as columns of the shared block (``shmem``): plain numbers with one key set come back as rows of
columns, and the infos of every step equal, key for key and dtype for dtype, those of Gymnasium's
`SyncVectorEnv` (or of the ``sync`` backend, for the fused Atari env), in every autoreset mode, when the
key set changes mid-run, when infos stop being plain numbers, and with ``batch_size`` < ``num_envs``.
"""

from __future__ import annotations

import os
import signal

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import torchwm
from torchwm.vector.batching import InfoBatcher, InfoRow, info_rows
from torchwm.vector.transports.shared_memory import SharedMemoryHandle

MODES = ["next_step", "same_step", "disabled"]
SHMEM = {"num_workers": 2, "context": "fork"}


class CountingEnv(gym.Env):
    """Infos of plain numbers (``count`` int, ``ratio`` float, ``even`` bool); an episode lasts
    ``length`` steps. From its ``grow_after``-th step on, an ``extra`` key; from its ``nest_after``-th,
    a nested dict too. ``base`` is added to ``count``, so that each env's values are its own."""

    def __init__(
        self, length: int = 7, grow_after: int | None = None, nest_after: int | None = None, base: int = 0
    ):
        self.observation_space = spaces.Box(-1e6, 1e6, (1,), np.float64)
        self.action_space = spaces.Discrete(3)
        self.length, self.grow_after, self.nest_after = length, grow_after, nest_after
        self.steps = self.episode_steps = 0
        self.base = base

    def _info(self) -> dict:
        info: dict = {"count": self.base + self.steps, "ratio": self.steps / 3, "even": self.steps % 2 == 0}
        if self.grow_after is not None and self.steps >= self.grow_after:
            info["extra"] = -self.steps
        if self.nest_after is not None and self.steps >= self.nest_after:
            info["nested"] = {"inner": self.steps}
        return info

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode_steps = 0
        return np.array([self.steps], dtype=np.float64), self._info()

    def step(self, action):
        self.steps += 1
        self.episode_steps += 1
        ended = self.episode_steps >= self.length
        return (
            np.array([self.steps + int(action)], dtype=np.float64),
            float(action),
            ended,
            False,
            self._info(),
        )


def assert_same(ours, reference, where=""):
    """The same keys in the same order, the same dtypes and values (nested dicts and object arrays too)."""
    if isinstance(reference, dict):
        assert isinstance(ours, dict) and list(ours) == list(reference), (where, list(ours), list(reference))
        for key in reference:
            assert_same(ours[key], reference[key], f"{where}[{key!r}]")
        return
    if isinstance(reference, np.ndarray) and reference.dtype == object:
        assert ours.dtype == object and ours.shape == reference.shape, where
        for i, (mine, theirs) in enumerate(zip(ours, reference, strict=True)):
            assert_same(mine, theirs, f"{where}[{i}]")
        return
    if reference is None:
        assert ours is None, where
        return
    assert np.asarray(ours).dtype == np.asarray(reference).dtype, (where, ours, reference)
    np.testing.assert_array_equal(ours, reference, err_msg=where)


def gymnasium_batch(infos):
    """The reference: Gymnasium's own loop, env by env."""
    batched: dict = {}
    for position, info in enumerate(infos):
        if info:
            batched = gym.vector.VectorEnv._add_info(InfoBatcher(len(infos)), batched, info, position)
    return batched


def plain(base, steps, **more):
    """A `CountingEnv`'s infos."""
    return {"count": base + steps, "ratio": steps / 3, "even": steps % 2 == 0, **more}


@pytest.fixture(autouse=True)
def count_column_steps(monkeypatch):
    """Each shmem transport's ``column_steps``: the steps whose infos its parent's end read from the block's
    info columns. The transport counts nothing itself; these tests count around the method that reads them."""
    read = SharedMemoryHandle._info_rows

    def counted(self, shared):
        self.column_steps += 1
        return read(self, shared)

    monkeypatch.setattr(SharedMemoryHandle, "column_steps", 0, raising=False)
    monkeypatch.setattr(SharedMemoryHandle, "_info_rows", counted)


def column_steps(envs) -> int:
    return sum(handle.column_steps for handle in envs._stepper._handles)


def run_both(ours, reference, steps: int, mode: str, num_envs: int, seed: int = 0) -> None:
    """Step both vector envs with the same actions, comparing every result (disabled: ended envs reset
    by ``reset_mask``)."""
    rng = np.random.default_rng(seed)
    assert_same(ours.reset(seed=seed)[1], reference.reset(seed=seed)[1], "reset")
    for t in range(steps):
        actions = rng.integers(0, 3, num_envs)
        mine, theirs = ours.step(actions), reference.step(actions)
        np.testing.assert_array_equal(mine[0], theirs[0])
        for got, expected in zip(mine[1:4], theirs[1:4], strict=True):
            np.testing.assert_array_equal(got, expected)
        assert_same(mine[4], theirs[4], f"step {t}")
        ended = mine[2] | mine[3]
        if mode == "disabled" and ended.any():
            options = {"reset_mask": ended}
            assert_same(ours.reset(options=options)[1], reference.reset(options=options)[1], f"reset {t}")


def gym_sync(fns, mode):
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode[mode.upper()])


@pytest.mark.parametrize("mode", MODES)
def test_pong_infos_equal_sync(mode):
    # Episodes of 400 frames (100 steps): autoresets within the run.
    kwargs = {"seed": 0, "autoreset_mode": mode, "max_num_frames_per_episode": 400}
    with (
        torchwm.make_vec("ALE/Pong-v5", 4, backend="shmem", backend_kwargs=SHMEM, **kwargs) as ours,
        torchwm.make_vec("ALE/Pong-v5", 4, backend="sync", **kwargs) as reference,
    ):
        run_both(ours, reference, 250, mode, 4)
        # Every step's infos (but the ending steps' of same_step, which carry final_obs) came as columns.
        assert column_steps(ours) >= 2 * 250 - 2 * 4


@pytest.mark.parametrize("mode", MODES)
def test_plain_number_infos_equal_gymnasium(mode):
    fns = [lambda i=i: CountingEnv(length=5 + i, base=1000 * i) for i in range(4)]
    with torchwm.make_vec_from_fns(fns, backend="shmem", autoreset_mode=mode, backend_kwargs=SHMEM) as ours:
        reference = gym_sync(fns, mode)
        run_both(ours, reference, 300, mode, 4)
        reference.close()
        assert column_steps(ours) > 0


@pytest.mark.parametrize("mode", MODES)
def test_a_key_added_then_a_nested_value_equal_gymnasium(mode):
    # Each env adds a key at its own step (schemas differ within a worker, then across workers, then agree
    # again with one more key), then a nested value (pickled from then on).
    fns = [
        lambda i=i: CountingEnv(length=6 + i, grow_after=40 + 15 * i, nest_after=200 + i) for i in range(4)
    ]
    with torchwm.make_vec_from_fns(fns, backend="shmem", autoreset_mode=mode, backend_kwargs=SHMEM) as ours:
        reference = gym_sync(fns, mode)
        rng = np.random.default_rng(1)
        ours.reset(seed=1), reference.reset(seed=1)
        counts = []
        for t in range(300):
            actions = rng.integers(0, 3, 4)
            mine, theirs = ours.step(actions), reference.step(actions)
            assert_same(mine[4], theirs[4], f"step {t}")
            counts.append(column_steps(ours))
            ended = mine[2] | mine[3]
            if mode == "disabled" and ended.any():
                options = {"reset_mask": ended}
                assert_same(ours.reset(options=options)[1], reference.reset(options=options)[1])
        reference.close()
        # Columns before the new key, and again once every env of a worker has it; none once nested.
        assert counts[30] > 0
        assert counts[150] > counts[100]
        assert counts[299] == counts[260]  # (next_step: an autoreset step is not an env step)
        assert sorted(mine[4]) == sorted(theirs[4]) and "nested" in mine[4]


def rows_of(infos, count):
    """Each env's infos of a batch: {key: (value, dtype)}, nested dicts as such."""
    rows: list[dict] = [{} for _ in range(count)]
    for key, value in infos.items():
        if isinstance(key, str) and key.startswith("_") or key == "env_id":
            continue
        if isinstance(value, dict):
            for i, sub in enumerate(rows_of(value, count)):
                if infos[f"_{key}"][i]:
                    rows[i][key] = sub
            continue
        for i in np.flatnonzero(infos[f"_{key}"]):
            rows[i][key] = (value[i], value.dtype)
    return rows


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
def test_batches_of_fewer_envs_equal_gymnasium_env_by_env(mode):
    """``batch_size`` < ``num_envs``: rows of the same step's columns stay in the pool while the next step
    overwrites the block; each env's infos, in whatever batch they come, equal Gymnasium's for it."""
    num_envs, batch = 4, 3  # 3: a worker steps one env while the other's infos wait in the pool
    fns = [
        lambda i=i: CountingEnv(length=4 + i, grow_after=60 + 10 * i, base=1000 * i) for i in range(num_envs)
    ]
    options = {**SHMEM, "batch_size": batch}
    with torchwm.make_vec_from_fns(fns, backend="shmem", autoreset_mode=mode, backend_kwargs=options) as ours:
        references = [gym_sync([fn], mode) for fn in fns]
        ours.reset(seed=0)
        for i, reference in enumerate(references):
            reference.reset(seed=i)
        rngs = [np.random.default_rng(i) for i in range(num_envs)]
        actions = {i: int(rngs[i].integers(0, 3)) for i in range(num_envs)}
        ours.step_async(np.array([actions[i] for i in range(num_envs)]))
        for _ in range(300):
            _, rewards, _, _, infos = ours.recv()
            ids = infos["env_id"].tolist()
            assert len(ids) == batch
            for position, (env, row) in enumerate(zip(ids, rows_of(infos, batch), strict=True)):
                _, reward, _, _, expected = references[env].step(np.array([actions[env]]))
                assert rewards[position] == reward[0]
                assert_same_row(row, rows_of(expected, 1)[0], env)
                actions[env] = int(rngs[env].integers(0, 3))
            ours.send(np.array([actions[env] for env in ids]), env_ids=ids)
        ours.recv(), ours.recv()  # the four envs still in flight
        for reference in references:
            reference.close()
        assert column_steps(ours) > 0


def assert_same_row(row, expected, where):
    # (the order of keys in a batch is that of its envs' infos, so a row's own order is not Gymnasium's)
    assert sorted(row) == sorted(expected), (where, row, expected)
    for key, value in expected.items():
        if isinstance(value, dict):
            assert_same_row(row[key], value, where)
        elif isinstance(value[0], np.ndarray) or value[1].kind == "O":
            assert_same(np.asarray(row[key][0]), np.asarray(value[0]), f"{where} {key}")
        else:
            assert row[key][1] == value[1], (where, key, row[key], value)
            np.testing.assert_array_equal(row[key][0], value[0], err_msg=f"{where} {key}")


def test_the_worker_writes_columns_and_the_keys_once():
    """The status the worker sets for plain numbers is INFOS_IN_COLUMNS, and the keys are pickled only
    when they change (the schema counter moves once per change); nested infos go back to pickling."""
    from torchwm.vector.transports.shared_memory import StepStatus

    fns = [lambda: CountingEnv(length=1000, grow_after=20, nest_after=40)] * 2
    with torchwm.make_vec_from_fns(fns, backend="shmem", backend_kwargs=SHMEM) as envs:
        envs.reset(seed=0)
        shared = envs._stepper._handles[0]._shared
        statuses, schema_counts = [], []
        for _ in range(50):
            envs.step(np.zeros(2, dtype=np.int64))
            statuses.append(int(shared.status[0]))
            schema_counts.append(int(shared.info_schema_seq[0]))
        assert statuses[:39] == [StepStatus.INFOS_IN_COLUMNS] * 39
        assert statuses[39:] == [StepStatus.INFOS_IN_BLOCK] * 11
        # One schema until step 20, another from then on.
        assert schema_counts[:19] == [schema_counts[0]] * 19
        assert schema_counts[19:] == [schema_counts[0] + 1] * 31
        assert envs._stepper._handles[0].column_steps == 39


def test_info_rows_read_as_dicts_and_batch_as_gymnasium():
    """`InfoRow`: the values as the env gave them, and batches of rows (one schema, several blocks, or
    mixed with dicts) equal Gymnasium's `_add_info`."""
    schema = (("lives", int), ("ratio", float), ("done", bool))
    infos = [{"lives": i, "ratio": i / 7, "done": i % 2 == 1} for i in range(5)]
    block = np.zeros((5, 3), dtype=np.int64)
    for i, info in enumerate(infos):
        block[i, 0], block.view(np.float64)[i, 1], block[i, 2] = info["lives"], info["ratio"], info["done"]
    rows = info_rows(schema, block[:3].copy()) + info_rows(schema, block[3:].copy())
    assert [row.as_dict() for row in rows] == infos and rows == infos and rows[2]["ratio"] == 2 / 7
    assert [type(value) for value in rows[1].values()] == [int, float, bool]
    assert_same(InfoBatcher(5).batch(rows), gymnasium_batch(infos))
    assert_same(InfoBatcher(5).batch(rows[::-1]), gymnasium_batch(infos[::-1]))
    mixed = [rows[0], {"lives": 9}, rows[2], {}, rows[4]]
    expected = gymnasium_batch([row.as_dict() if isinstance(row, InfoRow) else row for row in mixed])
    assert_same(InfoBatcher(5).batch(mixed), expected)
    # Rows of two schemas: batched as dicts.
    other = info_rows((("lives", int), ("ratio", float)), block[:2, :2].copy())
    assert_same(
        InfoBatcher(3).batch([*other, rows[2]]), gymnasium_batch([*[r.as_dict() for r in other], infos[2]])
    )


def test_a_restarted_worker_writes_its_columns_again():
    """After a crash (restart_on_crash) the restarted envs' reset infos (dicts, with ``worker_restarted``)
    batch with the other worker's rows as Gymnasium batches them; the new worker's columns are read with
    its own schema."""
    fns = [lambda i=i: CountingEnv(length=1000, base=1000 * i) for i in range(4)]
    options = {**SHMEM, "restart_on_crash": True, "timeout": 30}
    with torchwm.make_vec_from_fns(fns, backend="shmem", backend_kwargs=options) as envs:
        envs.reset(seed=0)
        for _ in range(3):
            envs.step(np.zeros(4, dtype=np.int64))
        os.kill(envs.worker_pids[0], signal.SIGKILL)
        infos = envs.step(np.zeros(4, dtype=np.int64))[4]
        expected = [
            plain(0, 0, worker_restarted=True),
            plain(1000, 0, worker_restarted=True),
            plain(2000, 4),
            plain(3000, 4),
        ]
        assert_same(infos, gymnasium_batch(expected))
        before = envs._stepper._handles[0].column_steps
        envs.step(np.zeros(4, dtype=np.int64))  # next_step: the restarted envs' reset step
        infos = envs.step(np.zeros(4, dtype=np.int64))[4]
        assert_same(infos, gymnasium_batch([plain(0, 1), plain(1000, 1), plain(2000, 6), plain(3000, 6)]))
        assert envs._stepper._handles[0].column_steps == before + 2


class KeyedInfoEnv(gym.Env):
    """Infos whose keys collide with the batch's own names or change type between equal values: ``keys``
    cycles, one key set per step."""

    KEYS = [("x", "_x"), ("_x", "x"), ("final_obs",), (1,), (True,), (1.0,), ("1", 1)]

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1e6, 1e6, (1,), np.float64)
        self.action_space = spaces.Discrete(3)
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action):
        self.steps += 1
        keys = self.KEYS[self.steps % len(self.KEYS)]
        return (
            np.array([float(self.steps)]),
            0.0,
            False,
            False,
            {k: self.steps + j for j, k in enumerate(keys)},
        )


def test_keys_that_collide_or_change_type_equal_gymnasium():
    # A worker of two envs: each step's infos come through the worker's column path when it can take them.
    fns = [KeyedInfoEnv for _ in range(4)]
    with torchwm.make_vec_from_fns(fns, backend="shmem", backend_kwargs=SHMEM) as ours:
        reference = gym_sync(fns, "next_step")
        run_both(ours, reference, 3 * len(KeyedInfoEnv.KEYS), "next_step", 4)
        reference.close()
