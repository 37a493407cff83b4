"""Which env of its vector env is being built, for a wrapper that acts on some envs only.

`torchwm.factory.build_env` sets the index while it builds one env (every backend builds its envs through
it, in whichever process they live); a wrapper factory reads it with `current_env_index` (``record_video``
records only the envs named in ``env_ids``). It lives beside the wrappers, so that a wrapper never imports
the factory that applies it.
"""

from __future__ import annotations

import contextvars

env_index_var: contextvars.ContextVar[int | None] = contextvars.ContextVar("torchwm_env_index", default=None)


def current_env_index() -> int | None:
    """The index in its vector env of the env being built (for a wrapper factory), or None outside one."""
    return env_index_var.get()
