"""`torchwm.multiagent.inner_env`: what both layouts forward to the torchwm vector env under them, the same in
``agents`` and ``parallel``: ``env_ids`` that name PettingZoo envs, one attribute value per env, ``recv``
past its deadline, closing."""

from __future__ import annotations

import numpy as np
import pytest

import torchwm.multiagent as ma
from torchwm.testing.multiagent_envs import countdown_agents

SHMEM = {"num_workers": 1}


@pytest.mark.parametrize("layout", ["agents", "parallel"])
def test_env_ids_name_pettingzoo_envs_and_attributes_are_one_value_per_env(layout):
    envs = ma.make_vec([countdown_agents()] * 3, 3, layout=layout, seed=0)
    with envs:
        envs.reset()
        assert repr(envs).startswith(
            f"{type(envs).__name__}(3 envs x {envs.num_agents_per_env} agents, inner="
        )
        envs.set_attr("torchwm_probe", [1, 2, 3])
        envs.set_attr("torchwm_probe", [9, 7], env_ids=[2, 0])
        assert envs.get_attr("torchwm_probe") == (7, 2, 9)
        assert envs.get_attr("torchwm_probe", env_ids=[1, 2]) == (2, 9)
        for bad in ([3], [-1], [0.5]):
            with pytest.raises(ValueError, match=r"env_ids name PettingZoo envs: ints in \[0, 3\), got"):
                envs.step(None, env_ids=bad)  # refused before the actions are read
    assert envs.closed and envs.inner.closed
    envs.close()  # a second close is quiet
    assert envs.closed


@pytest.mark.parametrize("layout", ["agents", "parallel"])
def test_recv_past_its_deadline_raises_timeout_and_the_step_stays_in_flight(layout):
    from torchwm.testing.multiagent_envs import arm, countdown_agents

    fns = [countdown_agents()] * 2
    with (
        ma.make_vec(fns, 2, layout=layout, backend="shmem", backend_kwargs=SHMEM, seed=0) as envs,
        ma.make_vec(fns, 2, layout=layout, seed=0) as ref,
    ):
        envs.reset()
        ref.reset()
        actions = np.array([1, 2, 0, 2, 2, 1])
        if layout == "parallel":
            actions = {a: actions.reshape(2, 3)[:, k] for k, a in enumerate(envs.agents)}
        want = ref.step(actions)
        envs.call(arm, "delay", 1.5, env_ids=[1])
        envs.send(actions)
        with pytest.raises(TimeoutError):
            envs.recv(timeout=0.2)
        assert envs.in_flight_ids == [0, 1]
        got = envs.recv(timeout=60)
        assert envs.in_flight_ids == []
        for part, expected in zip(got[:4], want[:4]):
            if layout == "parallel":
                for agent in envs.agents:
                    np.testing.assert_array_equal(part[agent], expected[agent])
            else:
                np.testing.assert_array_equal(part, expected)
