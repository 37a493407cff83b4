"""The tests of `torchwm.bench`, one file per module.

A package, so that a test file is named after its module where a module of `torchwm.cli` has the same
name (``tests/bench/test_run.py`` is ``bench.test_run``, ``tests/cli/test_run.py`` is ``test_run``); its
helpers are imported by their package name (``bench.cpuinfo``).
"""
