"""`AgentSpaces`: the agents' spaces read, split and padded as SuperSuit pads them."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from torchwm.multiagent.agent_spaces import AgentSpaces


def test_boxes_are_padded_with_supersuits_bounds_and_discretes_to_the_largest_n():
    from supersuit.utils.action_transforms.homogenize_ops import homogenize_spaces

    boxes = [spaces.Box(-2, 3, (2, 3), np.float32), spaces.Box(0, 5, (4, 1), np.float32)]
    read = AgentSpaces.read(
        ["x", "y"],
        {"x": boxes[0], "y": boxes[1]},
        {"x": spaces.Discrete(2), "y": spaces.Discrete(5)},
        pad_spaces=True,
    )
    assert read.shared_observation_space == homogenize_spaces(boxes)
    assert read.shared_action_space == spaces.Discrete(5)
    np.testing.assert_array_equal(read.padded_masks["x"], [1, 1, 0, 0, 0])
    assert read.env_action("x", 4) == 0 and read.env_action("y", 4) == 4  # SuperSuit's padded-action rule


def test_without_padding_differing_agents_are_stacked_by_agent():
    read = AgentSpaces.read(
        ["x", "y"],
        {"x": spaces.Box(0, 1, (2,)), "y": spaces.Box(0, 1, (3,))},
        {"x": spaces.Discrete(2), "y": spaces.Discrete(2)},
    )
    assert read.shared_observation_space is None and read.mask_size is None
    assert read.stacked_observation_space() == spaces.Dict(
        {"x": spaces.Box(0, 1, (2,)), "y": spaces.Box(0, 1, (3,))}
    )
    assert read.stacked_action_space() == spaces.MultiDiscrete([2, 2])


def test_masked_observations_are_split_into_observation_and_action_mask():
    space = spaces.Dict(
        {"observation": spaces.Box(0, 1, (3, 3, 2), np.int8), "action_mask": spaces.Box(0, 1, (9,), np.int8)}
    )
    read = AgentSpaces.read(
        ["p1", "p2"], {"p1": space, "p2": space}, dict.fromkeys(["p1", "p2"], spaces.Discrete(9))
    )
    assert read.masked and read.mask_size == 9
    assert read.env_observation_space()["action_mask"] == spaces.Box(0, 1, (2, 9), np.int8)
    assert read.env_observation_space()["obs"].shape == (2, 3, 3, 2)


@pytest.mark.parametrize(
    ("space", "words"),
    [(spaces.Text(5), "fixed-shape arrays"), (spaces.Box(0, 1, (2, 2)), "one rank")],
)
def test_spaces_it_cannot_carry_or_pad_are_refused(space, words):
    with pytest.raises(ValueError, match=words):
        AgentSpaces.read(
            ["x", "y"],
            {"x": space, "y": spaces.Box(0, 1, (3,))},
            dict.fromkeys("xy", spaces.Discrete(2)),
            pad_spaces=True,
        )


def test_batched_equals_gymnasium_s_batch_space():
    from gymnasium.vector.utils import batch_space

    from torchwm.multiagent.agent_spaces import batched

    uniform = spaces.Box(0, 255, (4, 5, 3), dtype=np.uint8)
    varying = spaces.Box(np.arange(6, dtype=np.float32), 10.0, dtype=np.float32)
    for space in (uniform, varying, spaces.Discrete(3), spaces.Dict({"a": uniform})):
        assert batched(space, 7) == batch_space(space, 7)


def test_envs_of_one_process_share_their_spaces():
    # make_vec gives every AgentsEnv the layout it read, so a vector env's check that its envs' spaces are
    # equal finds them identical (for image observations, comparing them elementwise took seconds).
    from support.pettingzoo_envs import scripted

    import torchwm.multiagent as ma

    with ma.make_vec(scripted(), 3) as envs:
        observation_spaces = envs.inner.get_attr("observation_space")
        assert observation_spaces[0] is observation_spaces[1] is observation_spaces[2]
