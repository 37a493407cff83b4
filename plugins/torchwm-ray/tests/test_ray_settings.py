"""How steps travel (`StepPath`) and the settings' repr, without starting Ray: the words ``repr(envs)``
shows after ``steps=`` come from the enum, one member for each way and reason."""

from types import SimpleNamespace

import pytest
from torchwm_ray.placement import ActorPlacement
from torchwm_ray.settings import RAY_OPTIONS, RaySettings, StepPath, choose_step_path


def pool(restart_on_crash=False, batch_size=None):
    return SimpleNamespace(restart_on_crash=restart_on_crash, batch_size=batch_size)


@pytest.mark.parametrize(
    ("options", "shared_memory", "pool_settings", "path", "words"),
    [
        ({}, True, pool(), StepPath.SHARED_MEMORY, "shared memory (every actor on this node)"),
        ({}, False, pool(), StepPath.COMPILED_GRAPH, "compiled graph"),
        ({}, False, pool(batch_size=4), StepPath.COMPILED_GRAPH, "compiled graph"),
        (
            {"compiled_graph": False},
            False,
            pool(),
            StepPath.ACTOR_CALLS_ASKED,
            "actor calls (compiled_graph=False)",
        ),
        (
            {},
            False,
            pool(restart_on_crash=True),
            StepPath.ACTOR_CALLS_RESTARTS,
            "actor calls (restart_on_crash=True)",
        ),
        ({}, False, pool(batch_size=2), StepPath.ACTOR_CALLS_BATCHES, "actor calls (batch_size < num_envs)"),
    ],
)
def test_each_way_steps_travel_has_its_reason(options, shared_memory, pool_settings, path, words):
    chosen = choose_step_path({**RAY_OPTIONS, **options}, shared_memory, 4, pool_settings)
    assert chosen is path
    assert str(chosen) == words


def test_ray_client_words_are_those_the_docs_quote():
    path = StepPath.ACTOR_CALLS_RAY_CLIENT
    assert (path.carrier, path.reason) == ("actor calls", "Ray Client: no compiled graph")
    assert str(path) == "actor calls (Ray Client: no compiled graph)"


def test_the_settings_show_how_steps_travel_and_cannot_change():
    settings = RaySettings(
        address=None,
        steps=StepPath.SHARED_MEMORY,
        placement=ActorPlacement.check(None, None),
        max_restarts=0,
        init_kwargs={"num_cpus": 2},
        stop_ray_on_close=True,
        timeout=120.0,
    )
    assert repr(settings) == (
        "RaySettings(address=None, steps='shared memory (every actor on this node)', "
        "placement=ActorPlacement(per_actor=None, common={}, strategy=None), max_restarts=0, "
        "stop_ray_on_close=True, timeout=120.0)"
    )
    with pytest.raises(AttributeError):
        settings.steps = StepPath.COMPILED_GRAPH  # configuration: what changes is in the env's RayGroup
