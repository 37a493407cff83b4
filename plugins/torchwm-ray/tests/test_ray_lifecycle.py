"""Who stops Ray: the ``ray`` backend stops a local Ray it started, never one it found running."""

import ray

import torchwm


def test_a_ray_started_by_the_env_stops_when_it_closes():
    assert not ray.is_initialized()
    envs = torchwm.make_vec("CartPole-v1", 2, backend="ray", seed=0, backend_kwargs={"num_actors": 2})
    try:
        assert ray.is_initialized()
        envs.reset()
    finally:
        envs.close()
    assert not ray.is_initialized()


def test_a_ray_the_env_found_running_is_left_running():
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    try:
        with torchwm.make_vec(
            "CartPole-v1", 2, backend="ray", seed=0, backend_kwargs={"num_actors": 2}
        ) as envs:
            envs.reset()
        assert ray.is_initialized()
    finally:
        ray.shutdown()
