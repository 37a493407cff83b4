"""`torchwm run` (`torchwm.cli.run`): it steps an env id, a config or a shipped config's name with a random or
the user's policy, prints the resolved config, switches backends, and times its steps without the start-up;
an option asking for more memory than there is is one line naming it. On a multi-agent config it steps the
agents layout and prints each agent's mean return beside the env's, the numbers of the same seeds stepped
by hand."""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from support.commands import refuses_huge_allocations, report_line, torchwm_cli

import torchwm.multiagent as ma
from torchwm.cli import main
from torchwm.plugins import registry

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "torchwm" / "configs"


def test_run_an_env_id_prints_speed_and_returns(capsys):
    assert (
        main(["run", "CartPole-v1", "--num-envs", "2", "--steps", "300", "--seed", "0", "--no-progress"]) == 0
    )
    out = capsys.readouterr().out
    assert "steps per second" in out and "episodes finished" in out and "return: mean" in out


def test_run_with_a_user_policy(tmp_path, monkeypatch, capsys):
    (tmp_path / "always_left.py").write_text(
        "import numpy as np\ndef policy(obs, action_space):\n    return np.zeros(len(obs), dtype=np.int64)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert (
        main(
            [
                "run",
                "CartPole-v1",
                "--num-envs",
                "1",
                "--steps",
                "100",
                "--seed",
                "0",
                "--no-progress",
                "--policy",
                "always_left:policy",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    # Always pushing left ends every CartPole episode in about 10 steps.
    episodes = int(out.split("episodes finished:")[1].split()[0])
    assert episodes >= 5


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.*")), ids=lambda p: p.name)
def test_example_configs_run_from_the_command_line(path):
    backend = __import__("torchwm").load_config(path).backend
    if backend not in registry("backend"):
        pytest.skip(f"backend {backend!r} is a plugin that is not installed here")
    result = torchwm_cli("run", str(path), "--steps", "30", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "steps per second" in result.stdout


def test_print_config_is_the_resolved_config():
    result = torchwm_cli("run", "torchwm/configs/pong.toml", "--print-config")
    assert result.returncode == 0, result.stderr
    for line in (
        'id = "ALE/Pong-v5"',
        "repeat_action_probability = 0.25",
        "noop_max = 30",
        'autoreset_mode = "next_step"',
    ):
        assert line in result.stdout


# -- shipped configs ---------------------------------------------------------------------------------


def test_a_shipped_config_runs_by_name_from_any_directory(tmp_path):
    result = torchwm_cli("run", "cartpole", "--steps", "20", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "CartPole-v1 x 4 envs on subproc" in result.stderr and "steps per second" in result.stdout


def test_run_pong_by_name_prints_the_shipped_file(tmp_path):
    result = torchwm_cli("run", "pong", "--print-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'id = "ALE/Pong-v5"' in result.stdout and "timeout = 120" in result.stdout


# -- --backend and options per backend ---------------------------------------------------------------


def test_backend_switch_applies_only_the_new_backends_table(capsys):
    # pong.toml has a [backends.shmem] table; sync must not get its options (the command).
    assert (
        main(
            [
                "run",
                str(CONFIGS / "pong.toml"),
                "--backend",
                "sync",
                "--num-envs",
                "2",
                "--steps",
                "3",
                "--no-progress",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "ALE/Pong-v5 x 2 envs on sync" in err and "error" not in err


def test_backend_switch_drops_flat_options_the_new_backend_does_not_take(tmp_path, capsys):
    path = tmp_path / "flat.toml"
    path.write_text(
        'id = "CartPole-v1"\nnum_envs = 2\nbackend = "subproc"\n'
        "[backend_kwargs]\nnum_workers = 2\ntimeout = 60\n"
    )
    assert main(["run", str(path), "--backend", "sync", "--steps", "3", "--no-progress"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    assert len(notes) == 1 and "num_workers" in notes[0] and "timeout" not in notes[0]


# -- a policy named in a config -----------------------------------------------------------------------


def _policy_config(tmp_path):
    (tmp_path / "always_left_cfg.py").write_text(
        "import numpy as np\nRAN = []\ndef policy(obs, action_space):\n"
        "    RAN.append(1)\n    return np.zeros(len(obs), dtype=np.int64)\n"
    )
    path = tmp_path / "with_policy.toml"
    path.write_text(
        'id = "CartPole-v1"\nnum_envs = 1\nseed = 0\n[run]\nsteps = 100\npolicy = "always_left_cfg:policy"\n'
    )
    return path


def test_a_config_cannot_import_a_policy_without_the_flag(tmp_path):
    path = _policy_config(tmp_path)
    result = torchwm_cli("run", str(path), "--no-progress", cwd=tmp_path)
    assert result.returncode == 2 and "--allow-policy-import" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "steps per second" not in result.stdout


def test_a_config_policy_runs_with_the_flag(tmp_path):
    path = _policy_config(tmp_path)
    result = torchwm_cli("run", str(path), "--no-progress", "--allow-policy-import", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split("episodes finished:")[1].split()[0]) >= 5  # always left: ~10-step episodes


def test_run_steps_per_second_exclude_the_start_up(monkeypatch, capsys):
    from torchwm.cli import run as cli

    now = [0.0]

    class SlowToStart:
        """A vector env on a fake clock: building takes 30 s, the first reset 100 s, each step 0.5 s."""

        def __init__(self, num_envs):
            import gymnasium as gym

            now[0] += 30.0
            self.num_envs = num_envs
            self.action_space = gym.spaces.MultiDiscrete([2] * num_envs)

        def reset(self, **kwargs):
            now[0] += 100.0
            return np.zeros((self.num_envs, 4)), {}

        def step(self, actions):
            now[0] += 0.5
            n = self.num_envs
            return np.zeros((n, 4)), np.ones(n), np.zeros(n, bool), np.zeros(n, bool), {}

        def close(self):
            pass

    import numpy as np

    monkeypatch.setattr(time, "perf_counter", lambda: now[0])  # what torchwm run times its figures with
    monkeypatch.setattr(cli, "build_envs", lambda spec: SlowToStart(spec.num_envs))
    assert main(["run", "CartPole-v1", "--num-envs", "2", "--steps", "40", "--no-progress"]) == 0
    out = capsys.readouterr().out
    # 40 steps x 2 envs in 20 s of stepping: 4 env steps/s; with the 130 s of start-up it would be 0.5.
    assert report_line(out, "ran 40 steps") == (
        "ran 40 steps x 2 envs = 80 env steps in 20.00 s (after a start-up "
        "of 130.00 s, not timed: building the env and its first reset)"
    )
    assert report_line(out, "steps per second:") == "steps per second: 4 env steps/s (2 vector steps/s)"


def test_print_config_writes_the_steps_given_on_the_command_line(capsys):
    from torchwm.config import tomllib

    assert main(["run", "CartPole-v1", "--steps", "42", "--print-config"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["run"] == {"steps": 42}


def test_print_config_of_an_env_id_is_toml(capsys):
    from torchwm.config import tomllib

    assert main(["run", "CartPole-v1", "--print-config"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["id"] == "CartPole-v1"


# A side of 10**6 pixels: numpy is asked for 931 GiB at once, which a kernel that does not overcommit refuses
# at once (where it overcommits, the test would fill the memory instead).
HUGE_SCREEN = 'wrappers=[{name="atari_preprocessing", screen_size=1000000}]'


@pytest.mark.skipif(not refuses_huge_allocations(), reason="this kernel overcommits memory")
@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_an_option_asking_for_too_much_memory_is_one_line_naming_it(backend):
    result = torchwm_cli(
        "run", "ALE/Pong-v5", "--backend", backend, "--set", HUGE_SCREEN, "--steps", "2", "--no-progress"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "torchwm run: error: wrapper 'atari_preprocessing' option screen_size=1000000 asks for more memory"
    )
    assert "Unable to allocate" in error


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_a_frame_stack_the_memory_cannot_hold_is_one_line_naming_it_on_any_kernel(backend):
    # 10**10 CartPole observations: 149 GiB an array, refused by frame_stack itself, before it fills anything
    # (a kernel that overcommits would let Gymnasium fill its arrays until the out-of-memory kill).
    stack = 'wrappers=[{name="frame_stack", stack_size=10000000000}]'
    result = torchwm_cli(
        "run", "CartPole-v1", "--backend", backend, "--set", stack, "--steps", "2", "--no-progress"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (error,) = result.stderr.strip().splitlines()
    assert error.startswith(
        "torchwm run: error: wrapper 'frame_stack' option stack_size=10000000000 asks for more memory than "
        "this machine has (Unable to allocate 149 GiB for an array with shape (10000000000, 4) and data type "
        "float32"
    )
    assert error.endswith("GiB of memory and swap available)"), error  # numpy's words, not the worker's repr


# -- multi-agent configs --------------------------------------------------------------------------------
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
