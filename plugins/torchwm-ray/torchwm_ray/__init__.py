"""torchwm-ray: the ``ray`` backend, torchwm envs on Ray actors, on one machine or a cluster.

Quick start (a plugin author's view of this package). Install it beside torchwm and the backend
is found through the entry-point group ``torchwm``; torchwm itself knows nothing of Ray::

    pip install . ./plugins/torchwm-ray     # from the checkout's root
    torchwm list                            # shows: ray  (torchwm-ray 0.1.0)

Then::

    import torchwm

    envs = torchwm.make_vec(
        "ALE/Pong-v5", num_envs=8, backend="ray", seed=0,
        backend_kwargs={"num_actors": 2, "envs_per_actor": 4},   # RAY_ADDRESS set: on that cluster
    )
    obs, infos = envs.reset()
    obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    envs.close()

Each Ray actor hosts several envs and steps them with torchwm's own worker loop
(`torchwm.plugin_api.EnvGroup`) over envs built by `torchwm.plugin_api.build_env`, so it
gives the same arrays as the ``sync`` backend for the same seed. On a Ray of one node (this machine's),
steps, resets and calls go through a shared block and a socket as on ``shmem`` (``shared_memory``);
across nodes a step of all envs goes through a Ray Compiled Graph (``compiled_graph=True``, the
default) and everything else is an actor call. The plugin is
this module's one hook below; importing Ray waits until a ``ray`` env is actually made, so installing the
plugin costs other backends nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchwm.plugin_api import VecSpec, hookimpl

if TYPE_CHECKING:
    from torchwm_ray.vector_env import RayVectorEnv

__version__ = "0.1.0"


def make_ray_vector_env(
    spec: VecSpec,
    *,
    num_actors: int | None = None,
    envs_per_actor: int | None = None,
    address: str | None = None,
    actor_options: dict[str, Any] | list[dict[str, Any]] | None = None,
    placement: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    restart_on_crash: bool = False,
    max_restarts: int = 3,
    init_kwargs: dict[str, Any] | None = None,
    stop_ray_on_close: bool = True,
    compiled_graph: bool = True,
    shared_memory: bool | None = None,
    batch_size: int | None = None,
    timeout: float | None = 120.0,
    copy: bool = True,
    env_fn: Any = None,
    observation_mode: Any = "same",
) -> RayVectorEnv:
    """The backend factory; the options are those of `torchwm_ray.vector_env.RayVectorEnv`.

    Spelled out here (not ``**kwargs``) so that ``torchwm list`` shows them without importing Ray.
    """
    from torchwm_ray.vector_env import RayVectorEnv

    return RayVectorEnv(
        spec,
        num_actors=num_actors,
        envs_per_actor=envs_per_actor,
        address=address,
        actor_options=actor_options,
        placement=placement,
        runtime_env=runtime_env,
        restart_on_crash=restart_on_crash,
        max_restarts=max_restarts,
        init_kwargs=init_kwargs,
        stop_ray_on_close=stop_ray_on_close,
        compiled_graph=compiled_graph,
        shared_memory=shared_memory,
        batch_size=batch_size,
        timeout=timeout,
        copy=copy,
        env_fn=env_fn,
        observation_mode=observation_mode,
    )


@hookimpl
def register_backends(register):
    register(
        "ray",
        make_ray_vector_env,
        description="Ray actors, several envs each, on this machine or a Ray cluster (torchwm-ray)",
        # The conformance suite makes many small envs one after another: keep the local Ray
        # instance between them rather than paying its start (seconds) for every env.
        # The default wire of a one-node Ray (a shared block); Ray's own channels have the cluster tests.
        conformance={"variants": [{"stop_ray_on_close": False}]},
    )
