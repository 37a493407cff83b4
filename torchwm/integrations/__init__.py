"""Adapters that hand a torchwm vector env to a learning library that has its own env interface.

`torchwm.integrations.sb3`: Stable-Baselines3's `VecEnv`. `torchwm.integrations.tianshou`: Tianshou's
`BaseVectorEnv` (`TianshouVectorEnv`, for its collectors and trainers). CleanRL and skrl take Gymnasium
vector envs as they are (docs/training.md says which autoreset mode each expects).
"""
