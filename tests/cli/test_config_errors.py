"""`torchwm.cli.config_errors`: ``torchwm check CONFIG`` reports every error of a config with its key path,
what building the env would refuse included, without starting a process.
"""

import pytest
from support.commands import refuses_huge_allocations, torchwm_cli

from torchwm.cli import main

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


@pytest.mark.skipif(not refuses_huge_allocations(), reason="this kernel overcommits memory")
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
