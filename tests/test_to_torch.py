"""ToTorch: tensors out, tensor actions in (torch is an optional extra)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torchwm  # noqa: E402
from torchwm.to_torch import ToTorch  # noqa: E402


def test_tensors_match_the_numpy_arrays():
    plain = torchwm.make_vec("CartPole-v1", 2, seed=0)
    wrapped = ToTorch(torchwm.make_vec("CartPole-v1", 2, seed=0))
    try:
        obs, _ = wrapped.reset()
        ref, _ = plain.reset()
        assert isinstance(obs, torch.Tensor) and np.array_equal(obs.numpy(), ref)
        for _ in range(30):
            got = wrapped.step(torch.tensor([1, 0]))
            want = plain.step(np.array([1, 0]))
            for a, b in zip(got[:4], want[:4]):
                assert isinstance(a, torch.Tensor) and np.array_equal(a.numpy(), b)
    finally:
        wrapped.close()
        plain.close()


def test_same_step_final_obs_passes_through():
    envs = ToTorch(torchwm.make_vec("CartPole-v1", 1, seed=0, autoreset_mode="same_step"))
    try:
        envs.reset()
        for _ in range(200):
            *_, infos = envs.step(torch.tensor([0]))
            if "final_obs" in infos:
                assert infos["final_obs"][0].shape == (4,)
                return
    finally:
        envs.close()
    raise AssertionError("CartPole with a constant action should end within 200 steps")


def test_bad_device_is_refused():
    with pytest.raises((ValueError, RuntimeError), match="device"):
        ToTorch(torchwm.make_vec("CartPole-v1", 1), device="nonsense")
