"""The tests of `torchwm.multiagent`, one file per module.

A package, so that a test file is named after its module where another module of torchwm has the same
name (``tests/multiagent/test_sources.py`` is ``multiagent.test_sources``, ``tests/test_sources.py`` is
``test_sources``); its helpers are imported by their package name (``multiagent.aec_envs``), which
worker processes import too when they unpickle the envs a test defines.
"""
