"""`translate`: a VecSpec becomes EnvPool's task and every option, or a clear refusal."""

import envpool
import pytest
from torchwm_envpool.translate import translate

import torchwm.testing
from torchwm.errors import UnsupportedStackError
from torchwm.factory import resolve_spec

# Options that are EnvPool's pool plumbing, not the env's behaviour: set by the backend itself.
POOL_OPTIONS = {
    "num_envs",
    "batch_size",
    "num_threads",
    "max_num_players",
    "thread_affinity_offset",
    "base_path",
    "seed",
    "env_seed",
    "gym_reset_return_info",
    "task",
}


def spec(id="ALE/Pong-v5", wrappers=None, **env_kwargs):
    return resolve_spec(id, 2, backend="sync", wrappers=wrappers, env_kwargs=env_kwargs)


def test_the_standard_atari_stack_maps_onto_envpool_options():
    plan = translate(spec())
    assert plan.task_id == "Pong-v5"
    assert plan.kwargs == {
        "frame_skip": 4,
        "noop_max": 30,
        "img_height": 84,
        "img_width": 84,
        "gray_scale": True,
        "use_inter_area_resize": True,
        "stack_num": 4,
        "repeat_action_probability": 0.25,
        "full_action_space": False,
        "max_episode_steps": 27000,
        "mode": -1,
        "difficulty": -1,
        "zero_discount_on_life_loss": False,
        "episodic_life": False,
        "use_fire_reset": False,
        "reward_clip": False,
    }
    assert (plan.stack_size, plan.zero_padding, plan.squeeze_stack) == (4, True, False)


@pytest.mark.parametrize("task", ["Pong-v5", "CartPole-v1"])
def test_every_envpool_option_of_the_task_is_given_explicitly(task):
    plan = translate(spec() if task == "Pong-v5" else spec("CartPole-v1"))
    config = envpool.make_spec(task).config
    behaviour = set(config._fields) - POOL_OPTIONS - {"reward_threshold"}
    assert behaviour <= set(plan.kwargs), (
        f"left to EnvPool's defaults: {sorted(behaviour - set(plan.kwargs))}"
    )


def test_v4_ids_have_no_sticky_actions_and_options_follow_the_stack():
    plan = translate(
        spec(
            "PongNoFrameskip-v4",
            wrappers=[
                {"name": "atari_preprocessing", "noop_max": 7, "screen_size": 64},
                "episodic_life",
                "fire_reset",
                "clip_reward",
                {"name": "frame_stack", "stack_size": 2, "padding": "reset"},
            ],
        )
    )
    assert plan.kwargs["repeat_action_probability"] == 0.0
    assert (plan.kwargs["noop_max"], plan.kwargs["img_width"], plan.kwargs["stack_num"]) == (7, 64, 2)
    assert plan.kwargs["episodic_life"] and plan.kwargs["use_fire_reset"] and plan.kwargs["reward_clip"]
    assert not plan.zero_padding


def test_classic_control_takes_gymnasiums_time_limit():
    plan = translate(spec("CartPole-v1"))
    assert (plan.task_id, plan.kwargs) == ("CartPole-v1", {"max_episode_steps": 500})


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (
            {
                "wrappers": [
                    "atari_preprocessing",
                    "frame_stack",
                    {"name": "resize", "width": 32, "height": 32},
                ]
            },
            "resize",
        ),
        ({"wrappers": [{"name": "atari_preprocessing", "grayscale": False}]}, "grayscale=False"),
        ({"wrappers": [{"name": "atari_preprocessing", "scale_obs": True}]}, "scale_obs=True"),
        (
            {"wrappers": [{"name": "atari_preprocessing", "terminal_on_life_loss": True}]},
            "terminal_on_life_loss=True",
        ),
        ({"wrappers": ["atari_preprocessing", {"name": "clip_reward", "min_reward": -2.0}]}, "clip_reward"),
        ({"wrappers": ["frame_stack"], "frameskip": 4}, "does not start with atari_preprocessing"),
        ({"wrappers": ["atari_preprocessing", lambda env: env]}, "Python callable"),
        ({"obs_type": "ram"}, "obs_type"),
        ({"wrappers": ["atari_preprocessing", "episode_statistics"]}, "episode_statistics: EnvPool"),
    ],
)
def test_what_envpool_cannot_express_is_refused_by_name(given, named):
    wrappers = given.pop("wrappers", None)
    with pytest.raises(UnsupportedStackError, match="shmem") as caught:
        translate(spec(wrappers=wrappers, **given))
    assert named in str(caught.value)


def test_other_autoreset_modes_and_unknown_tasks_are_refused():
    with pytest.raises(UnsupportedStackError, match="autoreset_mode='same_step'"):
        translate(resolve_spec("ALE/Pong-v5", 2, backend="sync", autoreset_mode="same_step"))
    with pytest.raises(UnsupportedStackError, match="no task"):
        translate(spec(torchwm.testing.COUNTDOWN_ID))
    with pytest.raises(UnsupportedStackError, match="wrappers"):
        translate(spec("CartPole-v1", wrappers=[{"name": "pixels"}]))
