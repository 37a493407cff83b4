"""`torchwm.command_line`: bad input on every command is one line on stderr and exit status 2, with the
closest name suggested; ``--version``; the notes said once, in the command line's words.
"""

import importlib.metadata

import pytest
from support.commands import torchwm_cli

from torchwm.cli import main


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
