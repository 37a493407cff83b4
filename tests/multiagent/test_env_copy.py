"""`env_bytes`/`env_from_bytes`: a PettingZoo env saved whole, not rebuilt from its arguments."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pygame
import pytest

from torchwm.multiagent.env_copy import env_bytes, env_from_bytes


def _steps(env, n):
    out = []
    for t in range(n):
        actions = {a: (t + k) % 5 for k, a in enumerate(env.agents)}
        obs, rewards, *_ = env.step(actions)
        out.append(([obs[a] for a in sorted(obs)], [rewards[a] for a in sorted(rewards)]))
    return out


def test_a_copy_of_simple_spread_goes_on_as_the_env_itself():
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(max_cycles=50)
    env.reset(seed=3)
    _steps(env, 4)
    blob = env_bytes(env)
    copy = env_from_bytes(blob)
    np.testing.assert_equal(_steps(copy, 6), _steps(env, 6))
    # What plain pickling gives: a new env from EzPickle's arguments, not reset (why this module exists).
    assert not hasattr(pickle.loads(pickle.dumps(env)).unwrapped, "agent_selection")


def test_two_copies_share_nothing():
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(max_cycles=50)
    env.reset(seed=0)
    blob = env_bytes(env)
    first, second = env_from_bytes(blob), env_from_bytes(blob)
    _steps(first, 3)
    np.testing.assert_equal(_steps(second, 2), _steps(env_from_bytes(blob), 2))


def test_a_surface_keeps_its_pixels_format_alpha_and_colour_key():
    surface = pygame.Surface((5, 3), pygame.SRCALPHA, 32)
    surface.fill((10, 20, 30, 40))
    surface.set_at((1, 2), (200, 100, 50, 255))
    plain = pygame.Surface((4, 4))
    plain.fill((1, 2, 3))
    plain.set_colorkey((1, 2, 3))
    for original in (surface, plain):
        copy = env_from_bytes(env_bytes(original))
        assert copy.get_size() == original.get_size() and copy.get_flags() == original.get_flags()
        assert copy.get_bitsize() == original.get_bitsize() and copy.get_masks() == original.get_masks()
        assert copy.get_colorkey() == original.get_colorkey() and copy.get_alpha() == original.get_alpha()
        np.testing.assert_array_equal(pygame.surfarray.array3d(copy), pygame.surfarray.array3d(original))
        alpha = pygame.surfarray.array_alpha
        np.testing.assert_array_equal(alpha(copy), alpha(original))


def test_an_env_holding_what_cannot_be_pickled_raises_type_error_naming_it():
    class WithLock:
        def __init__(self):
            self.lock = threading.Lock()

    with pytest.raises(TypeError, match=r"cannot save the state of PettingZoo env WithLock: .*lock"):
        env_bytes(WithLock())


class _ModuleAsDescriptor(type):
    """A metaclass whose classes answer a non-string ``__module__``, as Cython's function type does on
    Python 3.10 (numpy's random methods held by an env)."""

    __module__ = property(lambda cls: None)  # type: ignore[assignment]


def test_an_object_whose_type_has_no_module_name_is_saved_too():
    held = _ModuleAsDescriptor("Held", (), {"__reduce__": lambda self: (list, ([1, 2],))})()
    assert type(held).__module__ is None
    env = {"held": held, "count": 3}
    assert env_from_bytes(env_bytes(env)) == {"held": [1, 2], "count": 3}
