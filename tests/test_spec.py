"""VecSpec: every default explicit, plain data (pickle, dict round trip), readable repr."""

import pickle

import pytest

import torchwm
from torchwm.factory import resolve_spec
from torchwm.spec import VecSpec


def test_default_atari_stack_is_explicit():
    spec = resolve_spec("ALE/Pong-v5", 4, seed=3)
    assert spec.family == "atari"
    assert spec.env_kwargs["frameskip"] == 1
    assert spec.env_kwargs["repeat_action_probability"] == 0.25
    assert [w.name for w in spec.wrappers] == ["atari_preprocessing", "frame_stack"]
    assert spec.wrappers[0].kwargs == {
        "noop_max": 30,
        "frame_skip": 4,
        "screen_size": 84,
        "grayscale": True,
        "terminal_on_life_loss": False,
        "scale_obs": False,
        "grayscale_newaxis": False,
    }
    assert spec.wrappers[1].kwargs == {"stack_size": 4, "padding": "zero"}
    assert spec.autoreset_mode == "next_step" and spec.seed == 3


def test_v4_ids_get_their_own_sticky_probability():
    assert resolve_spec("PongNoFrameskip-v4").env_kwargs["repeat_action_probability"] == 0.0


def test_empty_stack_keeps_the_ids_frameskip():
    spec = resolve_spec("ALE/Pong-v5", wrappers=[])
    assert spec.wrappers == () and spec.env_kwargs["frameskip"] == 4


def test_repr_shows_every_resolved_default():
    text = repr(resolve_spec("pong", 2, backend="sync"))
    for part in (
        "'ALE/Pong-v5'",
        "repeat_action_probability': 0.25",
        "noop_max=30",
        "stack_size=4",
        "autoreset_mode='next_step'",
        "backend='sync'",
    ):
        assert part in text, part


def test_dict_round_trip_and_pickle():
    spec = resolve_spec(
        "pong", 2, wrappers=["atari_preprocessing", {"name": "frame_stack", "stack_size": 2}], seed=1
    )
    data = spec.to_dict()
    assert data["versions"]["gymnasium"]
    assert VecSpec.from_dict(data) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec


def test_vec_spec_is_the_vector_envs_spec():
    with torchwm.make_vec("CartPole-v1", 2, seed=0) as envs:
        assert envs.spec == resolve_spec("CartPole-v1", 2, seed=0)


def test_callable_wrappers_cannot_be_written_as_data():
    spec = resolve_spec("CartPole-v1", wrappers=[lambda env: env])
    with pytest.raises(ValueError, match="callables"):
        spec.to_dict()


def test_from_dict_refuses_unknown_keys():
    data = resolve_spec("CartPole-v1").to_dict()
    data["num_env"] = 3
    with pytest.raises(ValueError, match="num_env"):
        VecSpec.from_dict(data)


def test_autoreset_mode_accepts_gymnasium_spellings():
    from gymnasium.vector import AutoresetMode

    assert resolve_spec("CartPole-v1", autoreset_mode=AutoresetMode.SAME_STEP).autoreset_mode == "same_step"
    assert resolve_spec("CartPole-v1", autoreset_mode="Disabled").autoreset_mode == "disabled"


# -- one declaration of the setup (issue 53, item 4) ---------------------------------------------------------

NEW_FIELD = """
    probe_level: int = setup_field(
        3,
        help="a probe option that only spec.py declares",
        annotation="int",
        config_type=Annotated[int, annotated_types.Ge(0)],
        check=lambda value: check_count("probe_level", value, 0),
        flag=True,
    )
"""

# What a copy of the package whose spec.py alone declares one more field must do, run in a new process.
PROBE = r"""
import gymnasium as gym, inspect, sys
import torchwm, torchwm.testing
from torchwm.cli import build_parser
from torchwm.cli.setup import load_setup
from torchwm.config import dump_config, load_config

assert torchwm.__file__.startswith(sys.argv[1]), torchwm.__file__
parameter = inspect.signature(torchwm.make_vec).parameters["probe_level"]
assert (parameter.kind, parameter.default) == (inspect.Parameter.KEYWORD_ONLY, 3), parameter
assert "probe_level: a probe option that only spec.py declares" in torchwm.make_vec.__doc__
assert "probe_level" in inspect.signature(torchwm.make_vec_from_fns).parameters
with torchwm.make_vec("CartPole-v1", 2, probe_level=5) as envs:
    assert envs.spec.probe_level == 5 and "probe_level" not in envs.spec.env_kwargs
with torchwm.make_vec_from_fns([lambda: gym.make("CartPole-v1")], probe_level=4) as envs:
    assert envs.spec.probe_level == 4
try:
    torchwm.make_vec("CartPole-v1", probe_level=-1)
except ValueError as error:
    assert "probe_level must be an int >= 0, got -1" in str(error), error
else:
    raise AssertionError("make_vec took probe_level=-1")

spec = load_config({"id": "CartPole-v1", "probe_level": 7})
assert spec.probe_level == 7 and load_config({"id": "CartPole-v1"}).probe_level == 3
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
assert load_config(tomllib.loads(dump_config(spec))) == spec
try:
    load_config({"id": "CartPole-v1", "probe_level": "x"})
except torchwm.ConfigError as error:
    assert str(error) == 'probe_level: expected an integer, got "x"', error
else:
    raise AssertionError("load_config took probe_level='x'")

commands = build_parser()._subparsers._group_actions[0].choices
for command, extra in (("run", []), ("record", ["--episodes", "1", "--dataset-id", "a/b-v0"])):
    assert "--probe-level" in commands[command].format_help(), command
    spec, _ = load_setup(commands[command].parse_args(["CartPole-v1", "--probe-level", "6", *extra]))
    assert spec.probe_level == 6, command
with torchwm.testing.BackendUnderTest("sync").make(2, probe_level=2) as envs:
    assert envs.spec.probe_level == 2
print("ok")
"""


def test_a_field_declared_in_spec_py_alone_reaches_every_entry_point(tmp_path):
    """A new setup option is one `setup_field` in spec.py: make_vec (signature, docstring, checks),
    make_vec_from_fns, resolve_spec, the config keys and their messages, the resolved config, the setup
    flags of ``torchwm run`` and ``record`` and the conformance kit take it, with no other file changed."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    package = Path(torchwm.__file__).parent
    copy = tmp_path / "torchwm"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    spec_py = copy / "spec.py"
    text = spec_py.read_text()
    anchor = '    family: str = "generic"'
    assert text.count(anchor) == 1
    spec_py.write_text(text.replace(anchor, NEW_FIELD.lstrip("\n") + anchor))
    changed = [
        path.relative_to(copy)
        for path in sorted(copy.rglob("*"))
        if path.is_file() and path.read_bytes() != (package / path.relative_to(copy)).read_bytes()
    ]
    assert changed == [Path("spec.py")]

    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    result = subprocess.run(
        [sys.executable, str(probe), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_make_vec_forwards_no_locals_and_reads_no_signature():
    """make_vec passes its arguments on by the options' names, not by copying ``locals()`` through
    ``inspect.signature(resolve_spec)``."""
    import inspect

    source = inspect.getsource(torchwm.factory)
    assert "locals()" not in source
    assert "signature(resolve_spec)" not in source
