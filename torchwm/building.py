"""Building the envs of a spec: what a worker runs, and what a vector backend asks for.

`build_env` makes one env of a `VecSpec` (the fused Atari env if ``spec.fused``, else the source then
each wrapper), `spec_env_fns` one picklable factory per env of a spec, `build_envs` calls such factories
(and closes what it built if one fails), `check_single_env` refuses a PettingZoo env or a vector env where
one env is expected, `check_distinct_envs` refuses a factory that hands out one env
twice. Every Python backend builds its envs here, in whichever process
they live, so that one spec means one env everywhere.

This module sits under `torchwm.vector` (the pool and the transports import it) and above nothing that
turns a user's words into a spec (`torchwm.factory`, `torchwm.config`): a worker that builds its envs
imports it, the registry it looks names up in, and the sources and wrappers the spec names, never
``make_vec``'s checks.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from torchwm.errors import UnsupportedStackError
from torchwm.plugins import RegistrySnapshot, registry, using_snapshot
from torchwm.spec import VecSpec

if TYPE_CHECKING:
    import gymnasium as gym

# Wrappers that only watch the env (they change no observation, reward or flag): at the end of a stack they
# wrap the fused Atari env as they would the wrapper chain, so they do not turn the fused env off.
RECORDERS = ("record_video",)


def without_recorders(spec: VecSpec) -> tuple[VecSpec, tuple[Any, ...]]:
    """``spec`` without the recorders that end its stack, and those recorders."""
    wrappers = list(spec.wrappers)
    recorders: list[Any] = []
    while wrappers and wrappers[-1].name in RECORDERS:
        recorders.insert(0, wrappers.pop())
    return spec.replace(wrappers=tuple(wrappers)), tuple(recorders)


def build_env(spec: VecSpec, index: int | None = None, snapshot: RegistrySnapshot | None = None) -> gym.Env:
    """One env of ``spec`` (env ``index`` of its vector env): the fused Atari env if ``spec.fused``, else
    source then wrappers; for a spec of factories (``spec.env_fns``: `torchwm.make_vec_from_fns`,
    `torchwm.multiagent.make_vec`), what factory ``index`` makes, so that a backend that builds env ``i``
    with ``build_env(spec, i)`` runs factories too. ``snapshot`` (`registry_snapshot`) holds the source and
    wrappers already looked up, so that a worker process builds the env without loading plugins.

    Raises:
        ValueError: a spec of factories and no ``index`` of one of them.
    """
    if spec.env_fns is not None and (
        isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(spec.env_fns)
    ):
        # Its id ("<env_fns ...>") names no env a source could make: only a factory builds one.
        raise ValueError(
            f"build_env: this spec builds its envs with {len(spec.env_fns)} factories (env_fns); give the "
            f"index of the env to build, from 0 to {len(spec.env_fns) - 1}, got index={index!r}"
        )
    # Not at the top: the wrappers package imports every built-in wrapper (pydantic, OpenCV), which importing
    # a transport does not need; building an env does.
    from torchwm.wrappers.env_index import env_index_var

    token = env_index_var.set(index)
    try:
        if spec.env_fns is not None:
            return spec.env_fns[index]()  # type: ignore[index]
        with using_snapshot(snapshot):
            return _build_env(spec)
    finally:
        env_index_var.reset(token)


def _build_env(spec: VecSpec) -> gym.Env:
    if spec.fused:
        from torchwm.wrappers.atari_fused import build_fused_atari, unfusable_reason

        core, recorders = without_recorders(spec)
        fused = build_fused_atari(core)
        if fused is None:
            raise UnsupportedStackError(
                f"the spec says fused=True, but the fused env cannot run it: {unfusable_reason(core)}"
            )
        for wrapper in recorders:
            fused = wrapper.apply(fused)
        return fused
    env = registry("source").get(spec.source).factory(spec.id, **spec.env_kwargs)
    for wrapper in spec.wrappers:
        env = wrapper.apply(env)
    return env


def registry_snapshot(spec: VecSpec) -> RegistrySnapshot:
    """The source and wrapper entries building an env of ``spec`` looks up, for `build_env`."""
    return RegistrySnapshot.of(
        {"source": [spec.source], "wrapper": [w.name for w in spec.wrappers if w.fn is None]}
    )


def env_fn(spec: VecSpec) -> functools.partial:
    """A picklable no-argument function that builds one env of ``spec``."""
    return functools.partial(build_env, spec)


def spec_env_fns(spec: VecSpec) -> list[Callable[[], gym.Env]]:
    """One no-argument factory per env of ``spec``: its ``env_fns``, or `build_env` of it."""
    if spec.env_fns is not None:
        return list(spec.env_fns)
    snapshot = registry_snapshot(spec)
    return [functools.partial(build_env, spec, index=i, snapshot=snapshot) for i in range(spec.num_envs)]


def build_envs(env_fns: Sequence[Callable[[], gym.Env]]) -> list[gym.Env]:
    """One env of each factory, in order, checked distinct (`check_distinct_envs`). If a factory or the
    check raises, the envs built so far are closed, so that a failed start leaves no env open (ALE and
    MuJoCo hold native resources until closed), and the error goes on."""
    envs: list[gym.Env] = []
    with closed_on_failure(envs):
        for fn in env_fns:
            envs.append(fn())
            check_single_env(envs[-1], "an env factory returned")
        check_distinct_envs(envs)
    return envs


def check_single_env(value: Any, what: str) -> None:
    """TypeError if ``value`` is a multi-agent PettingZoo env (naming `torchwm.multiagent.make_vec`) or a
    vector env (Gymnasium's, SuperSuit's, SB3's), where a vector env needs one single-agent env: seen here,
    at construction, rather than as an error of spaces or of reset further on. ``what`` says where
    ``value`` came from (``"an env factory returned"``)."""
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    pettingzoo = sys.modules.get("pettingzoo.utils.env")  # loaded if value is a PettingZoo env
    if pettingzoo is not None and isinstance(value, (pettingzoo.ParallelEnv, pettingzoo.AECEnv)):
        raise TypeError(
            f"{what} a PettingZoo env ({name}), but this vector env steps single-agent gymnasium.Env envs; "
            f"vectorize PettingZoo envs with torchwm.multiagent.make_vec(env, num_envs, backend=...)"
        )
    import gymnasium as gym

    if isinstance(value, gym.vector.VectorEnv) or (
        not isinstance(value, gym.Env) and hasattr(value, "num_envs") and hasattr(value, "step_wait")
    ):
        raise TypeError(
            f"{what} a vector env ({name}), but each env of a vector env must be one gymnasium.Env; give "
            f"factories of single envs (for PettingZoo envs: torchwm.multiagent.make_vec)"
        )


@contextlib.contextmanager
def closed_on_failure(envs: Sequence[gym.Env]) -> Iterator[None]:
    """Closes ``envs`` (as many as it holds when the error comes) if the block raises, then lets the error
    go on; an env's own error on closing is dropped, as the first error is the one to report."""
    try:
        yield
    except BaseException:
        for env in envs:
            try:
                env.close()
            except Exception:
                pass
        raise


def check_distinct_envs(envs: Sequence[gym.Env]) -> None:
    """ValueError (SB3's DummyVecEnv's type and first sentence) if two of ``envs`` are one env: a factory that
    returns the same instance every time. Only envs built in one process can be compared."""
    seen: dict[int, int] = {}
    for i, env in enumerate(envs):
        first = seen.setdefault(id(env.unwrapped), i)
        if first != i:
            raise ValueError(
                "You tried to create multiple environments, but the function to create them returned the "
                f"same instance instead of creating different objects (envs {first} and {i} are one env). "
                "Each env factory must build a new env every time it is called, e.g. "
                "`lambda: gym.make(...)`, not `lambda: env`"
            )
