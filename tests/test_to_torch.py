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


# -- torchwm.to_torch, the documented way in ----------------------------------------------------------------


def test_torchwm_to_torch_is_the_documented_function_and_import_torchwm_does_not_import_torch():
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, torchwm\n"
        "assert 'torch' not in sys.modules, 'import torchwm imported torch'\n"
        "envs = torchwm.to_torch(torchwm.make_vec('CartPole-v1', num_envs=2, seed=0), device='cpu')\n"
        "obs, infos = envs.reset()\n"
        "print(type(envs).__name__, type(obs).__name__, obs.device, torchwm.ToTorch is type(envs))\n"
        # importing the module by name keeps torchwm.to_torch callable
        "from torchwm.to_torch import to_torch\n"
        "print(type(torchwm.to_torch(envs.env)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ToTorch", "Tensor", "cpu", "True", "ToTorch"]


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_to_torch_gives_the_backend_arrays_as_tensors(backend):
    options = {"num_workers": 2} if backend == "shmem" else {}
    with torchwm.make_vec("CartPole-v1", 2, backend=backend, seed=0, backend_kwargs=options) as plain:
        envs = torchwm.to_torch(
            torchwm.make_vec("CartPole-v1", 2, backend=backend, seed=0, backend_kwargs=options)
        )
        try:
            obs, _ = envs.reset()
            assert torch.equal(obs, torch.from_numpy(plain.reset()[0]))
            got = envs.step(torch.tensor([1, 0]))
            want = plain.step(np.array([1, 0]))
            for a, b in zip(got[:4], want[:4]):
                assert isinstance(a, torch.Tensor) and np.array_equal(a.numpy(), b)
        finally:
            envs.close()


def test_the_device_argument_is_passed_through(monkeypatch):
    """Without a GPU: the device reaches ToTorch (a bad one is refused by name, 'meta' is used as given)."""
    envs = torchwm.make_vec("CartPole-v1", 2, seed=0)
    try:
        wrapped = torchwm.to_torch(envs, device="meta", pin_memory=False)
        assert wrapped.device == torch.device("meta") and wrapped.pin_memory is False
        obs, _ = wrapped.reset()
        assert obs.device.type == "meta" and tuple(obs.shape) == (2, 4)
        if not torch.cuda.is_available():
            with pytest.raises(ValueError, match="pin_memory=True needs CUDA"):
                torchwm.to_torch(envs, device="cpu", pin_memory=True)
        with pytest.raises(ValueError, match="device must be a torch device"):
            torchwm.to_torch(envs, device="gpu0")
    finally:
        envs.close()


@pytest.mark.parametrize("device", ["cuda", "cuda:7", "mps"])
def test_a_device_torch_cannot_use_is_refused_at_construction(device):
    # Not at the first reset, with torch's raw "Torch not compiled with CUDA enabled".
    usable = {
        "cuda": torch.cuda.is_available(),
        "cuda:7": torch.cuda.device_count() > 7,
        "mps": torch.backends.mps.is_available(),
    }
    if usable[device]:
        pytest.skip(f"this machine has {device}")
    with torchwm.make_vec("CartPole-v1", 2, seed=0) as envs:
        with pytest.raises(ValueError, match=rf"device '{device}' is not available to this torch"):
            torchwm.to_torch(envs, device=device, pin_memory=False)
