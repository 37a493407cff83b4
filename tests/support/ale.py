"""What torchwm's own tests of the ``ale-native`` backend share."""

from __future__ import annotations

from torchwm.factory import resolve_spec
from torchwm.vector.ale_native_spec import ale_vector_kwargs

# make_vec's arguments that are the spec's own; the rest are the env's keyword arguments.
SPEC_ARGS = ("wrappers", "seed", "autoreset_mode", "source", "size", "backend_kwargs")


def kwargs_of(env_id, num_envs=2, **make_kwargs):
    """The AtariVectorEnv kwargs of ``make_vec(env_id, num_envs, backend="ale-native", **make_kwargs)``."""
    spec_args = {k: v for k, v in make_kwargs.items() if k in SPEC_ARGS}
    env_kwargs = {k: v for k, v in make_kwargs.items() if k not in SPEC_ARGS}
    spec = resolve_spec(env_id, num_envs, backend="ale-native", env_kwargs=env_kwargs, **spec_args)
    return ale_vector_kwargs(spec, **spec.backend_kwargs)
