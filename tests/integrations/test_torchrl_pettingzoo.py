"""`make_torchrl_env` over PettingZoo parallel envs (`PettingZooTorchRLEnv`), against TorchRL's own wrapper.

The reference is what a TorchRL user runs: ``SerialEnv(n, lambda: PettingZooWrapper(make(), **options))``
(the same data as TorchRL's ``ParallelEnv``, in one process). Both are given the same seeds (TorchRL's
``set_seed``) and the same actions (legal ones, drawn from the reference's ``action_mask``), and every key
of every reset and step must be equal, with the same shapes and dtypes: MPE's simple_spread (from
``mpe2``), and a scripted env with action masks whose agents die while their env goes on (``use_mask``,
``done_on_any``, one-hot actions, a ``group_map``). A TorchRL ``Collector`` on ``shmem`` collects what it
collects over ``SerialEnv``.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchrl")  # the [torchrl] extra
pytest.importorskip("mpe2")
import torch  # noqa: E402  (a dependency of torchrl)
from mpe2 import simple_spread_v3  # noqa: E402
from support.pettingzoo_envs import ScriptedEnv  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import SerialEnv  # noqa: E402
from torchrl.envs.libs.pettingzoo import PettingZooWrapper  # noqa: E402
from torchrl.envs.utils import step_mdp  # noqa: E402
from torchrl.modules import RandomPolicy  # noqa: E402

from torchwm.integrations.torchrl import make_torchrl_env  # noqa: E402
from torchwm.integrations.torchrl_pettingzoo import PettingZooTorchRLEnv  # noqa: E402

BACKENDS = {"sync": {}, "shmem": {"backend_kwargs": {"context": "fork"}}}


class LenientScriptedEnv(ScriptedEnv):
    """`ScriptedEnv` that ignores actions for agents no longer there: TorchRL's `PettingZooWrapper` sends
    every agent's action, as PettingZoo's own parallel envs accept."""

    def step(self, actions):
        return super().step({agent: a for agent, a in actions.items() if agent in self.agents})


def simple_spread():
    return simple_spread_v3.parallel_env(max_cycles=5)


def masked_dying(die_at=None):
    return LenientScriptedEnv(masked=True, die_at={"a_1": 2} if die_at is None else die_at, end_at=5)


def reference_env(make, num_envs: int, **options) -> SerialEnv:
    def one_env():
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested")
            return PettingZooWrapper(make(), **options)

    return SerialEnv(num_envs, one_env)


def assert_same(got, expected, when) -> None:
    assert set(got.keys(True, True)) == set(expected.keys(True, True)), when
    assert got.batch_size == expected.batch_size
    for key in expected.keys(True, True):
        a, b = got[key], expected[key]
        assert a.shape == b.shape and a.dtype == b.dtype, (when, key, a.shape, b.shape, a.dtype, b.dtype)
        assert torch.equal(a, b), (when, key, a, b)


def legal_actions(td, group_map, generator, one_hot: bool) -> dict:
    actions = {}
    for group in group_map:
        mask = td[group, "action_mask"] if (group, "action_mask") in td.keys(True, True) else None
        spec_n = td[group, "action_mask"].shape[-1] if mask is not None else 5
        weights = mask.reshape(-1, spec_n).float() if mask is not None else torch.ones(td[group].numel(), 5)
        index = torch.multinomial(weights, 1, generator=generator).reshape(td[group].batch_size)
        actions[group] = torch.nn.functional.one_hot(index, spec_n) if one_hot else index
    return actions


def compare_rollouts(make, backend: str, steps: int = 14, num_envs: int = 3, **options) -> int:
    """Reset and step both envs alike, resetting the envs that are done; return how many resets ran."""
    env = make_torchrl_env(make, num_envs, seed=0, backend=backend, **BACKENDS[backend], **options)
    reference = reference_env(make, num_envs, **options)
    try:
        assert isinstance(env, PettingZooTorchRLEnv) and env.batch_size == torch.Size([num_envs])
        reference.set_seed(0)
        got, expected = env.reset(), reference.reset()
        assert_same(got, expected, "reset")
        generator = torch.Generator().manual_seed(0)
        one_hot = options.get("categorical_actions") is False
        resets = 0
        for t in range(steps):
            for group, action in legal_actions(expected, env.group_map, generator, one_hot).items():
                got[group, "action"], expected[group, "action"] = action.clone(), action.clone()
            got, expected = env.step(got), reference.step(expected)
            assert_same(got, expected, f"step {t}")
            got, expected = step_mdp(got), step_mdp(expected)
            if expected["done"].any():
                resets += 1
                done = expected["done"].clone()
                got = env.reset(got.set("_reset", done.clone()))
                expected = reference.reset(expected.set("_reset", done.clone()))
                assert_same(got, expected, f"reset after step {t}")
        return resets
    finally:
        env.close()
        reference.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_simple_spread_equals_torchrls_pettingzoo_wrapper_in_a_serial_env(backend):
    assert compare_rollouts(simple_spread, backend) >= 2  # whole episodes, and the resets after them


@pytest.mark.parametrize(
    "options",
    [
        {"use_mask": True},  # done_on_any: an agent's end ends its env
        {"use_mask": True, "done_on_any": False},  # the others go on: the dead agent's rows and flags
        {
            "use_mask": True,
            "done_on_any": False,
            "categorical_actions": False,
            "group_map": {"pair": ["a_0", "a_2"], "single": ["a_1"]},
        },
        {},
    ],
    ids=["done_on_any", "done_on_all", "one_hot_group_map", "no_mask"],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_env_with_dying_agents_equals_torchrls_wrapper(backend, options):
    # "no_mask": no agent dies (TorchRL refuses dead agents without use_mask).
    make = masked_dying if options else _masked_no_deaths
    assert compare_rollouts(make, backend, **options) >= 2


def _masked_no_deaths():
    return masked_dying(die_at={})


def test_agents_that_die_while_the_env_goes_on_need_use_mask_as_in_torchrl():
    options = {"done_on_any": False}
    for env in (
        make_torchrl_env(masked_dying, 2, seed=0, **options),
        reference_env(masked_dying, 2, **options),
    ):
        td = env.reset()
        try:
            with pytest.raises(ValueError, match="you need to set use_mask=True"):
                for _ in range(3):
                    td["a", "action"] = torch.zeros(2, 3, dtype=torch.int64)
                    td = step_mdp(env.step(td))
        finally:
            env.close()


def test_collector_on_shmem_collects_what_it_collects_over_serial_env():
    batches = []
    for env in (
        make_torchrl_env(simple_spread, 4, backend="shmem", seed=1, backend_kwargs={"context": "fork"}),
        reference_env(simple_spread, 4),
    ):
        env.set_seed(1)
        torch.manual_seed(1)  # RandomPolicy draws its actions from torch's generator
        collector = Collector(env, RandomPolicy(env.full_action_spec), frames_per_batch=40, total_frames=80)
        batches.append([batch.clone() for batch in collector])
        collector.shutdown()  # closes the env too
        assert env.is_closed
    got, expected = batches
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e, "collector batch")
    assert expected[0]["next", "done"].any()  # episodes of 5 steps ended and were reset in the batches


def test_an_aec_env_is_refused_naming_parallel_env():
    with pytest.raises(TypeError, match=r"parallel_env\(\)"):
        make_torchrl_env(simple_spread_v3.env, 2)


def test_options_of_gym_wrapper_are_refused_naming_pettingzoo_wrappers():
    with pytest.raises(TypeError, match="categorical_actions"):
        make_torchrl_env(simple_spread, 2, categorical_action_encoding=True)
    with pytest.raises(TypeError, match=r"\['wrappers'\]"):
        make_torchrl_env(simple_spread, 2, wrappers=[])


def test_a_pettingzoo_env_instance_is_copied_into_each_env():
    env = make_torchrl_env(simple_spread(), 2, seed=3)
    reference = reference_env(simple_spread, 2)
    try:
        reference.set_seed(3)
        assert_same(env.reset(), reference.reset(), "reset")
        assert np.array_equal(env.group_map["agent"], ["agent_0", "agent_1", "agent_2"])
    finally:
        env.close()
        reference.close()


def training_page_recipe() -> str:
    """The Python block of "training.md"'s section on TorchRL with a PettingZoo env."""
    page = (Path(__file__).parents[2] / "docs" / "training.md").read_text()
    section = page.split("\n## Multi-agent: TorchRL on a PettingZoo env\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```", section, re.DOTALL | re.MULTILINE)
    return block


def test_training_page_recipe_collects_what_serial_env_of_pettingzoo_wrapper_collects():
    namespace: dict = {}
    exec(compile(training_page_recipe(), "docs/training.md (Multi-agent: TorchRL)", "exec"), namespace)
    assert namespace["env"].is_closed
    reference = reference_env(lambda: simple_spread_v3.parallel_env(max_cycles=25), 4)
    reference.set_seed(0)
    torch.manual_seed(0)
    collector = Collector(
        reference, RandomPolicy(reference.full_action_spec), frames_per_batch=200, total_frames=400
    )
    expected = [batch["next", "agent", "reward"].sum().item() for batch in collector]
    collector.shutdown()
    assert namespace["team_rewards"] == expected and len(expected) == 2
