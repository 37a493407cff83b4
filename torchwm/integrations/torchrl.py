"""`make_torchrl_env`: a TorchRL env from a torchwm name or vector env, through TorchRL's own `GymWrapper`.

TorchRL takes a Gymnasium vector env through ``torchrl.envs.GymWrapper``, on three conditions a
torchwm env does not meet by default. It must reset ended envs in the same step (``same_step``, the
last observation in ``infos["final_obs"]``, which TorchRL swaps back into the step's data) or not at
all (``disabled``: TorchRL resets them itself with a ``reset_mask``); Gymnasium's default,
``next_step``, is refused. Every info key must be an array of one value per env, which TorchRL turns
into a tensor of the env's batch size and whose spec it infers from the first reset it runs while it
builds the env: ALE's seeded reset reports ``infos["seeds"]``, one tuple of two seeds per env, which
TorchRL stacks into a ``(2, num_envs)`` tensor, so when that first reset is seeded (``make_vec(seed=s)``
seeds it) construction fails with a batch dimension mismatch. That key is left out of what TorchRL
reads. And ``GymEnv(name, num_envs=n)`` builds Gymnasium's own ``AsyncVectorEnv``, not a
torchwm one. `make_torchrl_env` builds the torchwm env with ``same_step`` (or takes one already built
in a mode TorchRL accepts), and hands it to `GymWrapper`; ``seed`` is applied as TorchRL's
``env.set_seed(seed)``, a reset with that seed (env ``i`` gets ``seed + i``, as torchwm and Gymnasium
seed), so the data is the same as TorchRL over Gymnasium's ``SyncVectorEnv`` of the same envs.

Example:
    >>> import torch
    >>> from torchwm.integrations.torchrl import make_torchrl_env
    >>> env = make_torchrl_env("CartPole-v1", 2, seed=0)
    >>> _ = torch.manual_seed(0)
    >>> env.rollout(5, break_when_any_done=False)["next", "reward"].shape
    torch.Size([2, 5, 1])
    >>> env.close()
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym

import torchwm
from torchwm.integrations import check_full_batch, full_batch_error

try:
    from torchrl.envs import EnvBase, GymWrapper
except ImportError as exc:
    from torchwm.extras import missing_extra

    raise missing_extra("torchrl", "torchwm.integrations.torchrl") from exc

__all__ = ["TORCHRL_AUTORESET_MODES", "UNREADABLE_INFO_KEYS", "TorchRLInfos", "make_torchrl_env"]

# The modes GymWrapper takes (gymnasium >= 1.1): it refuses next_step with a RuntimeError.
TORCHRL_AUTORESET_MODES = (gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.DISABLED)
# Info keys with no per-env array TorchRL can stack: ALE's seeded reset reports the two seeds it drew
# for each env as a tuple (an object array of tuples), and only on the resets that were given a seed.
UNREADABLE_INFO_KEYS = ("seeds",)


def _autoreset_mode(value: Any) -> gym.vector.AutoresetMode:
    """An autoreset mode given as Gymnasium's enum, its value ("SameStep") or torchwm's name ("same_step")."""
    if isinstance(value, gym.vector.AutoresetMode):
        return value
    for mode in gym.vector.AutoresetMode:
        if value in (mode.value, mode.name, mode.name.lower()):
            return mode
    raise ValueError(
        f"autoreset_mode must be one of 'same_step', 'disabled' (or 'next_step', which TorchRL refuses), "
        f"got {value!r}"
    )


def _mode_error(mode: gym.vector.AutoresetMode, what: str) -> ValueError:
    return ValueError(
        f"TorchRL's GymWrapper takes a vector env that resets ended envs in the same step or not at all: "
        f"{what} with autoreset_mode='same_step' (or 'disabled'), got {mode.name.lower()!r}"
    )


class TorchRLInfos(gym.vector.VectorWrapper):
    """The vector env with the infos TorchRL cannot read (`UNREADABLE_INFO_KEYS`) left out.

    Everything else passes through; ``autoreset_mode``, which `GymWrapper` reads as an attribute, is the
    wrapped env's.
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        self.autoreset_mode = _autoreset_mode(env.metadata.get("autoreset_mode"))

    @staticmethod
    def readable(infos: dict[str, Any]) -> dict[str, Any]:
        for key in UNREADABLE_INFO_KEYS:
            if key in infos:
                infos = {k: v for k, v in infos.items() if k not in (key, f"_{key}")}
        return infos

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        # Gymnasium annotates an int; its vector envs, and torchwm's, take a list of one seed per env too.
        obs, infos = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        return obs, self.readable(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        return obs, rewards, terminations, truncations, self.readable(infos)


def make_torchrl_env(
    env: str | gym.vector.VectorEnv,
    num_envs: int | None = None,
    *,
    backend: str | None = None,
    seed: int | None = None,
    categorical_action_encoding: bool = False,
    device: Any = None,
    **make_vec_kwargs: Any,
) -> EnvBase:
    """A TorchRL env over a torchwm vector env: built from a name, or the one given.

    Args:
        env: an env id (``"CartPole-v1"``, ``"ALE/Pong-v5"``, any name `torchwm.make_vec` takes), built
            with ``autoreset_mode="same_step"`` unless ``make_vec_kwargs`` say ``"disabled"``; or a
            torchwm (or any Gymnasium) vector env made with ``autoreset_mode="same_step"`` or
            ``"disabled"``. Closing the TorchRL env closes it.
        num_envs: how many envs run side by side (default 1 for a name; for an env, its own, and a
            number given must match it).
        backend: the torchwm backend (``"sync"``, the default, ``"subproc"``, ``"shmem"``, ...), for a name.
        seed: applied as TorchRL's ``env.set_seed(seed)``: a reset with this seed once the env is
            built, env ``i`` getting ``seed + i``. For a name, also `make_vec`'s seed (its action
            space's too).
        categorical_action_encoding: `GymWrapper`'s: discrete actions as integers rather than one-hot.
        device: `GymWrapper`'s: where the tensors go (``None``, its default, leaves them on the CPU with
            no device set).
        **make_vec_kwargs: the rest of `torchwm.make_vec`'s arguments (``wrappers``,
            ``backend_kwargs``, ``autoreset_mode``, env keyword arguments), for a name.

    Returns:
        What ``GymWrapper(env)`` returns for a vector env: with ``same_step``, a ``TransformedEnv`` whose
        ``VecGymEnvTransform`` puts each ended episode's last observation in ``("next", ...)``.

    Raises:
        ValueError: the env resets ended envs in the next step (``next_step``, Gymnasium's default),
            which `GymWrapper` refuses; or ``num_envs`` does not match the env given; or the env
            returns fewer envs per step than it has (``batch_size < num_envs``): TorchRL steps every
            env each step.
        TypeError: ``env`` is neither a name nor a Gymnasium vector env, or `make_vec` arguments
            came with an env already built.
    """
    if not isinstance(env, (str, gym.vector.VectorEnv)) and (callable(env) or _is_pettingzoo_env(env)):
        return _pettingzoo_env(
            env, num_envs, backend, seed, device, categorical_action_encoding, make_vec_kwargs
        )
    if isinstance(env, str):
        mode = _autoreset_mode(make_vec_kwargs.pop("autoreset_mode", "same_step"))
        if mode not in TORCHRL_AUTORESET_MODES:
            raise _mode_error(mode, "build it")
        make_vec_kwargs.update(backend=backend or "sync", seed=seed, autoreset_mode=mode.name.lower())
        num_envs = 1 if num_envs is None else num_envs
        batch_size = (make_vec_kwargs.get("backend_kwargs") or {}).get("batch_size")
        if isinstance(batch_size, int) and batch_size < num_envs:  # refused before any worker starts
            raise ValueError(full_batch_error("TorchRL's GymWrapper", batch_size, num_envs))
        vec = torchwm.make_vec(env, num_envs, **make_vec_kwargs)
    elif isinstance(env, gym.vector.VectorEnv):
        if make_vec_kwargs or backend is not None:
            given = sorted(make_vec_kwargs) + (["backend"] if backend is not None else [])
            raise TypeError(
                f"make_torchrl_env builds a vector env from a name with {given}; "
                f"it got one already built ({type(env).__name__}): give those to torchwm.make_vec instead"
            )
        if num_envs is not None and num_envs != env.num_envs:
            raise ValueError(f"num_envs={num_envs} does not match the env given, which has {env.num_envs}")
        mode = _autoreset_mode(env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP))
        if mode not in TORCHRL_AUTORESET_MODES:
            raise _mode_error(mode, "make it")
        vec = env
    else:
        raise TypeError(
            f"make_torchrl_env takes an env id (str) or a Gymnasium vector env, got {type(env).__name__}"
        )
    try:
        check_full_batch(vec, "TorchRL's GymWrapper")  # a batch_size from elsewhere (a config file)
        torchrl_env = GymWrapper(
            TorchRLInfos(vec), categorical_action_encoding=categorical_action_encoding, device=device
        )
        if seed is not None:
            torchrl_env.set_seed(seed)
    except BaseException:
        if vec is not env:  # built here: nobody else can close it
            vec.close()
        raise
    return torchrl_env


# PettingZooWrapper's options, and the backend's: what make_torchrl_env takes for a PettingZoo env.
PETTINGZOO_OPTIONS = ("group_map", "use_mask", "categorical_actions", "done_on_any", "backend_kwargs")


def _is_pettingzoo_env(env: Any) -> bool:
    if "pettingzoo" not in sys.modules:
        return False  # a PettingZoo env's class derives from PettingZoo's: it would be imported
    from torchwm.multiagent.pettingzoo_import import pettingzoo_env_types

    return isinstance(env, pettingzoo_env_types())


def _pettingzoo_env(
    env: Any,
    num_envs: int | None,
    backend: str | None,
    seed: int | None,
    device: Any,
    categorical_action_encoding: bool,
    options: dict[str, Any],
) -> EnvBase:
    """TorchRL's ``ParallelEnv(num_envs, lambda: PettingZooWrapper(make(), **options))`` as one env."""
    unknown = sorted(set(options) - set(PETTINGZOO_OPTIONS))
    if unknown or categorical_action_encoding:
        given = unknown or ["categorical_action_encoding"]
        raise TypeError(
            f"for a PettingZoo env, make_torchrl_env takes PettingZooWrapper's options "
            f"{list(PETTINGZOO_OPTIONS[:4])} and backend_kwargs; got {given} (PettingZooWrapper's name "
            f"for one-hot or integer actions is categorical_actions)"
        )
    from torchwm.integrations.torchrl_pettingzoo import make_pettingzoo_torchrl_env

    return make_pettingzoo_torchrl_env(
        env,
        1 if num_envs is None else num_envs,
        backend=backend or "sync",
        seed=seed,
        device=device,
        **options,
    )
