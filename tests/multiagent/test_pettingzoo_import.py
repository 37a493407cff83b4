"""Without PettingZoo, `torchwm.multiagent` says in one line which extra to install."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.pettingzoo_envs import scripted

import torchwm.multiagent as ma


def test_a_missing_pettingzoo_names_the_extra(monkeypatch):
    # None in sys.modules: importing it fails as it does where PettingZoo is not installed.
    monkeypatch.setitem(sys.modules, "pettingzoo.utils.env", None)
    with pytest.raises(ImportError, match=r"torchwm.multiagent needs PettingZoo, .*\[pettingzoo\]\"$"):
        ma.make_vec(scripted(), 1)


def test_importing_torchwm_multiagent_does_not_import_pettingzoo():
    code = "import sys, torchwm.multiagent; print('pettingzoo' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"
