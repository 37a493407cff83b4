"""The hooks a torchwm plugin can implement.

Each hook receives a ``register`` callback, in the style of simonw/llm:
the plugin calls ``register(name, factory, override=False, **metadata)`` once
for each thing it provides. torchwm owns the collection, rejects duplicates
unless ``override=True``, and remembers which plugin registered each name.

A plugin is any module or object with functions marked ``@torchwm.hookimpl``,
loaded from the entry-point group ``torchwm``::

    # pyproject.toml of a plugin package
    [project.entry-points.torchwm]
    mybackend = "torchwm_mybackend"

An installed plugin whose import or hook fails is left out and reported once
(`torchwm.plugins.failed_plugins`); the rest of torchwm works.
"""

from __future__ import annotations

from typing import Any, Protocol

import pluggy

PROJECT_NAME = "torchwm"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Register(Protocol):
    """The callback every hook receives."""

    def __call__(self, name: str, factory: Any, *, override: bool = False, **metadata: Any) -> None: ...


@hookspec
def register_sources(register: Register) -> None:
    """Register env sources: how one env is made from an id.

    A source factory is ``factory(env_id: str, **env_kwargs) -> gymnasium.Env``.

    Example::

        @torchwm.hookimpl
        def register_sources(register):
            register("mysim", lambda env_id, **kw: MySimEnv(env_id, **kw))
    """


@hookspec
def register_backends(register: Register) -> None:
    """Register vector backends: how a VecSpec becomes a vector env.

    A backend factory is ``factory(spec: torchwm.VecSpec, **backend_kwargs) -> torchwm.VectorEnv``.
    It should refuse, before starting anything, a spec it cannot express
    (raise ``torchwm.errors.UnsupportedStackError``).

    Example::

        @torchwm.hookimpl
        def register_backends(register):
            register("threads", make_thread_vector_env, description="one thread per env")
    """


@hookspec
def register_wrappers(register: Register) -> None:
    """Register named, configurable wrappers.

    A wrapper factory is ``factory(env: gymnasium.Env, **options) -> gymnasium.Env``.
    Its keyword arguments, with their annotations and defaults, are the options a
    config file may set; torchwm checks names and types before building anything.
    Metadata ``env_kwargs={...}`` gives defaults the wrapped env needs (for example
    ``render_mode="rgb_array"``), and ``family="atari"`` restricts it to Atari envs.

    Example::

        @torchwm.hookimpl
        def register_wrappers(register):
            register("scale_reward", lambda env, factor=1.0: TransformReward(env, lambda r: r * factor))
    """
