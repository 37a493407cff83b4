"""Torch tensors in and out of a vector env: `ToTorch` and `to_torch`.

`ToTorch` does what Gymnasium's `NumpyToTorch` vector wrapper does
(observations, rewards, flags and infos become tensors; actions may be
tensors) and three things it does not, which is why it is not a subclass of
it: on a CUDA device the host arrays go through pinned (page-locked)
memory, so the copy to the GPU is asynchronous (``non_blocking=True``); info
values torch cannot hold (the object arrays of ``final_obs`` under
``same_step`` autoreset, on which `NumpyToTorch` raises BufferError) pass
through unchanged; and torchwm's ``env_ids=`` and ``send``/``recv`` are
forwarded. It needs torch only (`NumpyToTorch` also needs array-api-compat):
torchwm's ``[torch]`` extra, installed from a checkout with ``pip install ".[torch]"``.

``torchwm.to_torch(envs, device=..., pin_memory=...)`` is the way in (this module's `to_torch`):
``import torchwm`` does not import torch, and the first use of ``torchwm.to_torch`` or ``torchwm.ToTorch``
imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium.vector import VectorWrapper

try:
    import torch
except ImportError as exc:
    from torchwm.extras import missing_extra

    raise missing_extra("torch", "torchwm.to_torch") from exc

if TYPE_CHECKING:
    from torchwm.vector.base import VectorEnv

# numpy kinds torch can hold: bool, signed and unsigned ints, floats, complex.
_TENSOR_KINDS = frozenset("biufc")


class ToTorch(VectorWrapper):
    """A vector env that takes and returns torch tensors.

    Args:
        env: a vector env returning NumPy arrays (any torchwm or Gymnasium vector env).
        device: where returned tensors live (``"cpu"``, ``"cuda"``, ``"cuda:1"``, a `torch.device`).
        pin_memory: stage host arrays in pinned memory and copy them with ``non_blocking=True``;
            ``None`` (default) means yes on CUDA, no elsewhere. Needs CUDA.

    On the CPU the tensors share memory with the arrays the env returned (no copy); with a
    torchwm env made with ``copy=False`` they therefore change at the next step, as the arrays do.

    Example:
        >>> import torch
        >>> import torchwm
        >>> from torchwm.torch_tensors import ToTorch
        >>> envs = ToTorch(torchwm.make_vec("CartPole-v1", num_envs=2, seed=0))
        >>> obs, infos = envs.reset()
        >>> obs.dtype, tuple(obs.shape)
        (torch.float32, (2, 4))
        >>> obs, rewards, terminations, truncations, infos = envs.step(torch.tensor([0, 1]))
        >>> rewards
        tensor([1., 1.], dtype=torch.float64)
        >>> envs.close()
    """

    env: VectorEnv  # torchwm's: `send`, `recv` and ``env_ids`` are used when called

    def __init__(self, env: Any, device: str | torch.device = "cpu", pin_memory: bool | None = None) -> None:
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(
                f"device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}"
            ) from exc
        # Checked here, not at the first reset: torch says a device is missing only when it is used.
        problem = _device_problem(device)
        if problem is not None:
            raise ValueError(
                f"device {str(device)!r} is not available to this torch ({torch.__version__}): {problem}"
            )
        if pin_memory is None:
            pin_memory = device.type == "cuda"
        if pin_memory and not torch.cuda.is_available():
            raise ValueError(
                "pin_memory=True needs CUDA, and torch.cuda.is_available() is False; use pin_memory=False"
            )
        super().__init__(env)
        self.device = device
        self.pin_memory = bool(pin_memory)

    def reset(
        self, *, seed: Any = None, options: dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[Any, dict[str, Any]]:
        """`reset` of the env; a ``reset_mask`` or other option may be a tensor."""
        if options:
            options = to_numpy(options)
        obs, infos = self.env.reset(seed=seed, options=options, **kwargs)
        return self.to_tensor(obs), self.to_tensor(infos)

    def step(self, actions: Any, env_ids: Any = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step with tensor (or array) actions; everything comes back as tensors on ``device``."""
        actions = to_numpy(actions)
        result = (
            self.env.step(actions) if env_ids is None else self.env.step(actions, env_ids=to_numpy(env_ids))
        )
        return tuple(self.to_tensor(value) for value in result)  # type: ignore[return-value]

    def send(self, actions: Any, env_ids: Any = None) -> None:
        """torchwm's `send`, with tensor actions."""
        self.env.send(to_numpy(actions), None if env_ids is None else to_numpy(env_ids))

    def recv(self, timeout: float | None = None) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """torchwm's `recv`, as tensors."""
        return tuple(self.to_tensor(value) for value in self.env.recv(timeout))  # type: ignore[return-value]

    def to_tensor(self, value: Any) -> Any:
        """Arrays (in dicts and tuples too) as tensors on ``device``; other values unchanged."""
        if isinstance(value, np.ndarray) and value.dtype.kind in _TENSOR_KINDS:
            return self._array_to_tensor(value)
        if isinstance(value, Mapping):
            return {key: self.to_tensor(item) for key, item in value.items()}
        if isinstance(value, tuple):
            return tuple(self.to_tensor(item) for item in value)
        return value

    def _array_to_tensor(self, array: np.ndarray) -> torch.Tensor:
        if not array.flags.writeable:
            array = array.copy()  # torch.from_numpy warns on read-only memory
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.pin_memory:
            # torch's pinned-memory allocator does not reuse this block until the async copy is done.
            return tensor.pin_memory().to(self.device, non_blocking=True)
        if self.device.type == "cpu":
            return tensor
        return tensor.to(self.device)


def _device_problem(device: torch.device) -> str | None:
    """Why torch cannot put tensors on ``device`` in this process, and what to do; None if it can."""
    if device.type == "cuda":
        if not torch.backends.cuda.is_built():
            return (
                "this build of torch has no CUDA (a CPU-only build). Install a CUDA build of torch "
                "(https://pytorch.org/get-started/locally/), or use device='cpu'"
            )
        if not torch.cuda.is_available():
            return "torch.cuda.is_available() is False (no GPU or no working driver found); use device='cpu'"
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            return (
                f"this machine has {count} CUDA device{'s' if count != 1 else ''} "
                f"(cuda:0 to cuda:{count - 1}); use one of them, or device='cuda' for the current one"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        return (
            "torch.backends.mps.is_available() is False: MPS needs a Mac with Apple silicon and a torch "
            "built with MPS; use device='cpu'"
        )
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as exc:
        # Only the first line: a backend torch was built without answers with its whole dispatch table.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{reason}. Use device='cpu', or install a torch build for that device"
    return None


def to_torch(env: Any, device: str | torch.device = "cpu", pin_memory: bool | None = None) -> ToTorch:
    """``ToTorch(env, device, pin_memory)``: see `ToTorch`.

    Example:
        >>> import torchwm
        >>> from torchwm.torch_tensors import to_torch
        >>> envs = to_torch(torchwm.make_vec("CartPole-v1", num_envs=2, seed=0), device="cpu")
        >>> type(envs.reset()[0]).__name__
        'Tensor'
        >>> envs.close()
    """
    return ToTorch(env, device=device, pin_memory=pin_memory)


def to_numpy(value: Any) -> Any:
    """Tensors (in dicts and tuples too) as NumPy arrays, moved to the host; other values unchanged."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, Mapping):
        return {key: to_numpy(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(to_numpy(item) for item in value)
    return value
