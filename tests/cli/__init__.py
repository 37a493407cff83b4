"""Tests of the ``torchwm`` commands, a file per command; a package, so that ``test_bench`` here and
``tests/test_bench.py`` (the bench's own) are two modules."""
