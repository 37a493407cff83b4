"""`torchwm.atari_stack`: the earlier path of `torchwm.wrappers.atari_stack`, whose names it keeps (the
parser's own tests are tests/wrappers/test_atari_stack.py)."""

from __future__ import annotations

import torchwm.atari_stack
import torchwm.wrappers.atari_stack


def test_every_name_of_the_earlier_path_is_the_parsers_own_object():
    assert set(torchwm.atari_stack.__all__) == {
        "LAYERS",
        "PATH_LIMITS",
        "AtariStack",
        "parse_atari_stack",
        "parse_for",
        "path_refusal",
    }
    for name in torchwm.atari_stack.__all__:
        assert getattr(torchwm.atari_stack, name) is getattr(torchwm.wrappers.atari_stack, name), name
