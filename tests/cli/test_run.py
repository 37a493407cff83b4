"""``torchwm run`` on a multi-agent config (a ``[multiagent]`` table): the agents layout stepped, each agent's
mean return printed beside the env's, the same numbers as the same seeds stepped by hand."""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest

import torchwm.multiagent as ma
from torchwm.cli import main

SPREAD = "mpe2.simple_spread_v3"


def spread_config(tmp_path, extra: str = "", steps: int = 60):
    path = tmp_path / "spread.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            num_envs = 2
            seed = 0
            [multiagent]
            env = "{SPREAD}"
            {extra}
            [multiagent.env_kwargs]
            N = 3
            max_cycles = 25
            [run]
            steps = {steps}
            """
        )
    )
    return path


def by_hand(steps: int) -> tuple[list[np.ndarray], list[float]]:
    """Each finished episode's return per agent, stepped as run steps it: make_vec's seed for the first reset,
    the batched action space (seeded by make_vec) sampled at each step."""
    finished: list[np.ndarray] = []
    with ma.make_vec(SPREAD, 2, seed=0, N=3, max_cycles=25) as envs:
        agents = envs.num_agents_per_env
        running = np.zeros((2, agents))
        envs.reset()
        for _ in range(steps):
            _, rewards, terminations, truncations, _ = envs.step(envs.action_space.sample())
            running += rewards.reshape(2, agents)
            ended = (terminations | truncations).reshape(2, agents).all(axis=1)
            for env in np.flatnonzero(ended):  # same_step: the step's reward is the ending episode's
                finished.append(running[env].copy())
                running[env] = 0.0
    return finished, [float(r.sum()) for r in finished]


def test_run_prints_each_agent_s_mean_return_as_the_same_seeds_stepped_by_hand(tmp_path, capsys):
    assert main(["run", str(spread_config(tmp_path)), "--no-progress"]) == 0
    out = capsys.readouterr().out
    finished, env_returns = by_hand(60)
    assert len(finished) == 4  # 60 steps of 25-step episodes on 2 envs
    assert "episodes finished: 4" in out
    line = re.search(r"return per agent \(mean over the 4 episodes\): (.*)", out).group(1)
    printed = {name: float(value) for name, value in re.findall(r"(agent_\d) (-?\d+\.\d+)", line)}
    expected = np.mean(finished, axis=0)
    assert list(printed) == ["agent_0", "agent_1", "agent_2"]
    np.testing.assert_allclose(list(printed.values()), expected, atol=0.0051)
    env_mean = float(re.search(r"env return \(sum over its agents\): mean (-?\d+\.\d+)", out).group(1))
    assert env_mean == pytest.approx(np.mean(env_returns), abs=0.0051)
    assert re.search(r"\d[\d,]* env steps/s \([\d,]+ agent steps/s at 3 agents an env", out)
    assert "ran 60 steps x 2 envs = 120 env steps" in out


def test_the_shipped_simple_spread_runs_and_prints_per_agent_returns(capsys):
    assert main(["run", "simple_spread", "--steps", "30", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "episodes finished: 4" in out  # 4 envs, 25-step episodes
    assert re.search(r"return per agent \(mean over the 4 episodes\): agent_0 -?\d+\.\d\d, agent_1", out)


def test_print_config_writes_the_resolved_multiagent_config(tmp_path, capsys):
    path = spread_config(tmp_path)
    assert main(["run", str(path), "--print-config", "--steps", "7"]) == 0
    resolved = tmp_path / "resolved.toml"
    resolved.write_text(capsys.readouterr().out)
    spec, run = ma.config.load_run_config(resolved)
    assert spec == ma.load_config(path) and run.steps == 7


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "multiagent.layout=parallel"],
            "torchwm run: error: multiagent.layout: torchwm run steps layout 'agents'",
        ),
        (["--video", "videos"], "torchwm run: error: --video: a multi-agent setup has no wrapper stack"),
        (["--set", "multiagent.layout=rows"], "multiagent.layout: layout must be one of"),
    ],
)
def test_what_run_refuses_of_a_multiagent_config_is_one_line(tmp_path, capsys, args, message):
    assert main(["run", str(spread_config(tmp_path)), "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_record_refuses_a_multiagent_config_in_one_line(tmp_path, capsys):
    code = main(["record", str(spread_config(tmp_path)), "--episodes", "1", "--dataset-id", "ns/spread-v0"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "torchwm record records single-agent envs" in err and len(err.splitlines()) == 1
