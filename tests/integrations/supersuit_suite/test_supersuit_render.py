# The MIT License
#
# Copyright (c) 2020 Farama Foundation
#
# Permission is hereby granted, free of charge, to any person obtaining a copy
# of this software and associated documentation files (the "Software"), to deal
# in the Software without restriction, including without limitation the rights
# to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
# copies of the Software, and to permit persons to whom the Software is
# furnished to do so, subject to the following conditions:
#
# The above copyright notice and this permission notice shall be included in
# all copies or substantial portions of the Software.
#
# THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
# IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
# FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
# AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
# LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
# OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
# THE SOFTWARE.
#
# Ported from SuperSuit 3.11.0 test/test_vector/test_render.py (commit 1312e6d, "Bump version to 3.11.0").
# Adapted: only the construction. The SuperSuit calls are torchwm's (torchwm.multiagent), the video goes to
# pytest's tmp_path rather than /tmp, and test_vector_render_multiproc (num_cpus=1: SuperSuit's and torchwm's
# sync) runs on shmem too, through concat_vec_envs_v1's `backend`.

import pytest
from pettingzoo.butterfly import pistonball_v6
from stable_baselines3.common.vec_env import VecVideoRecorder

import torchwm.integrations.supersuit as ss


def schedule(episode_idx):
    print(episode_idx)
    return episode_idx <= 1


def make_sb3_record_env(video_folder):
    env = pistonball_v6.parallel_env(render_mode="rgb_array")
    print(env.render_mode)
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    envs = ss.concat_vec_envs_v1(env, 1, num_cpus=0, base_class="stable_baselines3")
    envs = VecVideoRecorder(envs, video_folder, schedule)
    return envs


def test_record_video_sb3(tmp_path):
    envs = make_sb3_record_env(str(tmp_path))
    envs.reset()
    for _ in range(100):
        envs.step([envs.action_space.sample() for _ in range(envs.num_envs)])
    envs.close()


def make_env():
    env = pistonball_v6.parallel_env(render_mode="rgb_array")
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    return env


@pytest.mark.parametrize("backend", ["sync", "shmem"])
def test_vector_render_multiproc(backend):
    env = make_env()
    num_envs = 1
    venv = ss.concat_vec_envs_v1(
        env, num_envs, num_cpus=num_envs, base_class="stable_baselines3", backend=backend
    )
    venv.reset()
    arr = venv.render()
    venv.reset()
    assert len(arr.shape) == 3 and arr.shape[2] == 3
    venv.reset()
    try:
        venv.close()
    except RuntimeError:
        pass
