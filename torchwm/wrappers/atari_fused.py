"""Placeholder: the fused Atari env (issue 4) replaces this."""


def build_fused_atari(spec):
    return None
