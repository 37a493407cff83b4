"""Config files the command line must refuse in one line and exit status 2, not a traceback: nested
thousands deep, or not UTF-8; and a config dict nested deeper than the limit."""

from __future__ import annotations

import pytest

import torchwm

DEEP_CONFIGS = {
    "deep.json": '{"id": "CartPole-v1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep.toml": 'id = "CartPole-v1"\nx = ' + "[" * 5000 + "]" * 5000 + "\n",
    "deep_tables.toml": 'id = "CartPole-v1"\nx = ' + "{a = " * 5000 + "1" + "}" * 5000 + "\n",
    "deep.yaml": "id: CartPole-v1\nx: " + "[" * 5000 + "]" * 5000 + "\n",
    # Read, but deeper than the recursive steps after reading (validation) can walk.
    "nested.json": '{"id": "CartPole-v1", "backend_kwargs": {"x": ' + "[" * 600 + "]" * 600 + "}}",
}


def run_bad_config(tmp_path, capsys, name, content):
    from torchwm.cli import main

    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    status = main(["run", str(path), "--steps", "1", "--no-progress"])
    err = capsys.readouterr().err.strip()
    return status, err, path


@pytest.mark.parametrize("name", sorted(DEEP_CONFIGS))
def test_a_config_nested_thousands_deep_is_one_line_and_exit_2(tmp_path, capsys, name):
    status, err, path = run_bad_config(tmp_path, capsys, name, DEEP_CONFIGS[name])
    assert status == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and "nest" in err and "64" in err and "Traceback" not in err


def test_a_config_nested_deeper_than_the_limit_is_refused_as_a_dict_too():
    from torchwm.errors import ConfigError

    deep: dict = {"a": 1}
    for _ in range(100):
        deep = {"a": deep}
    with pytest.raises(ConfigError, match="more than 64 levels deep"):
        torchwm.load_config({"id": "CartPole-v1", "backend_kwargs": deep})


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_a_config_that_is_not_utf8_is_one_line_and_exit_2(tmp_path, capsys, suffix):
    text = {
        ".toml": 'id = "CartPole-v1" # café\n',
        ".yaml": "id: CartPole-v1  # café\n",
        ".json": '{"id": "CartPole-v1", "note": "café"}',
    }[suffix]
    status, err, path = run_bad_config(tmp_path, capsys, "latin1" + suffix, text.encode("latin-1"))
    assert status == 2 and len(err.splitlines()) == 1, err
    assert str(path) in err and "not UTF-8" in err and "Traceback" not in err
