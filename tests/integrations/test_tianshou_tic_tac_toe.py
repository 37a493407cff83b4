"""Tianshou's tic-tac-toe test (test/pettingzoo/test_tic_tac_toe.py of Tianshou 2.0.1) on torchwm's backends.

A DQN agent trained by Tianshou's multi-agent off-policy algorithm, Collector and trainer on
`TianshouVectorEnv` over Tianshou's ``PettingZooEnv`` (``tests/integrations/tianshou_tic_tac_toe.py``, the
ported trainer) must win against a random player as Tianshou's own test asks (``best_reward >=
win_rate``), on ``shmem`` and ``sync``. Only the construction of the vector envs is changed, and the
arguments that keep it within CI's budget (see `budget_args`).
"""

# Ported from Tianshou 2.0.1 (https://github.com/thu-ml/tianshou, tag v2.0.1, commit
# 1d579674a9eea34d707c35c12f0ff7c077c3f800), test/pettingzoo/test_tic_tac_toe.py, under its licence
# (MIT, Copyright (c) 2022 Tianshou contributors; the full notice is in tianshou_tic_tac_toe.py).

import argparse

import pytest

pytest.importorskip("tianshou")  # an optional extra; the [test] extra installs it
pytest.importorskip("pettingzoo")
from tianshou_tic_tac_toe import get_args, train_agent, watch  # noqa: E402


def budget_args(tmp_path) -> argparse.Namespace:
    args = get_args()
    args.logdir = str(tmp_path)  # torchwm: Tianshou writes its TensorBoard log under ./log
    return args


@pytest.mark.parametrize("backend", ["shmem", "sync"])
def test_tic_tac_toe(tmp_path, backend: str) -> None:
    args = budget_args(tmp_path)
    if args.watch:
        watch(args, backend=backend)
        return

    result, agent = train_agent(args, backend=backend)
    assert result.best_reward >= args.win_rate
