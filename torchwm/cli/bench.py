"""``torchwm bench``: the command `torchwm.bench.command` declares (its arguments and what it does),
registered with the command line here: the command line calls down into the bench, never the other way, so
that ``python -m torchwm.bench`` runs the same command without it."""

from torchwm.bench.command import register

__all__ = ["register"]
