"""`torchwm.integrations`: what the adapters share, the refusal of a vector env that steps only some of its
envs, for the libraries that step every env at each step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from torchwm.integrations import check_full_batch, full_batch_error


def vector_env(num_envs, batch_size=None, **unwrapped):
    inner = (
        SimpleNamespace(batch_size=batch_size, **unwrapped) if batch_size is not None else SimpleNamespace()
    )
    return SimpleNamespace(num_envs=num_envs, unwrapped=inner)


def test_a_partial_batch_is_refused_naming_the_adapter_and_the_fix():
    with pytest.raises(ValueError) as caught:
        check_full_batch(vector_env(4, batch_size=2), "SB3's VecEnv")
    assert (
        str(caught.value)
        == full_batch_error("SB3's VecEnv", 2, 4)
        == (
            "SB3's VecEnv steps every env at each step, but the vector env returns only batch_size=2 of its "
            "num_envs=4 envs per step: leave batch_size unset (or set it to 4)"
        )
    )


def test_a_full_batch_or_none_passes_and_multi_agent_envs_count_pettingzoo_envs():
    check_full_batch(vector_env(4, batch_size=4), "x")
    check_full_batch(vector_env(4), "x")
    # The agents layout: 6 rows of 3 envs of 2 agents, the batch counted in envs.
    check_full_batch(vector_env(6, batch_size=3, num_vector_envs=3), "x")
    with pytest.raises(ValueError, match="batch_size=2 of its num_envs=3"):
        check_full_batch(vector_env(6, batch_size=2, num_vector_envs=3), "x")
