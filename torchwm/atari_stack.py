"""``torchwm.atari_stack``: the old path of `torchwm.wrappers.atari_stack`, the Atari stack parser.

The parser reads a spec's wrappers and imports them, so it lives in the wrappers package (the fused env
there uses it, and nothing in the package imports upward). Code written against earlier releases imports
it from here (``from torchwm.atari_stack import parse_atari_stack``), so these names stay.
"""

from torchwm.wrappers.atari_stack import (
    LAYERS,
    PATH_LIMITS,
    AtariStack,
    parse_atari_stack,
    parse_for,
    path_refusal,
)

__all__ = ["LAYERS", "PATH_LIMITS", "AtariStack", "parse_atari_stack", "parse_for", "path_refusal"]
