"""ToTorch: tensors out, tensor actions in (torch is an optional extra)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torchwm  # noqa: E402
from torchwm.torch_tensors import ToTorch  # noqa: E402


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
        # the package's name and the module's are one function
        "from torchwm.torch_tensors import to_torch\n"
        "assert torchwm.to_torch is to_torch\n"
        "print(type(torchwm.to_torch(envs.env)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ToTorch", "Tensor", "cpu", "True", "ToTorch"]


def test_to_torch_is_a_plain_function_of_the_torch_tensors_module():
    """No callable module: ``torchwm.to_torch`` is the function, whichever way it is imported."""
    import inspect

    from torchwm import to_torch
    from torchwm.torch_tensors import to_torch as to_torch_of_module

    assert inspect.isfunction(to_torch) and to_torch is to_torch_of_module is torchwm.to_torch
    assert to_torch.__module__ == "torchwm.torch_tensors"


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


def refusal(device, pin_memory=False):
    """The message of to_torch's refusal of ``device``, raised when called (before any reset)."""
    with torchwm.make_vec("CartPole-v1", 2, seed=0) as envs:
        with pytest.raises(ValueError, match=rf"device '{device}' is not available to this torch") as refused:
            torchwm.to_torch(envs, device=device, pin_memory=pin_memory)
    return str(refused.value)


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="this torch has CUDA")
@pytest.mark.parametrize(("device", "pin_memory"), [("cuda", None), ("cuda", False), ("cuda:7", False)])
def test_cuda_on_a_torch_without_cuda_is_refused_when_called_saying_what_to_do(device, pin_memory):
    # Not "pin_memory=True needs CUDA ... use pin_memory=False", then torch's raw
    # "AssertionError: Torch not compiled with CUDA enabled" at the first reset.
    message = refusal(device, pin_memory)
    assert "a CPU-only build" in message and "Install a CUDA build of torch" in message
    assert "use device='cpu'" in message and "pin_memory" not in message


def test_a_cuda_device_beyond_the_machines_gpus_is_refused_naming_those_it_has(monkeypatch):
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    message = refusal("cuda:7")
    assert message.endswith(
        "this machine has 2 CUDA devices (cuda:0 to cuda:1); use one of them, or device='cuda' for the "
        "current one"
    )


def test_a_cuda_build_without_a_gpu_is_refused_saying_so(monkeypatch):
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    message = refusal("cuda")
    assert message.endswith(
        "torch.cuda.is_available() is False (no GPU or no working driver found); use device='cpu'"
    )


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_without_mps_is_refused_in_one_sentence():
    message = refusal("mps")
    assert "torch.backends.mps.is_available() is False" in message and "use device='cpu'" in message
    assert "\n" not in message  # not torch's table of every dispatch key


@pytest.mark.skipif(torch.xpu.is_available(), reason="this machine has XPU")
def test_another_device_torch_lacks_is_refused_with_the_first_line_of_torchs_reason():
    message = refusal("xpu")
    assert message.endswith(
        "Torch not compiled with XPU enabled. Use device='cpu', or install a torch build for that device"
    )
