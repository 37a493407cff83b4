"""`torchwm.multiagent.env_batches`: the reshapes between ``(N, A, ...)`` and ``(N*A, ...)`` batches, and one
result of the inner vector env taken apart (`EnvStep`): an ended env's rows are its ending step's, a restarted
worker's env ends truncated with reward 0."""

from __future__ import annotations

import numpy as np

from torchwm.multiagent.env_batches import (
    EnvStep,
    agent_column,
    agent_row,
    join_rows,
    repeat_rows,
    split_rows,
)


def test_rows_join_and_split_back_through_dicts_and_tuples_as_views():
    batch = {"x": np.arange(12).reshape(2, 3, 2), "y": (np.arange(6).reshape(2, 3),)}
    joined = join_rows(batch, 6)
    assert joined["x"].shape == (6, 2) and joined["y"][0].tolist() == list(range(6))
    assert np.shares_memory(joined["x"], batch["x"])
    again = split_rows(joined, 2, 3)
    assert np.array_equal(again["x"], batch["x"]) and np.array_equal(again["y"][0], batch["y"][0])
    assert agent_column(batch, 1)["x"].tolist() == [[2, 3], [8, 9]]
    assert agent_row({"x": batch["x"][0]}, 2)["x"].tolist() == [4, 5]
    assert repeat_rows({"seed": np.array([7, 8])}, 2)["seed"].tolist() == [7, 7, 8, 8]


def inner_result(n=2, agents=2):
    obs = {
        "obs": np.zeros((n, agents, 1), np.float32),
        "reward": np.ones((n, agents)),
        "terminated": np.zeros((n, agents), bool),
        "truncated": np.zeros((n, agents), bool),
        "agent_mask": np.ones((n, agents), bool),
    }
    final = {
        "obs": np.full((agents, 1), 9.0),
        "reward": [5.0, 6.0],
        "terminated": [True, True],
        "truncated": [False] * 2,
    }
    infos = {
        "final_obs": np.array([None, final], dtype=object),
        "_final_obs": np.array([False, True]),
        "episode_seed": np.array([3, 4]),
        "_episode_seed": np.array([True, True]),
    }
    return obs, infos


def test_an_ended_envs_rows_are_its_ending_steps_and_other_infos_stay_the_envs():
    obs, infos = inner_result()
    step = EnvStep.read(obs, infos, np.array([0, 1]))
    assert step.ended.tolist() == [False, True]
    assert step.rewards.tolist() == [[1.0, 1.0], [5.0, 6.0]] and step.terminations.tolist() == [
        [False] * 2,
        [True] * 2,
    ]
    assert step.final_observations[0] is None and step.final_observations[1][0, 0] == 9.0
    assert set(step.env_infos) == {"episode_seed", "_episode_seed"} and step.agent_infos == [None, None]


def test_a_restarted_workers_env_ends_truncated_with_reward_zero():
    obs, infos = inner_result()
    infos["worker_restarted"] = np.array([False, True])
    step = EnvStep.read(obs, infos, np.array([4, 5]))
    assert (
        step.rewards[1].tolist() == [0.0, 0.0]
        and step.truncations[1].all()
        and not step.terminations[1].any()
    )
    assert step.rewards[0].tolist() == [1.0, 1.0] and step.env_ids.tolist() == [4, 5]
