"""The tests of `torchwm.wrappers`, one file per module.

A package, so that a test file is named after its module where another module of torchwm has the same
name (``tests/wrappers/test_atari_stack.py`` is ``wrappers.test_atari_stack``, ``tests/test_atari_stack.py``
is ``test_atari_stack``).
"""
