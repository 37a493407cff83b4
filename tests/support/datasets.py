"""Reading a recorded Minari dataset back: `replay` steps each episode again in a single env from its
recorded seed (tests/integrations/test_minari.py, tests/cli/test_record.py)."""

import numpy as np


def replay(dataset, make):
    """Each episode again in a single env from its recorded seed: the same observations, rewards and ends."""
    metadata = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    for episode, meta in zip(dataset.iterate_episodes(), metadata, strict=True):
        env = make(int(meta["env_id"]))
        obs, _ = env.reset(seed=meta["seed"])
        assert np.array_equal(obs, episode.observations[0])
        assert len(episode.observations) == len(episode.actions) + 1
        for t, action in enumerate(episode.actions):
            obs, reward, terminated, truncated, _ = env.step(action)
            assert np.array_equal(obs, episode.observations[t + 1]), (meta, t)
            assert reward == episode.rewards[t]
            assert terminated == episode.terminations[t] and truncated == episode.truncations[t]
        assert terminated or truncated  # a whole episode
        env.close()
    return metadata
