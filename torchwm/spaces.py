"""The kinds of Gymnasium space torchwm handles as plain arrays.

A space in `ARRAY_SPACES` (Box, Discrete, MultiDiscrete, MultiBinary) batches into one NumPy array with a
leading env dimension, so a batch of it is written and read row by row as an array; every other space
(Dict, Tuple, Text, Graph, Sequence, ...) takes the general path. Wrappers, backends and integrations ask
this one question alike, so it sits below all of them.
"""

from __future__ import annotations

from gymnasium import spaces

ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
