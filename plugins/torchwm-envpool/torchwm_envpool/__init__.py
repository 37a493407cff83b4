"""torchwm-envpool: the ``envpool`` backend, torchwm specs run by EnvPool's C++ thread pool.

Quick start (a plugin author's view of this package). Install it beside torchwm; the backend
is found through the entry-point group ``torchwm`` and torchwm itself knows nothing of EnvPool::

    pip install . ./plugins/torchwm-envpool  # with the core, from the checkout's root
    torchwm list                             # shows: envpool  (torchwm-envpool 0.1.0)

Then::

    import torchwm

    envs = torchwm.make_vec("ALE/Pong-v5", num_envs=8, backend="envpool", seed=0,
                            backend_kwargs={"num_threads": 2})
    obs, infos = envs.reset()                # (8, 4, 84, 84) uint8, the standard Atari stack
    obs, rewards, terminations, truncations, infos = envs.step(envs.action_space.sample())
    envs.close()

The backend translates the `torchwm.VecSpec` into `envpool.make_gymnasium(...)` with every
option explicit (`torchwm_envpool.translate`): Atari ids under ``atari_preprocessing``,
``frame_stack``, ``episodic_life``, ``fire_reset`` and ``clip_reward(-1, 1)``, and EnvPool's
classic-control tasks (``CartPole-v1``, ...) without wrappers. Anything else is refused with
`torchwm.errors.UnsupportedStackError` before a pool is made. How it differs from the Python
backends (its own RNG streams, next-step autoreset only, seeds fixed per pool) is registered
below as conformance metadata, which `torchwm.testing` reads.
"""

from __future__ import annotations

from torchwm.plugin_api import VecSpec, VectorEnv, hookimpl

__version__ = "0.1.0"

DIFFERENCES = {
    "check_autoreset_same_step": "EnvPool autoresets an ended env on its next step only "
    "(autoreset_mode='next_step')",
    "check_autoreset_disabled": "EnvPool autoresets an ended env on its next step only "
    "(autoreset_mode='next_step')",
    "check_matches_sync": "EnvPool's C++ envs draw no-ops and sticky actions from their own RNG, so the same "
    "seed gives other episodes than Gymnasium's AtariPreprocessing (without randomness, "
    "noop_max=1 and no sticky actions, the arrays are equal: see the plugin's tests)",
    "check_partial_and_async": "it seeds one env alone (reset(env_ids=[2], seed=40)), and EnvPool fixes "
    "seeds per pool; env_ids and send/recv themselves are tested by the plugin's tests",
    "check_restore_state": "EnvPool's C++ envs have no per-env state to clone or restore",
    "check_a_damaged_state_changes_no_env": "no per-env state to restore (see check_restore_state)",
    "check_restore_after_a_restart_steps_the_restored_state": "no per-env state to restore",
    "check_clone_after_a_restart_names_the_lost_episode": "no per-env state to clone",
    **{
        name: "EnvPool builds its envs from an env id in C++: it cannot run PettingZoo envs, which "
        "torchwm.multiagent gives backends as factories"
        for name in (
            "check_multiagent_layouts_match_sync",
            "check_multiagent_env_ids",
            "check_multiagent_restart_announces_every_lost_episode",
            "check_multiagent_restore_state",
        )
    },
}


def make_envpool_vector_env(
    spec: VecSpec,
    *,
    num_threads: int = 0,
    thread_affinity_offset: int = -1,
    batch_size: int | None = None,
    timeout: float | None = None,
    copy: bool = True,
) -> VectorEnv:
    """The backend factory; the options are those of `torchwm_envpool.vector_env.EnvPoolVectorEnv`."""
    from torchwm_envpool.vector_env import EnvPoolVectorEnv

    return EnvPoolVectorEnv(
        spec,
        num_threads=num_threads,
        thread_affinity_offset=thread_affinity_offset,
        batch_size=batch_size,
        timeout=timeout,
        copy=copy,
    )


def make_envpool_direct(spec: VecSpec, *, num_threads: int = 0, thread_affinity_offset: int = -1) -> object:
    """EnvPool called directly with the backend's options (`torchwm_envpool.direct.EnvPoolDirect`)."""
    from torchwm_envpool.direct import EnvPoolDirect

    return EnvPoolDirect(spec, num_threads=num_threads, thread_affinity_offset=thread_affinity_offset)


@hookimpl
def register_backends(register):
    register(
        "envpool",
        make_envpool_vector_env,
        description=(
            "EnvPool's C++ thread pool: Atari under the standard stack, classic control (torchwm-envpool)"
        ),
        # The conformance kit checks this backend on Pong: EnvPool cannot run its Python check env.
        family="atari",
        conformance={"skip": DIFFERENCES},
        # `torchwm bench --backends envpool,envpool-direct`: the same pool without torchwm's layer.
        bench_peers={"envpool-direct": make_envpool_direct},
    )
