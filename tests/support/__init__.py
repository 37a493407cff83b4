"""Helpers for torchwm's own tests (tests/ and the plugins' tests), not part of torchwm.

Imported as ``support`` (``from support.processes import process_running``): pytest puts tests/ on
``sys.path`` (``pythonpath`` in pyproject.toml), whichever test directory a test file is in. The scripts
the tests run in new processes (a Ctrl-C in the middle of a step, a forked copy of a vector env, the
Ray cluster's helper) import these helpers too, so tests/ also goes on ``PYTHONPATH`` for every process
started after this import.
"""

import os
from pathlib import Path

TESTS_DIR = str(Path(__file__).resolve().parent.parent)

if TESTS_DIR not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS_DIR, os.environ.get("PYTHONPATH")]))
