"""`PettingZooTorchRLEnv`: N PettingZoo parallel envs as one TorchRL env, TorchRL's ``ParallelEnv`` of
`PettingZooWrapper` in one call.

A TorchRL user runs N PettingZoo envs as ``ParallelEnv(n, lambda: PettingZooWrapper(make(), group_map=...,
use_mask=..., categorical_actions=..., done_on_any=...))``: one process per env, each a `PettingZooWrapper`.
`PettingZooTorchRLEnv` gives the same tensordicts (keys, specs, shapes, values; batch size ``[N]``) over a
torchwm `ParallelVectorEnv` (``torchwm.multiagent.make_vec(layout="parallel", group_map=...)``) on any
backend: the specs are those of a `PettingZooWrapper` built once over one env of the same factory (so
its keys and dtypes are TorchRL's own), expanded to ``[N]``; each step fills them from the ``(N, G, ...)``
arrays of the vector env as `PettingZooWrapper` fills them from one env's dicts:

- ``(group, "observation")``, ``(group, "reward")`` and the group's ``done``/``terminated``/``truncated``
  for the agents alive at the step's start; zeros for agents gone earlier, whose flags are True (an agent
  gone from PettingZoo's dicts is done, as `PettingZooWrapper` reads it), and without ``use_mask`` an
  agent gone while its env goes on is TorchRL's ``ValueError``;
- ``(group, "mask")`` (``use_mask``): the agent is in the env's ``agents``;
- ``(group, "action_mask")``: the env's mask for agents that act next, all True for the others; the
  action spec's mask follows it, as `PettingZooWrapper` updates its own;
- ``(group, "info", key)`` for the info keys the first reset gave (the spec TorchRL infers);
- ``done``/``terminated``/``truncated`` of the env: any of its agents' (``done_on_any``, the default for
  parallel envs) or all.

The vector env runs with ``autoreset_mode="disabled"``: TorchRL resets the envs that are done itself
(``"_reset"``), and only those are reset. ``set_seed(s)`` seeds the envs as TorchRL's batched envs seed
theirs: env 0 with ``s``, each next env with TorchRL's ``seed_generator`` of the one before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from torchrl._utils import seed_generator
from torchrl.data.tensor_specs import Categorical, Composite, OneHot
from torchrl.envs import EnvBase
from torchrl.envs.libs.pettingzoo import PettingZooWrapper
from torchrl.envs.utils import _aggregate_end_of_traj

from torchwm.multiagent.parallel_vector import ParallelVectorEnv

__all__ = ["PettingZooTorchRLEnv"]


class PettingZooTorchRLEnv(EnvBase):
    """The N envs of a `ParallelVectorEnv` as one TorchRL env of batch size ``[N]`` (see the module).

    Built by `torchwm.integrations.torchrl.make_torchrl_env` from a PettingZoo env or factory. Closing it
    closes the vector env.

    Args:
        vector_env: a `ParallelVectorEnv` made with ``autoreset_mode="disabled"``, ``dead_agents="zero"``
            and ``group_map`` the template's.
        template: a `PettingZooWrapper` over one env of the same factory: its specs, ``group_map``,
            ``use_mask`` and ``done_on_any`` are this env's.
        device: where the tensors go, as `PettingZooWrapper`'s ``device``.
    """

    def __init__(
        self, vector_env: ParallelVectorEnv, template: PettingZooWrapper, device: Any = None
    ) -> None:
        num_envs = vector_env.num_envs
        super().__init__(device=device, batch_size=torch.Size([num_envs]), allow_done_after_reset=True)
        self.vector_env = vector_env
        self.group_map: dict[str, list[str]] = {g: list(a) for g, a in template.group_map.items()}
        self.possible_agents = list(template.possible_agents)
        self.use_mask = bool(template.use_mask)
        self.done_on_any = bool(template.done_on_any)
        self.categorical_actions = bool(template.categorical_actions)
        self.full_action_spec = template.full_action_spec.expand(num_envs).to(self.device)
        self.full_observation_spec = template.full_observation_spec.expand(num_envs).to(self.device)
        self.full_reward_spec = template.full_reward_spec.expand(num_envs).to(self.device)
        self.full_done_spec = template.full_done_spec.expand(num_envs).to(self.device)
        self.has_action_mask = dict(template.has_action_mask)
        # Which agents (N, G) were alive after the latest reset or step: their next step's data is theirs.
        self._alive = {g: np.zeros((num_envs, len(a)), dtype=bool) for g, a in self.group_map.items()}

    # -- TorchRL's EnvBase -------------------------------------------------------------------------

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        env_ids = self._envs_to_reset(tensordict)
        seed = kwargs.pop("seed", None)
        if kwargs:
            raise TypeError(f"reset() takes seed= only, got {sorted(kwargs)}")
        observations, infos = self.vector_env.reset(
            seed=seed, env_ids=None if env_ids.size == self.vector_env.num_envs else env_ids
        )
        out = self.full_observation_spec.zero()
        out.update(self.full_done_spec.zero())
        self._fill(out, env_ids, observations, infos, stepped=False)
        return out

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = {}
        for group in self.group_map:
            action = tensordict.get((group, "action"))
            actions[group] = self.full_action_spec[group, "action"].to_numpy(action)
        observations, rewards, terminations, truncations, infos = self.vector_env.step(actions)
        out = self.full_observation_spec.zero()
        out.update(self.full_reward_spec.zero())
        out.update(self.full_done_spec.zero())
        all_envs = np.arange(self.vector_env.num_envs)
        self._fill(
            out, all_envs, observations, infos, stepped=True, flags=(rewards, terminations, truncations)
        )
        return out

    def _set_seed(self, seed: int | None) -> None:
        self.set_seed(seed)

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Reset env ``i`` with the ``i``-th seed of TorchRL's chain from ``seed``, as TorchRL's
        ``SerialEnv``/``ParallelEnv`` seed their envs; return the next seed of the chain."""
        seeds: list[int | None] = []
        for _ in range(self.vector_env.num_envs):
            seeds.append(seed)
            if seed is not None and not static_seed:
                seed = seed_generator(seed)
        self.reset(seed=seeds)
        return seed

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Close the vector env and its workers; a second call does nothing."""
        self.is_closed = True
        self.vector_env.close()

    # -- filling TorchRL's tensordicts -------------------------------------------------------------

    def _envs_to_reset(self, tensordict: TensorDictBase | None) -> np.ndarray:
        num_envs = self.vector_env.num_envs
        if tensordict is None:
            return np.arange(num_envs)
        if "_reset" in tensordict.keys():
            needs = tensordict.get("_reset")
        else:
            needs = _aggregate_end_of_traj(tensordict, reset_keys=self.reset_keys)
        needs = needs.reshape(num_envs, -1).any(-1)
        return np.flatnonzero(needs.cpu().numpy())

    def _fill(
        self,
        out: TensorDictBase,
        env_ids: np.ndarray,
        observations: dict[str, Any],
        infos: dict[str, Any],
        *,
        stepped: bool,
        flags: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None = None,
    ) -> None:
        """Write rows ``env_ids`` of ``out`` from the vector env's arrays, as `PettingZooWrapper` writes
        one env's (see the module)."""
        ids = torch.as_tensor(env_ids, dtype=torch.long)
        for group, agents in self.group_map.items():
            alive_after = np.asarray(infos["agent_mask"][group], dtype=bool)  # in the env's agents
            alive_before = self._alive[group][env_ids] if stepped else alive_after
            if stepped and not self.use_mask and (~alive_before).any():
                # PettingZooWrapper's words for an agent gone while its env goes on.
                raise ValueError(
                    "Dead agents found in the environment, you need to set use_mask=True to allow this."
                )
            _write(
                out.get((group, "observation")),
                self.full_observation_spec[group, "observation"],
                ids,
                observations[group],
            )
            if self.use_mask:
                out.get((group, "mask"))[ids] = torch.as_tensor(alive_after, device=self.device)
            if self.has_action_mask.get(group, False):
                self._write_action_mask(out, group, ids, infos, alive_after)
            self._write_infos(out, group, agents, ids, infos, alive_before)
            if flags is not None:
                rewards, terminations, truncations = (f[group] for f in flags)
                gone = torch.as_tensor(~alive_before, device=self.device).unsqueeze(-1)
                live = ~gone
                terminated = torch.as_tensor(terminations, device=self.device).unsqueeze(-1) & live | gone
                truncated = torch.as_tensor(truncations, device=self.device).unsqueeze(-1) & live | gone
                reward = torch.as_tensor(rewards, dtype=torch.float32, device=self.device).unsqueeze(-1)
                out.get((group, "reward"))[ids] = reward * live
                out.get((group, "terminated"))[ids] = terminated
                out.get((group, "truncated"))[ids] = truncated
                out.get((group, "done"))[ids] = terminated | truncated
            self._alive[group][env_ids] = alive_after
        if flags is not None:
            for key in ("done", "terminated", "truncated"):
                per_agent = torch.cat(
                    [out.get((g, key)).reshape(out.shape[0], -1) for g in self.group_map], dim=1
                )
                value = per_agent.any(-1) if self.done_on_any else per_agent.all(-1)
                out.set(key, value.unsqueeze(-1))

    def _write_action_mask(
        self, out: TensorDictBase, group: str, ids: torch.Tensor, infos: dict[str, Any], acting: np.ndarray
    ) -> None:
        """The env's action mask for the agents that act next, all True for the others (TorchRL's rule);
        the action spec's mask follows, so that ``rand_action`` draws legal actions."""
        mask = out.get((group, "action_mask"))
        given = infos.get("action_mask", {}).get(group)
        if given is not None:
            rows = torch.as_tensor(np.asarray(given) == 1, device=self.device)
            if not self.categorical_actions:
                rows = rows.reshape(mask[ids].shape)
            acting_rows = torch.as_tensor(acting, device=self.device).reshape(
                *acting.shape, *[1] * (rows.ndim - 2)
            )
            mask[ids] = torch.where(acting_rows, rows, torch.ones_like(rows))
        else:
            mask[ids] = True
        spec = self.full_action_spec[group, "action"]
        if isinstance(spec, (Categorical, OneHot)):
            spec.update_mask(mask.clone())

    def _write_infos(
        self,
        out: TensorDictBase,
        group: str,
        agents: list[str],
        ids: torch.Tensor,
        infos: dict[str, Any],
        alive_before: np.ndarray,
    ) -> None:
        """The agents' info keys the spec has (those of the first reset), for the agents alive."""
        info_node = out.get((group, "info"), None)
        if info_node is None:
            return
        for j, agent in enumerate(agents):
            batch = infos.get(agent)
            if not isinstance(batch, dict):
                continue
            for key in info_node.keys():
                if key not in batch:
                    continue
                present = np.asarray(batch.get(f"_{key}", np.ones(len(ids), dtype=bool)), dtype=bool)
                rows = np.flatnonzero(present & alive_before[:, j])
                if rows.size:
                    values = torch.as_tensor(np.asarray(batch[key])[rows], device=self.device)
                    target = info_node.get(key)
                    target[ids[rows], j] = values.to(target.dtype).reshape(target[ids[rows], j].shape)


def _write(target: Any, spec: Any, ids: torch.Tensor, values: Any) -> None:
    """Rows ``ids`` of a tensor (or nested tensordict) of ``spec`` from a NumPy batch (or dict of them).

    A masked env's observation spec is ``{"observation": ...}`` (TorchRL takes its ``action_mask`` out),
    where the vector env gives the ``"observation"`` part alone."""
    if isinstance(spec, Composite):
        if not isinstance(values, dict):
            (key,) = spec.keys()  # the "observation" part of a masked observation
            values = {key: values}
        for key in spec.keys():
            _write(target.get(key), spec[key], ids, values[key])
        return
    target[ids] = torch.as_tensor(np.asarray(values), device=target.device).to(target.dtype)


def make_pettingzoo_torchrl_env(
    env: Any,
    num_envs: int,
    *,
    backend: str = "sync",
    seed: int | None = None,
    group_map: Any = None,
    use_mask: bool = False,
    categorical_actions: bool = True,
    done_on_any: bool | None = None,
    device: Any = None,
    backend_kwargs: dict[str, Any] | None = None,
) -> PettingZooTorchRLEnv:
    """``num_envs`` PettingZoo parallel envs on ``backend`` as one `PettingZooTorchRLEnv` (see
    `torchwm.integrations.torchrl.make_torchrl_env`, which calls this for a PettingZoo env or factory).

    One env is built here, for the `PettingZooWrapper` whose specs and group map the env takes, before
    any worker starts.
    """
    import warnings

    import torchwm.multiagent
    from torchwm.multiagent.pettingzoo_import import pettingzoo_env_types
    from torchwm.multiagent.sources import env_sources

    parallel_type, aec_type = pettingzoo_env_types()
    fns = env_sources(env, num_envs, {}, "aec")  # as given: an AEC env is not converted
    first = fns[0]()
    if isinstance(first, aec_type):
        first.close()
        raise TypeError(
            f"make_torchrl_env runs PettingZoo parallel envs (ParallelEnv, all agents acting at once); "
            f"got the turn-based AECEnv {type(first).__qualname__}: give the module's parallel_env() (as "
            f"TorchRL's PettingZooWrapper steps an AEC env one agent at a time, it would differ), or "
            f"use torchwm.multiagent.make_vec(..., layout='aec')"
        )
    if not isinstance(first, parallel_type):
        raise TypeError(
            f"the env factory must return a PettingZoo ParallelEnv, got {type(first).__qualname__}"
        )
    with warnings.catch_warnings():
        # TorchRL warns that it tests another PettingZoo version: this wrapper only lends its specs.
        warnings.filterwarnings("ignore", message="PettingZoo in TorchRL is tested", category=UserWarning)
        template = PettingZooWrapper(
            first,
            group_map=group_map,
            use_mask=use_mask,
            categorical_actions=categorical_actions,
            done_on_any=done_on_any,
            device=device,
        )
    try:
        vector_env = torchwm.multiagent.make_vec(
            fns,
            num_envs,
            backend=backend,
            layout="parallel",
            autoreset_mode="disabled",  # TorchRL resets the envs that are done ("_reset")
            dead_agents="zero",
            group_map=template.group_map,
            backend_kwargs=backend_kwargs,
        )
        try:
            torchrl_env = PettingZooTorchRLEnv(vector_env, template, device=device)
            if seed is not None:
                torchrl_env.set_seed(seed)
        except BaseException:
            vector_env.close()
            raise
    finally:
        template.close()
    return torchrl_env
