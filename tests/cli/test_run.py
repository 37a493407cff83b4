"""The `torchwm` command: list, run, bench, check; bad input is one line on stderr and exit status 2."""

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchwm.cli import main
from torchwm.plugins import registry

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "torchwm" / "configs"


def torchwm_cli(*args, timeout=180, cwd=ROOT, env=None):
    return subprocess.run(
        [sys.executable, "-m", "torchwm", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MPLBACKEND": "Agg", **(env or {})},
    )


def python_c(code, timeout=180, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )


def test_list_names_plugin_distribution_and_options(capsys):
    assert main(["list", "backends"]) == 0
    out = capsys.readouterr().out
    assert "sync" in out and "torchwm.vector.sync" in out and "torchwm 0.1.0" in out
    assert main(["list", "wrappers"]) == 0
    out = capsys.readouterr().out
    assert "frame_stack" in out and "stack_size=4" in out


def test_list_says_which_path_the_fused_atari_env_takes(capsys, monkeypatch):
    from torchwm import atari_kernel

    assert main(["list"]) == 0
    assert f"fused Atari env, after the emulator: {atari_kernel.kernel_status()}" in capsys.readouterr().out
    monkeypatch.setattr(atari_kernel, "KERNEL", None)
    monkeypatch.setattr(atari_kernel, "_WHY_NOT", "not built: no C compiler when torchwm was installed")
    assert main(["list"]) == 0
    assert "after the emulator: NumPy and OpenCV (not built: no C compiler" in capsys.readouterr().out


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


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        (None, ".toml", "bad.toml: no such"),
        ("id = [unclosed\n", ".toml", "bad.toml"),
        ("id: [CartPole-v1\n", ".yaml", "bad.yaml"),
        ("!!python/object/apply:os.system ['echo hacked']\n", ".yaml", "safe_load"),
        ('id = "CartPole-v1"\nnum_env = 2\n', ".toml", "num_env"),
        (
            'id = "CartPole-v1"\n[[wrappers]]\nname = "frame_stack"\nstack_size = "four"\n',
            ".toml",
            'wrappers[0].stack_size: expected an integer, got "four"',
        ),
        ('id = "CartPole-v1"\nbackend = "shmemm"\n', ".toml", "unknown backend 'shmemm'"),
        ('id = "CartPole-v1"\n[[wrappers]]\nname = "nope"\n', ".toml", "unknown wrapper 'nope'"),
    ],
)
def test_bad_input_is_one_line_and_status_2(tmp_path, capsys, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    if content is not None:
        path.write_text(content)
    assert main(["run", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_command_line_option_is_status_2():
    result = torchwm_cli("run", "CartPole-v1", "--stepz", "3")
    assert result.returncode == 2 and "Traceback" not in result.stderr


def test_run_and_record_take_one_set_of_setup_arguments():
    import argparse

    from torchwm.cli import build_parser
    from torchwm.cli.setup import load_setup

    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    commands = subparsers.choices

    def setup_arguments(command):
        return {
            action.dest: (action.option_strings, action.help, action.type, action.metavar)
            for action in commands[command]._actions
            if action.dest in ("target", "num_envs", "backend", "seed", "overrides")
        }

    assert setup_arguments("run") == setup_arguments("record")
    assert len(setup_arguments("run")) == 5
    assert setup_arguments("check")["overrides"][0] == ["--set"]
    given = [
        "CartPole-v1",
        "--num-envs",
        "3",
        "--seed",
        "5",
        "--backend",
        "subproc",
        "--set",
        "autoreset_mode=disabled",
    ]
    run_spec, _ = load_setup(commands["run"].parse_args(given))
    record_spec, _ = load_setup(
        commands["record"].parse_args([*given, "--episodes", "1", "--dataset-id", "a/b-v0"])
    )
    assert run_spec == record_spec
    assert (run_spec.num_envs, run_spec.seed, run_spec.backend, run_spec.autoreset_mode) == (
        3,
        5,
        "subproc",
        "disabled",
    )


def test_bench_writes_a_table_json_and_plot(tmp_path):
    plot, data = tmp_path / "bench.png", tmp_path / "bench.json"
    result = torchwm_cli(
        "bench",
        "--env",
        "CartPole-v1",
        "--backends",
        "gym-sync,sync",
        "--num-envs",
        "2,4",
        "--steps",
        "50",
        "--repeats",
        "1",
        "--plot",
        str(plot),
        "--json",
        str(data),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "gym-sync" in result.stdout and "sync" in result.stdout
    written = json.loads(data.read_text())
    rows = written["results"]
    assert {(r["backend"], r["num_envs"]) for r in rows} == {
        ("gym-sync", 2),
        ("gym-sync", 4),
        ("sync", 2),
        ("sync", 4),
    }
    assert all(r["steps_per_second"] > 0 for r in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The JSON says where and with what the figures were measured.
    import gymnasium
    import numpy

    assert written["machine"]["cores"] == os.cpu_count() and written["machine"]["cpu_model"]
    assert written["versions"]["gymnasium"] == gymnasium.__version__
    assert written["versions"]["numpy"] == numpy.__version__
    assert written["settings"]["repeats"] == 1 and written["settings"]["num_envs"] == [2, 4]
    # Progress on stderr while it runs: 2 sizes x 2 backends x (1 build + 1 repeat) ticks.
    assert "/8" in result.stderr


def test_bench_and_python_m_bench_are_one_parser():
    as_command = torchwm_cli("bench", "--help")
    as_module = subprocess.run(
        [sys.executable, "-m", "torchwm.bench", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert as_command.returncode == as_module.returncode == 0
    assert as_command.stdout == as_module.stdout
    for flag in ("--backend-kwargs", "--set", "--num-envs", "--repeats", "--plot", "--json", "--no-progress"):
        assert flag in as_command.stdout
    # docs/performance.md's flag works with torchwm bench too.
    result = torchwm_cli(
        "bench",
        "--backends",
        "sync",
        "--num-envs",
        "2",
        "--steps",
        "10",
        "--repeats",
        "1",
        "--backend-kwargs",
        '{"sync": {"copy": false}}',
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr


def test_check_runs_the_conformance_kit_on_a_backend(capsys):
    assert main(["check", "sync"]) == 0
    out = capsys.readouterr().out
    assert "check_autoreset_same_step" in out and "check_close" in out


def test_check_reports_a_broken_backend(fresh_plugins, capsys):
    import numpy as np

    import torchwm
    from torchwm import plugins
    from torchwm.vector.base import VectorEnv
    from torchwm.vector.sync import SyncStepper

    class NeverResets(SyncStepper):
        def reset_envs(self, ids, seeds, options):
            infos = super().reset_envs(ids, [None] * len(ids), options)
            self.observations[ids] = np.float32(0)
            return infos

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("broken", lambda spec, **options: VectorEnv(NeverResets(spec, **options)))

    plugins.register_plugin(Plugin(), name="broken-plugin")
    assert main(["check", "broken"]) == 1
    assert "FAIL" in capsys.readouterr().out.upper()


# -- one line, exit 2, on every command --------------------------------------------------------------

BAD_FILES = {
    "num_env.toml": 'id = "CartPole-v1"\nnum_env = 2\n',
    "env_kwarg.toml": 'id = "ALE/Pong-v5"\n[env_kwargs]\nrepeat_action_probabilty = 0.1\n',
    "backend_option.toml": 'id = "CartPole-v1"\nbackend = "subproc"\n[backend_kwargs]\nnum_worker = 2\n',
}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--verison"], "did you mean '--version'?"),
        (["lst"], "did you mean 'list'?"),
        (["list", "backend"], "did you mean 'backends'?"),
        (["run", "CartPole-v1", "--stepz", "3"], "did you mean '--steps'?"),
        (["run", "{tmp}/num_env.toml"], "did you mean 'num_envs'?"),
        (
            ["run", "{tmp}/env_kwarg.toml"],
            "the env 'ALE/Pong-v5' (ale_py.env:AtariEnv) takes no argument 'repeat_action_probabilty' (did "
            "you mean 'repeat_action_probability'?)",
        ),
        (
            ["run", "{tmp}/backend_option.toml"],
            "backend_kwargs.num_worker: backend 'subproc' has no option 'num_worker' (did you mean "
            "'num_workers'?)",
        ),
        (["run", "pnog"], "Did you mean 'pong'"),
        (["run", "CartPole-v1", "--backend", "shmme"], "Did you mean 'shmem'?"),
        (["bench", "--env", "ALE/Pnog-v5"], "Did you mean 'ALE/Pong-v5'"),
        (
            ["bench", "--set", "shmem.num_worker=2"],
            "has no option 'num_worker' (did you mean 'num_workers'?)",
        ),
        (["bench", "--backends", "gym-sync,shmme"], "Did you mean 'shmem'?"),
        (["bench", "--backend-kwargs", "{x"], "--backend-kwargs: not valid JSON"),
        (["bench", "--num-envs", "0"], "expected comma-separated integers >= 1"),
        (
            [
                "bench",
                "--backends",
                "sync",
                "--num-envs",
                "2",
                "--steps",
                "5",
                "--repeats",
                "1",
                "--set",
                "sync.batch_size=5",
                "--no-progress",
            ],
            "batch_size",
        ),
        (["check", "shmme"], "Did you mean 'shmem'?"),
        (["check", "sync", "--set", "copi=false"], "did you mean 'copy'?"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_bad_input_on_every_command_is_one_line_status_2(tmp_path, args, expected):
    for name, text in BAD_FILES.items():
        (tmp_path / name).write_text(text)
    result = torchwm_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert expected in result.stderr


def test_version():
    result = torchwm_cli("--version")
    assert (
        result.returncode == 0 and result.stdout.strip() == f"torchwm {importlib.metadata.version('torchwm')}"
    )


def test_env_kwargs_typo_is_blamed_on_the_env_not_the_backend(tmp_path, capsys):
    path = tmp_path / "typo.toml"
    path.write_text(BAD_FILES["env_kwarg.toml"])
    assert main(["run", str(path), "--backend", "shmem", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "env_kwargs.repeat_action_probabilty" in err and "refused" not in err


# -- shipped configs ---------------------------------------------------------------------------------


def test_a_shipped_config_runs_by_name_from_any_directory(tmp_path):
    result = torchwm_cli("run", "cartpole", "--steps", "20", "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "CartPole-v1 x 4 envs on subproc" in result.stderr and "steps per second" in result.stdout


def test_list_configs_shows_the_shipped_configs(capsys):
    assert main(["list", "configs"]) == 0
    out = capsys.readouterr().out
    for path in CONFIGS.iterdir():
        assert path.stem in out


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


# -- missing extras ----------------------------------------------------------------------------------


def _assert_extra_hint(stderr, extra):
    line = stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, stderr
    assert f"[{extra}] extra" in line and f'[{extra}]"' in line and 'pip install "' in line
    assert "pip install torchwm" not in line and "'torchwm[" not in line and '"torchwm[' not in line


def test_bench_plot_without_matplotlib_names_the_plot_extra_before_measuring(tmp_path):
    result = python_c(
        "import sys; sys.modules['matplotlib'] = None\n"
        "from torchwm.cli import main\n"
        "sys.exit(main(['bench', '--backends', 'sync', '--num-envs', '2', '--plot', "
        f"{str(tmp_path / 'x.png')!r}]))"
    )
    assert result.returncode == 2
    _assert_extra_hint(result.stderr, "plot")


def test_rendering_without_pygame_names_the_render_extra(tmp_path):
    result = python_c(
        "import sys; sys.modules['pygame'] = None\n"
        "from torchwm.cli import main\n"
        "sys.exit(main(['run', 'cartpole_pixels', '--steps', '2', '--no-progress']))"
    )
    assert result.returncode == 2
    _assert_extra_hint(result.stderr, "render")


def test_to_torch_without_torch_names_the_torch_extra():
    result = python_c("import sys; sys.modules['torch'] = None\nimport torchwm.torch_tensors")
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("torchwm.extras.MissingExtraError: torchwm.to_torch needs torch")
    _assert_extra_hint(last, "torch")


# -- what torchwm run reports: whole games, units, and a timing window without the start-up ---------------

OBS_POLICY = (
    "import numpy as np\n"
    "def policy(obs, action_space):\n"
    "    # Deterministic in the observations: the same frames give the same actions on every path.\n"
    "    return (np.asarray(obs).reshape(len(obs), -1).sum(axis=1, dtype=np.int64) // 3) % 4\n"
)
LIVES_STACK = (
    "id: ALE/Breakout-v5\nnum_envs: 2\nseed: 0\nwrappers:\n  - episode_statistics\n"
    "  - atari_preprocessing\n  - episodic_life\n  - name: frame_stack\n    stack_size: 4\n"
)


def _report_line(out, prefix):
    return next(line for line in out.splitlines() if line.startswith(prefix))


def test_run_reports_whole_game_returns_with_episodic_life(tmp_path, monkeypatch, capsys):
    import gymnasium as gym
    import numpy as np

    import torchwm
    from torchwm.factory import env_fn

    (tmp_path / "obs_policy.py").write_text(OBS_POLICY)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "lives.yaml"
    config.write_text(LIVES_STACK)
    steps = 500
    assert (
        main(["run", str(config), "--steps", str(steps), "--policy", "obs_policy:policy", "--no-progress"])
        == 0
    )
    out = capsys.readouterr().out

    # The reference: Gymnasium's own chain of the same stack (no fused env), the same seeds and policy.
    # A whole game's return is the sum of the raw rewards until the last life is lost; episode_statistics
    # at the bottom of the chain (Gymnasium's RecordEpisodeStatistics) gives its length.
    import obs_policy

    spec = torchwm.load_config(config)
    envs = gym.vector.SyncVectorEnv([env_fn(spec.replace(fused=False))] * spec.num_envs)
    obs, _ = envs.reset(seed=spec.seed)
    running, games, lengths, lives_lost = np.zeros(spec.num_envs), [], [], 0
    for _ in range(steps):
        obs, rewards, terminated, truncated, infos = envs.step(obs_policy.policy(obs, envs.action_space))
        running += rewards
        for i in np.flatnonzero(terminated | truncated):
            if infos["lives"][i] > 0 and not truncated[i]:
                lives_lost += 1  # episodic_life: the learner's episode ends, the game goes on
                continue
            games.append(running[i])
            running[i] = 0
            assert infos["_episode"][i]
            lengths.append(infos["episode"]["l"][i])
    envs.close()
    assert len(games) >= 2 and lives_lost > len(games)  # several games, each of several lives

    assert _report_line(out, "episodes finished:").startswith(
        f"episodes finished: {len(games)} (recorded by episode_statistics: whole games"
    )
    assert _report_line(out, "return:") == (
        f"return: mean {np.mean(games):.2f}, max {np.max(games):.2f} "
        f"(mean length {np.mean(lengths):.1f} emulator frames)"
    )
    # The learner's episodes are counted apart, and said to be one per life.
    learner = _report_line(out, "learner episodes")
    assert learner.startswith(
        f"learner episodes (terminated or truncated): {lives_lost + len(games)} (one per life lost)"
    )


def test_run_frames_are_the_frames_of_the_game():
    from torchwm.cli import length_unit
    from torchwm.factory import resolve_spec

    # Under atari_preprocessing the ALE env skips no frames: a step of it, which l counts, is one frame.
    assert (
        length_unit(resolve_spec("ALE/Breakout-v5", wrappers=["episode_statistics", "atari_preprocessing"]))
        == "emulator frames"
    )
    # Without it, ALE's v5 env skips 4 frames a step itself: l counts those steps.
    assert (
        length_unit(resolve_spec("ALE/Breakout-v5", wrappers=["episode_statistics"]))
        == "ALE env steps of 4 frames each"
    )
    assert length_unit(resolve_spec("CartPole-v1", wrappers=["episode_statistics"])).startswith(
        "steps of the env"
    )


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
    assert _report_line(out, "ran 40 steps") == (
        "ran 40 steps x 2 envs = 80 env steps in 20.00 s (after a start-up "
        "of 130.00 s, not timed: building the env and its first reset)"
    )
    assert _report_line(out, "steps per second:") == "steps per second: 4 env steps/s (2 vector steps/s)"


# -- torchwm bench CONFIG -------------------------------------------------------------------------------

BREAKOUT64 = (
    "id: ALE/Breakout-v5\nnum_envs: 2\nseed: 3\nwrappers:\n  - name: atari_preprocessing\n"
    "    screen_size: 64\n  - name: frame_stack\n    stack_size: 2\n"
)


def test_bench_a_config_measures_its_stack_on_the_backends_and_gymnasium(tmp_path):
    config, data = tmp_path / "breakout64.yaml", tmp_path / "bench.json"
    config.write_text(BREAKOUT64)
    result = torchwm_cli(
        "bench",
        str(config),
        "--backends",
        "sync,gym-sync",
        "--steps",
        "5",
        "--repeats",
        "1",
        "--json",
        str(data),
        "--no-progress",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    written = json.loads(data.read_text())
    recorded = written["settings"]["config"]
    assert recorded["source"] == str(config)
    assert [(w["name"], w.get("screen_size"), w.get("stack_size")) for w in recorded["spec"]["wrappers"]] == [
        ("atari_preprocessing", 64, None),
        ("frame_stack", None, 2),
    ]
    assert recorded["spec"]["seed"] == 3 and recorded["obs_shape"] == [2, 64, 64]
    rows = written["results"]
    # the config's num_envs
    assert [(r["backend"], r["num_envs"]) for r in rows] == [("sync", 2), ("gym-sync", 2)]
    for r in rows:
        assert (
            r["obs_shape"] == [2, 2, 64, 64] and r["obs_matches_config"] is True and r["steps_per_second"] > 0
        )
    assert "ALE/Breakout-v5" in result.stdout and "x sync" in result.stdout


def test_bench_lists_what_cannot_build_the_stack_with_the_reason(tmp_path):
    config = tmp_path / "resized.yaml"
    config.write_text(
        "id: ALE/Breakout-v5\nnum_envs: 2\nwrappers:\n  - atari_preprocessing\n"
        "  - name: resize\n    width: 32\n    height: 32\n"
    )
    result = torchwm_cli(
        "bench",
        "--config",
        str(config),
        "--backends",
        "gym-sync,ale-native",
        "--steps",
        "5",
        "--repeats",
        "1",
        "--no-progress",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(line.split()[2:3] == ["gym-sync"] for line in lines)
    assert any(line.startswith("not measured: ale-native: ") and "'resize'" in line for line in lines)
    # Nothing that can build it: one line, status 2.
    result = torchwm_cli("bench", str(config), "--backends", "ale-native", "--no-progress")
    assert result.returncode == 2 and "nothing measured" in result.stderr and "'resize'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_bench_default_backends_of_a_config_are_the_peers_that_can_build_it():
    import torchwm
    from torchwm import bench

    spec = torchwm.load_config({"id": "ALE/Breakout-v5", "backend": "subproc"})
    assert bench.default_backends(spec) == [
        "gym-sync",
        "gym-async",
        "ale-direct",
        "sync",
        "subproc",
        "shmem",
        "ale-native",
    ]
    resized = torchwm.load_config({"id": "ALE/Breakout-v5", "wrappers": ["atari_preprocessing", "pixels"]})
    assert bench.stack_refusal(resized, "ale-native") and bench.stack_refusal(resized, "ale-direct")
    assert bench.stack_refusal(resized, "gym-sync") is None and bench.stack_refusal(resized, "shmem") is None


def test_bench_config_and_env_are_one_or_the_other(tmp_path):
    (tmp_path / "c.yaml").write_text("id: CartPole-v1\n")
    result = torchwm_cli("bench", "c.yaml", "--env", "CartPole-v1", cwd=tmp_path)
    assert result.returncode == 2 and "not both" in result.stderr
    # The command: a config given to --env says how to measure it.
    result = torchwm_cli("bench", "--env", "c.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "torchwm bench c.yaml" in result.stderr


def test_bench_says_the_shmem_advice_once_after_the_table():
    from torchwm import bench

    advice = (
        "a worker's step is shorter than its hand-offs: fewer workers (num_workers) or backend='sync' "
        "would be faster"
    )
    note = (
        f"split: 2 workers (measured: ...); waits: the parent polls up to 20 µs (measured: a step 9 µs; "
        f"{advice})"
    )
    results = [
        bench.BenchResult("E", "shmem", 8, 100.0, [100.0], note=note),
        bench.BenchResult("E", "sync", 8, 200.0, [200.0]),
        bench.BenchResult("E", "shmem", 16, 150.0, [150.0], note=note),
        bench.BenchResult("E", "sync", 16, 300.0, [300.0]),
    ]
    lines = bench.format_table(results, baseline="sync").splitlines()
    assert sum("would be faster" in line for line in lines) == 1
    assert lines[-1] == f"note (shmem x 8, shmem x 16): {advice}"
    # Every row and every backend's own note comes before it.
    assert [line.split(":")[0] for line in lines[-3:-1]] == ["shmem x 8", "shmem x 16"]
    assert lines[-3].endswith("(measured: a step 9 µs)")


# -- torchwm check CONFIG, and --print-config in the file's format -------------------------------------------

MANY_ERRORS = (
    "id: ALE/Breakout-v5\nnum_envs: 0\nnmu_steps: 3\nbackend: shmem\nbackend_kwargs:\n  num_worker: 2\n"
    "wrappers:\n  - name: atari_preprocessing\n    screen_size: big\n  - name: nope\n"
    "  - name: frame_stack\n    stack_size: four\nenv_kwargs:\n  repeat_action_probabilty: 0.1\n"
)


def test_check_a_config_reports_every_error_with_its_key_path(tmp_path):
    (tmp_path / "bad.yaml").write_text(MANY_ERRORS)
    result = torchwm_cli("check", "bad.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    errors = result.stderr.strip().splitlines()
    keys = [line.removeprefix("torchwm check: error: bad.yaml: ").split(":")[0] for line in errors]
    # Wrapper indexes are the file's, though the unknown wrapper [1] was set aside to check [2].
    assert keys == [
        "num_envs",
        "nmu_steps",
        "wrappers[0].screen_size",
        "wrappers[1].name",
        "wrappers[2].stack_size",
        "backend_kwargs.num_worker",
        "env_kwargs.repeat_action_probabilty",
    ]
    assert "did you mean 'num_workers'" in errors[5] and "unknown wrapper 'nope'" in errors[3]
    assert result.stdout == ""


def test_check_a_valid_config_prints_its_resolved_spec_in_its_format(tmp_path):
    import yaml

    import torchwm

    (tmp_path / "breakout64.yaml").write_text(BREAKOUT64)
    result = torchwm_cli("check", "breakout64.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "breakout64.yaml: valid" in result.stderr
    printed = yaml.safe_load(result.stdout)  # YAML in, YAML out
    assert printed["wrappers"][0]["noop_max"] == 30  # every default explicit
    assert torchwm.load_config(printed) == torchwm.load_config(tmp_path / "breakout64.yaml")


def test_check_tells_a_config_from_a_backend(fresh_plugins, tmp_path):
    import torchwm
    from torchwm import plugins
    from torchwm.cli import check_target
    from torchwm.vector.sync import SyncVectorEnv

    assert check_target("sync", None) == ("backend", "sync")
    assert check_target("pong", None) == ("config", "pong")  # a shipped config, not a backend
    assert check_target("my.yaml", None) == ("config", "my.yaml")  # a config suffix, existing or not
    assert check_target("configs/sync", None) == ("config", "configs/sync")  # a path

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("cartpole", SyncVectorEnv)

    plugins.register_plugin(Plugin(), name="named-like-a-config")
    # Both a backend and a shipped config: the backend, as before check read configs; --config for the config.
    assert check_target("cartpole", None) == ("backend", "cartpole")
    assert check_target(None, "cartpole") == ("config", "cartpole")


def test_check_a_shipped_config_by_name(capsys):
    assert main(["check", "--config", "pong"]) == 0
    captured = capsys.readouterr()
    assert 'id = "ALE/Pong-v5"' in captured.out and "pong: valid" in captured.err  # pong.toml: TOML out


@pytest.mark.parametrize(
    ("name", "text", "parse"),
    [
        ("c.yaml", "id: CartPole-v1\nnum_envs: 2\n", "yaml"),
        ("c.yml", "id: CartPole-v1\nnum_envs: 2\n", "yaml"),
        ("c.json", '{"id": "CartPole-v1", "num_envs": 2}', "json"),
        ("c.toml", 'id = "CartPole-v1"\nnum_envs = 2\n', "toml"),
    ],
)
def test_print_config_keeps_the_files_format(tmp_path, capsys, name, text, parse):
    import yaml

    from torchwm.config import tomllib

    (tmp_path / name).write_text(text)
    assert main(["run", str(tmp_path / name), "--print-config"]) == 0
    out = capsys.readouterr().out
    data = {"yaml": yaml.safe_load, "json": json.loads, "toml": tomllib.loads}[parse](out)
    assert data["id"] == "CartPole-v1" and data["num_envs"] == 2 and data["autoreset_mode"] == "next_step"
    if parse != "toml":
        with pytest.raises(tomllib.TOMLDecodeError):
            tomllib.loads(out)


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
@pytest.mark.parametrize("printer", ["run", "check"])
def test_the_printed_config_runs_the_same_run(tmp_path, capsys, monkeypatch, suffix, printer):
    from torchwm.cli import run as cli
    from torchwm.config import load_run_config

    original = tmp_path / f"c{suffix}"
    original.write_text(
        {
            ".toml": 'id = "CartPole-v1"\nnum_envs = 2\nseed = 3\n[run]\nsteps = 5\n',
            ".yaml": "id: CartPole-v1\nnum_envs: 2\nseed: 3\nrun:\n  steps: 5\n",
            ".json": '{"id": "CartPole-v1", "num_envs": 2, "seed": 3, "run": {"steps": 5}}',
        }[suffix]
    )
    args = ["run", str(original), "--print-config"] if printer == "run" else ["check", str(original)]
    assert main(args) == 0
    printed = tmp_path / f"printed{suffix}"
    printed.write_text(capsys.readouterr().out)
    assert load_run_config(printed) == load_run_config(original)
    assert load_run_config(printed)[1].steps == 5

    # And torchwm run of the printed file runs as many steps as of the original (not the default 1000).
    sent = []
    monkeypatch.setattr(cli, "print_summary", lambda report, interrupted: sent.append(report.steps))
    assert main(["run", str(printed), "--no-progress"]) == 0
    assert main(["run", str(original), "--no-progress"]) == 0
    assert sent == [5, 5]


def test_print_config_writes_the_steps_given_on_the_command_line(capsys):
    from torchwm.config import tomllib

    assert main(["run", "CartPole-v1", "--steps", "42", "--print-config"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["run"] == {"steps": 42}


def test_print_config_of_an_env_id_is_toml(capsys):
    from torchwm.config import tomllib

    assert main(["run", "CartPole-v1", "--print-config"]) == 0
    assert tomllib.loads(capsys.readouterr().out)["id"] == "CartPole-v1"


# -- every command docs/cli.md shows in a ```bash block runs ----------------------------------------------

CLI_DOC = ROOT / "docs" / "cli.md"
TUTORIAL = ROOT / "docs" / "tutorial.md"
# The pages whose ```bash blocks are torchwm commands on the config files the page itself shows
# (docs/performance.md's commands use docs/cli.md's breakout64.yaml).
COMMAND_PAGES = {CLI_DOC: CLI_DOC, ROOT / "docs" / "performance.md": CLI_DOC, TUTORIAL: TUTORIAL}
# Flags appended to a documented command so that it runs in seconds; each only makes the work smaller.
SHORTER = {
    "run": ["--steps", "20", "--no-progress"],
    "bench": ["--steps", "5", "--repeats", "1", "--num-envs", "2", "--no-progress"],
    "record": ["--no-progress"],
}


def _documented_commands() -> dict[str, Path]:
    """Each command a page shows in a ```bash block, with the page whose config files it uses."""
    import re

    commands: dict[str, Path] = {}
    for page, files in COMMAND_PAGES.items():
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.DOTALL | re.MULTILINE):
            for line in filter(None, map(str.strip, block.splitlines())):
                commands.setdefault(line, files)
    return commands


def test_the_cli_page_shows_commands_for_config_bench_check_and_print_config():
    commands = _documented_commands()
    for expected in (
        "torchwm bench breakout64.yaml",
        "torchwm check breakout64.yaml",
        "torchwm run breakout64.yaml --print-config",
    ):
        assert expected in commands


def test_the_tutorial_checks_benchmarks_and_records_its_config():
    commands = [c for c, files in _documented_commands().items() if files == TUTORIAL]
    for verb in ("check", "bench", "run"):
        assert any(c.startswith(f"torchwm {verb} my_breakout.yaml") for c in commands), verb
    assert any("--video" in c for c in commands)


@pytest.mark.parametrize("command", list(_documented_commands()))
def test_documented_command_runs(tmp_path, command):
    import shlex

    import yaml
    from test_docs import write_page_files

    write_page_files(_documented_commands()[command], tmp_path)
    words = shlex.split(command)
    assert words[0] == "torchwm"
    result = torchwm_cli(
        *words[1:],
        *SHORTER.get(words[1], []),
        cwd=tmp_path,
        timeout=600,
        env={"MINARI_DATASETS_PATH": str(tmp_path / "datasets")},  # torchwm record's datasets
    )
    assert result.returncode == 0, result.stderr
    if ("--print-config" in words or words[1] == "check") and words[2].endswith(".yaml"):
        assert yaml.safe_load(result.stdout)["id"] == "ALE/Breakout-v5"  # YAML in, YAML out
    if words[1:] == ["check", "--config", "pong"]:
        assert 'id = "ALE/Pong-v5"' in result.stdout  # pong.toml: TOML
    if "--json" in words:
        rows = json.loads((tmp_path / words[words.index("--json") + 1]).read_text())["results"]
        assert rows and all(r["obs_matches_config"] for r in rows if r["obs_shape"] is not None)
    if words[1] == "bench":
        assert "steps/s" in result.stdout
    if "--video" in words:
        assert (tmp_path / words[words.index("--video") + 1]).is_dir()


# ---------------------------------------------------------------------------- check finds what run refuses

# Each config is valid to the loader, and run refuses it when it builds the env: check finds the same error.
REFUSED_WHEN_BUILT = {
    "timeout -1": (
        "backend: shmem\nbackend_kwargs: {timeout: -1}",
        "backend_kwargs.timeout",
        "timeout must be",
    ),
    "timeout NaN": ("backend: shmem\nbackend_kwargs: {timeout: .nan}", "backend_kwargs.timeout", "got nan"),
    "context thread": (
        "backend: subproc\nbackends: {subproc: {context: thread}}",
        "backends.subproc.context",
        "context must be one of",
    ),
    "spin_seconds 5": (
        "backend: shmem\nbackend_kwargs: {spin_seconds: 5}",
        "backend_kwargs.spin_seconds",
        "spin_seconds must be between",
    ),
    "env_fn a string": (
        "backend: shmem\nbackend_kwargs: {env_fn: 'gymnasium:make'}",
        "backend_kwargs.env_fn",
        "env_fn must be a callable",
    ),
    "stack_size -4": ("wrappers: [{name: frame_stack, stack_size: -4}]", "wrappers[0]", "stack_size"),
    "resize width 0": ("wrappers: [{name: resize, width: 0, height: 4}]", "wrappers[0]", "width=0"),
    "pixels width only": ("wrappers: [{name: pixels, width: 64}]", "wrappers[0]", "both width and height"),
}


@pytest.mark.parametrize("case", list(REFUSED_WHEN_BUILT))
def test_check_finds_what_run_refuses_when_it_builds(tmp_path, capsys, case):
    text, key, message = REFUSED_WHEN_BUILT[case]
    (tmp_path / "c.yaml").write_text(f"id: CartPole-v1\nnum_envs: 2\n{text}\n")
    assert main(["check", str(tmp_path / "c.yaml")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"torchwm check: error: {tmp_path / 'c.yaml'}: {key}: ")
    assert message in errors[0]
    assert main(["run", str(tmp_path / "c.yaml"), "--steps", "2", "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_check_reports_every_build_error_on_its_line(tmp_path):
    (tmp_path / "c.yaml").write_text(
        "id: CartPole-v1\nnum_envs: 2\nbackend: shmem\nbackend_kwargs: {timeout: -1, context: thread}\n"
        "wrappers:\n  - {name: frame_stack, stack_size: -4}\n  - {name: pixels, width: 64}\n"
        "  - {name: clip_reward}\n  - {name: resize, width: 0, height: 3}\n"
    )
    result = torchwm_cli("check", "c.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    keys = [
        line.removeprefix("torchwm check: error: c.yaml: ").split(":")[0]
        for line in result.stderr.strip().splitlines()
    ]
    assert sorted(keys) == [
        "backend_kwargs.context",
        "backend_kwargs.timeout",
        "wrappers[0]",
        "wrappers[1]",
        "wrappers[3]",
    ]
    assert result.stdout == ""


def test_check_starts_no_process(tmp_path, capsys, monkeypatch):
    import multiprocessing.process

    def refuse(self):
        raise AssertionError(f"check started a process: {self}")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    (tmp_path / "c.yaml").write_text("id: CartPole-v1\nnum_envs: 4\nbackend: shmem\n")
    assert main(["check", str(tmp_path / "c.yaml")]) == 0, capsys.readouterr().err


def _refuses_huge_allocations():
    try:
        return Path("/proc/sys/vm/overcommit_memory").read_text().strip() in ("0", "2")
    except OSError:
        return False


# A side of 10**6 pixels: numpy is asked for 931 GiB at once, which a kernel that does not overcommit refuses
# at once (where it overcommits, the test would fill the memory instead).
HUGE_SCREEN = 'wrappers=[{name="atari_preprocessing", screen_size=1000000}]'


@pytest.mark.skipif(not _refuses_huge_allocations(), reason="this kernel overcommits memory")
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


def test_bench_a_config_asking_for_too_much_memory_is_one_line_naming_it(tmp_path, capsys):
    config = tmp_path / "huge.yaml"
    config.write_text("id: CartPole-v1\nwrappers:\n  - name: frame_stack\n    stack_size: 10000000000\n")
    assert main(["bench", str(config), "--no-progress"]) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()[-1:]
    # The words torchwm run says (one code for both), before any backend is measured.
    assert error.startswith(
        "torchwm bench: error: wrapper 'frame_stack' option stack_size=10000000000 asks for more memory than "
        "this machine has (Unable to allocate 149 GiB"
    ), error


@pytest.mark.skipif(not _refuses_huge_allocations(), reason="this kernel overcommits memory")
def test_check_names_the_option_asking_for_too_much_memory(tmp_path, capsys):
    (tmp_path / "c.toml").write_text(
        'id = "ALE/Pong-v5"\n[[wrappers]]\nname = "atari_preprocessing"\nscreen_size = 1000000\n'
    )
    assert main(["check", str(tmp_path / "c.toml")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert (
        len(errors) == 1
        and "wrappers[0]: wrapper 'atari_preprocessing' option screen_size=1000000" in errors[0]
    )


# ---------------------------------------------------------------------------- bench output files


@pytest.mark.parametrize(
    "flag, path, message",
    [
        ("--json", "missing/out.json", "the folder 'missing' does not exist"),
        ("--json", ".", "is a folder"),
        ("--plot", "missing/out.png", "the folder 'missing' does not exist"),
        ("--plot", "afile/out.png", "'afile' is a file, not a folder"),
        ("--plot", "out.nope", "matplotlib writes no 'nope' files"),
    ],
)
def test_bench_refuses_an_output_file_it_cannot_write_before_measuring(
    tmp_path, monkeypatch, capsys, flag, path, message
):
    from torchwm.bench import command

    def measured(*args, **kwargs):
        raise AssertionError("measured before checking where the results go")

    monkeypatch.setattr(command, "run_bench", measured)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main(["bench", "--backends", "sync", "--num-envs", "2", flag, path]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"torchwm bench: error: {flag} {path}: ")
    assert message in error[0]


# -- torchwm run with batch_size < num_envs ---------------------------------------------------------------


def test_episode_tracker_attributes_partial_rows_to_their_envs():
    from torchwm.cli.summary import EpisodeTracker

    tracker = EpisodeTracker(4, "next_step")
    f, t = [False, False], [True, False]
    tracker.update([1.0, 10.0], f, f, env_ids=[2, 0])
    tracker.update([2.0, 20.0], t, f, env_ids=[2, 1])  # env 2 ends: 1 + 2
    tracker.update([0.0, 5.0], f, f, env_ids=[2, 0])  # env 2's reset row counts for no episode
    tracker.update([30.0, 7.0], [False, True], f, env_ids=[1, 0])  # env 0 ends: 10 + 5 + 7
    assert tracker.finished_returns == [3.0, 22.0]
    assert tracker.finished_lengths == [2, 3]
    assert tracker.returns.tolist() == [0.0, 50.0, 0.0, 0.0]
    assert tracker.lengths.tolist() == [0, 2, 0, 0]


@pytest.mark.parametrize("mode", ["next_step", "same_step", "disabled"])
def test_run_with_asynchronous_batches_counts_each_env_s_episodes(mode, capsys):
    code = main(
        [
            "run", "CartPole-v1", "--num-envs", "4", "--backend", "shmem", "--seed", "0", "--steps", "300",
            "--set", "backends.shmem.batch_size=2", "--set", "backends.shmem.num_workers=2",
            "--set", f"autoreset_mode={mode}", "--no-progress",
        ]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert _report_line(out, "ran 300 steps").startswith(
        "ran 300 steps of 2 of 4 envs (batch_size) = 600 env steps"
    )
    finished = int(_report_line(out, "episodes finished:").split(": ")[1])
    assert finished > 10
    # CartPole pays 1 a step: an episode's return is its length unless rows went to the wrong env.
    returns = _report_line(out, "return:")
    mean_return = float(returns.split("mean ")[1].split(",")[0])
    assert f"mean length {mean_return:.1f} steps" in returns
    assert "Traceback" not in err and "pending call" not in err  # every env collected before close


# -- a run too short for an episode to end ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "limit"),
    [
        (["CartPole-v1"], "an episode of CartPole-v1 lasts at most 500 steps (its max_episode_steps)"),
        # pong's atari_preprocessing skips 4 frames a step: ALE's 108000-frame limit is 27000 steps.
        (
            ["pong", "--backend", "sync", "--num-envs", "1"],
            "an episode of ALE/Pong-v5 lasts at most 27,000 steps (108,000 emulator frames, ALE's "
            "max_num_frames_per_episode)",
        ),
    ],
)
def test_a_run_with_no_episode_ended_says_so_and_how_long_one_lasts(args, limit, capsys):
    assert main(["run", *args, "--steps", "6", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert _report_line(out, "episodes finished:") == "episodes finished: 0"
    assert _report_line(out, "no episode ended") == (
        f"no episode ended within 6 steps (the longest so far: 6 steps); {limit}; run more steps with "
        "--steps to see returns"
    )


def test_a_run_where_episodes_ended_has_no_such_line(capsys):
    assert main(["run", "CartPole-v1", "--steps", "300", "--seed", "0", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert int(_report_line(out, "episodes finished:").split(": ")[1]) > 0
    assert "no episode ended" not in out


# -- notes --------------------------------------------------------------------------------------------------


def test_the_slow_start_note_gives_the_command_line_spelling_once(monkeypatch, capsys):
    from torchwm.cli import run as cli
    from torchwm.vector.transports import processes
    from torchwm.vector.transports.worker_process import Ready

    def build_slowly(spec):
        # What a shmem worker reports after 2.7 s of imports (the note's own code from there on).
        monkeypatch.setattr(processes, "_slow_start_noted", False)
        for _ in range(2):  # two workers: one note
            processes.note_slow_start(
                Ready(None, build_seconds=2.7, imported=("gymnasium", "numpy")),
                "forkserver",
                "shmem",
            )
        return make_vec_from_spec(spec)

    from torchwm.factory import make_vec_from_spec

    monkeypatch.setattr(cli, "build_envs", build_slowly)
    assert main(["run", "CartPole-v1", "--steps", "2", "--no-progress"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "to build its envs" in line]
    assert notes == [
        "torchwm run: note: a worker took 2.7 s to build its envs, most of it importing gymnasium, numpy: "
        "under the 'forkserver' start method each worker imports them anew. Pass --set "
        "backends.shmem.context=fork to start workers as copies of this process"
    ]


# -- the page ---------------------------------------------------------------------------------------------


def test_docs_cli_names_every_command_in_its_opening_and_gives_each_a_section():
    import argparse
    import re

    from torchwm.cli import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    page = (ROOT / "docs" / "cli.md").read_text()
    opening = page.split("\n\n")[1]
    for command in commands.choices:
        assert f"`{command}`" in opening, command
        assert re.search(rf"^## `torchwm {command}\b", page, re.MULTILINE), command
    # A count goes stale when a command is added (the page said "four" of five).
    assert not re.search(r"\b(two|three|four|five|six|seven) commands\b", opening), opening
