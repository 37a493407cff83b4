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
import re
from pathlib import Path

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


def training_page_recipe() -> str:
    """The Python block of "training.md"'s section on Tianshou's tic-tac-toe."""
    page = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = page.split("\n## Multi-agent: Tianshou's tic-tac-toe\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    return block


def test_training_page_recipe_reaches_tianshous_win_rate() -> None:
    namespace: dict = {}
    exec(compile(training_page_recipe(), "docs/training.md (Multi-agent: Tianshou)", "exec"), namespace)
    assert namespace["training_envs"].is_closed and namespace["test_envs"].is_closed
    assert namespace["result"].best_reward >= get_args().win_rate  # 0.6, as Tianshou's test asks
