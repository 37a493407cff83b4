"""The tests of `torchwm.testing`, the conformance kit, one file per module (the kit run on every backend
is ``tests/conformance``).

A package, so that a test file is named after its module where another module of torchwm has the same
name (``tests/testing/test_envs.py`` is ``testing.test_envs``, ``tests/test_envs.py`` is ``test_envs``).
"""
