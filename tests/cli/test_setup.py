"""The setup arguments the ``torchwm`` commands share (`torchwm.cli.setup`), and how commands register."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

import torchwm.cli
from torchwm.cli import build_parser, main
from torchwm.cli.setup import load_setup
from torchwm.spec import setup_options

CLI = Path(torchwm.cli.__file__).parent


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_every_flagged_setup_option_is_a_flag_of_run_and_record_with_its_own_help():
    parsers = command_parsers()
    flagged = [option for option in setup_options() if option.flag]
    assert {"num_envs", "seed", "backend", "autoreset_mode", "autoreset_seeds"} <= {o.name for o in flagged}
    for command in ("run", "record"):
        actions = {action.dest: action for action in parsers[command]._actions}
        for option in flagged:
            action = actions[option.name]
            assert f"--{option.name.replace('_', '-')}" in action.option_strings, (command, option.name)
            assert action.help.startswith(option.help), (command, option.name)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--seed", "-1"], "argument --seed: expected an integer >= 0, got '-1'"),
        (["--num-envs", "two"], "argument --num-envs: expected an integer, got 'two'"),
    ],
)
def test_a_bad_flag_value_is_the_keys_message_naming_the_flag(capsys, args, expected):
    with pytest.raises(SystemExit) as exited:
        main(["run", "CartPole-v1", *args, "--steps", "1"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == f"torchwm run: error: {expected}"


def test_the_new_flags_set_their_keys_over_the_config(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('id = "CartPole-v1"\nautoreset_seeds = true\nautoreset_mode = "same_step"\n')
    run = command_parsers()["run"]
    spec, _ = load_setup(run.parse_args([str(path)]))
    assert (spec.autoreset_seeds, spec.autoreset_mode) == (True, "same_step")
    spec, _ = load_setup(run.parse_args([str(path), "--no-autoreset-seeds", "--autoreset-mode", "disabled"]))
    assert (spec.autoreset_seeds, spec.autoreset_mode) == (False, "disabled")


def test_a_bad_autoreset_mode_flag_is_one_line_naming_the_key(capsys):
    assert main(["run", "CartPole-v1", "--autoreset-mode", "sometimes", "--steps", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "torchwm run: error: autoreset_mode: autoreset_mode must be one of"
    )


def test_each_command_module_registers_its_command_and_the_parser_lists_them_in_order():
    names = []

    class Recorder:
        def add_command(self, name, help, handler):
            names.append(name)
            parser = argparse.ArgumentParser()
            parser.set_defaults(handler=handler)
            return parser

    for module in torchwm.cli.COMMANDS:
        before = len(names)
        module.register(Recorder())
        assert len(names) == before + 1, module.__name__
    assert names == list(command_parsers()) == ["list", "run", "record", "bench", "check"]
    for name, parser in command_parsers().items():
        assert callable(parser.get_default("handler")), name


@pytest.mark.parametrize("module", [m.__name__ for m in torchwm.cli.COMMANDS])
def test_no_command_imports_another_command(module):
    """What two commands share lives in a shared module (`common`, `setup`), never in one of them."""
    commands = {m.__name__ for m in torchwm.cli.COMMANDS}
    tree = ast.parse((CLI / f"{module.rsplit('.', 1)[1]}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not (imported & (commands - {module})), imported & commands


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
