"""The fault tests' fixtures: the backends each test runs on (Ray's too, when its plugin is installed,
with one local Ray per test module), and a bound on every test, so that a backend that wedges fails its
test instead of hanging the run."""

from __future__ import annotations

import os
import signal

import fault_envs
import pytest
from fault_envs import BACKENDS


@pytest.fixture(scope="module")
def ray_instance(request):
    """One local Ray for the module (when Ray is tested), as the plugin's own tests start it."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import ray.cloudpickle

    # Ray pickles with its own copy of cloudpickle: the envs' module and the test module go by value.
    ray.cloudpickle.register_pickle_by_value(fault_envs)
    ray.cloudpickle.register_pickle_by_value(request.module)
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False
    )
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    return request.param


@pytest.fixture(autouse=True)
def no_wedge():
    """Fail a test that does not finish within a bound (a backend that wedges), instead of hanging the run."""

    def give_up(signum, frame):
        raise TimeoutError("the test did not finish within 120 s: something wedged")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
