"""Id resolution: ALE short names, Gymnasium ids, typos and missing packages."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchwm import names
from torchwm.errors import UnknownNameError


@pytest.mark.parametrize("name", ["ALE/Pong-v5", "pong", "Pong"])
def test_pong_names_resolve_to_the_v5_id(name):
    resolved = names.resolve(name)
    assert resolved.id == "ALE/Pong-v5"
    assert resolved.family == "atari"
    assert resolved.kwargs["game"] == "pong"
    assert resolved.kwargs["repeat_action_probability"] == 0.25


@pytest.mark.parametrize("name", ["space_invaders", "SpaceInvaders", "spaceinvaders"])
def test_multi_word_games(name):
    assert names.resolve(name).id == "ALE/SpaceInvaders-v5"


def test_v4_noframeskip_keeps_its_own_defaults():
    resolved = names.resolve("PongNoFrameskip-v4")
    assert resolved.id == "PongNoFrameskip-v4"
    assert resolved.kwargs["frameskip"] == 1
    assert resolved.kwargs["repeat_action_probability"] == 0.0


def test_user_kwargs_override_registered_defaults():
    assert (
        names.resolve("pong", {"repeat_action_probability": 0.0}).kwargs["repeat_action_probability"] == 0.0
    )


def test_gymnasium_ids_are_generic():
    resolved = names.resolve("CartPole-v1")
    assert (resolved.id, resolved.family) == ("CartPole-v1", "generic")


def test_typo_suggests_the_right_name():
    with pytest.raises(UnknownNameError) as info:
        names.resolve("ALE/Pnog-v5")
    assert "ALE/Pong-v5" in info.value.suggestions


def test_missing_namespace_names_the_package():
    with pytest.raises(UnknownNameError, match=r"pip install minigrid"):
        names.resolve("MiniGrid/Empty-5x5-v0")


def test_unknown_namespace_says_nothing_registered_it():
    with pytest.raises(LookupError, match="namespace 'NoSuchThing'"):
        names.resolve("NoSuchThing/Env-v0")


@pytest.mark.parametrize("bad", [None, "", 3])
def test_non_string_ids_are_type_errors(bad):
    with pytest.raises(TypeError, match="env id"):
        names.resolve(bad)


def test_every_did_you_mean_suggests_by_one_rule():
    from torchwm.errors import closest_names, did_you_mean

    known = ["resize", "frame_skip", "frame_stack"]
    # An unknown name's error lists the close names best first, an unknown option's message the best one.
    assert closest_names("frame_stak", known) == ["frame_stack", "frame_skip"]
    error = UnknownNameError("wrapper", "frame_stak", known)
    assert "Did you mean 'frame_stack' or 'frame_skip'?" in str(error)
    assert did_you_mean("frame_stak", known) == " (did you mean 'frame_stack'?)"
    assert closest_names("pong", known) == [] and did_you_mean("pong", known) == ""


# Builds Pong through torchwm in this process (as `torchwm record` and users' scripts do), then asks ALE
# for a ROM that does not exist: ALE prints that error and ends the process.
BUILD_PONG_THEN_FAIL_IN_ALE = r"""
import numpy as np
import torchwm

env = torchwm.make_env("pong")
env.reset(seed=0)
env.close()
with torchwm.make_vec("pong", 2, backend="sync") as envs:
    envs.reset(seed=0)
    envs.step(np.zeros(2, dtype=np.int64))
print("built", flush=True)

import ale_py

ale_py.ALEInterface().loadROM("no-such-game.bin")
"""


def test_building_atari_envs_prints_no_ale_banner_but_ale_errors_still_show():
    # ALE writes its banner and its errors from C++ to the process's stdout/stderr: only a child shows them.
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", BUILD_PONG_THEN_FAIL_IN_ALE],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    said = done.stdout + done.stderr
    assert "built" in done.stdout, said
    assert "A.L.E" not in said and "Powered by Stella" not in said, said
    assert 'ROM file "no-such-game.bin" not found' in said, said  # ALE's errors are not hidden
