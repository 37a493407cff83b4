"""Adapters that hand a torchwm vector env to a learning library that has its own env interface.

`torchwm.integrations.sb3`: Stable-Baselines3's `VecEnv`. CleanRL, skrl and Tianshou take
Gymnasium vector envs as they are (docs/training.md says which autoreset mode each expects).
"""
