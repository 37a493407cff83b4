"""The package `torchwm.multiagent`: its config loaders are imported on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import torchwm.multiagent as ma


def test_the_config_loaders_are_imported_on_first_use():
    code = (
        "import sys, torchwm.multiagent as ma; before = 'torchwm.config' in sys.modules; "
        "ma.load_config; print(before, 'torchwm.config' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.split() == ["False", "True"]


def test_the_lazy_names_are_the_config_module_s_and_others_are_no_attribute():
    import torchwm.multiagent.config as config

    assert ma.load_config is config.load_config
    assert ma.make_vec_from_config is config.make_vec_from_config
    with pytest.raises(AttributeError, match="module 'torchwm.multiagent' has no attribute 'load_confg'"):
        ma.load_confg  # noqa: B018
