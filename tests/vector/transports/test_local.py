"""The local transport (`torchwm.vector.transports.local`): `LocalWorker`, the parent's own share under
``inline``, answers the pool's commands and steps like a worker process would, writing into the pool's
batch rows, with its step run when the pool first polls."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from torchwm.vector.messages import Call, ErrorReply, Reset, ShareDescription
from torchwm.vector.transports.contract import Batch, Deadline, WorkerPayload
from torchwm.vector.transports.local import LocalWorker


class RaisesOnTwoEnv(gym.Env):
    """Counts its steps; action 2 raises."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.t], np.float32), {}

    def step(self, action):
        if action == 2:
            raise ValueError("action 2 breaks this env")
        self.t += 1
        return np.array([self.t], np.float32), float(action), False, False, {"t": self.t}


def started_worker(env_fns, first_env=4):
    """A `LocalWorker` for envs ``first_env``... of a pool, built and attached to a batch of its own."""
    envs = range(first_env, first_env + len(env_fns))
    worker = LocalWorker(0, envs)
    worker.start(WorkerPayload(0, env_fns, first_env, AutoresetMode.NEXT_STEP))
    share = worker.started(Deadline.after(5))
    assert isinstance(share, ShareDescription)
    batch = Batch(share.observation_spaces[0], first_env + len(env_fns), share.action_spaces[0])
    worker.attach(batch)
    assert worker.reply(Deadline.after(5)) is None  # the answer to attach
    return worker, batch


def test_a_local_worker_answers_a_reset_and_a_step_as_gymnasium_envs_would():
    worker, batch = started_worker([lambda: gym.make("CartPole-v1")] * 2)
    worker.send(Reset([0, 1], [3, 4], None))
    assert worker.reply(Deadline.after(5)) == [{}, {}]
    reference = [gym.make("CartPole-v1") for _ in range(2)]
    expected = [env.reset(seed=seed)[0] for env, seed in zip(reference, [3, 4], strict=True)]
    # Its envs write straight into the pool's rows of its envs (4 and 5), nowhere else.
    np.testing.assert_array_equal(batch.observations[4:], expected)
    assert not batch.observations[:4].any()
    worker.send_step(None, np.array([1, 0]))
    assert worker.poll()
    assert worker.finish_step(Deadline.after(5)) == [{}, {}]
    stepped = [env.step(action) for env, action in zip(reference, [1, 0], strict=True)]
    np.testing.assert_array_equal(batch.observations[4:], [s[0] for s in stepped])
    np.testing.assert_array_equal(batch.rewards[4:], [s[1] for s in stepped])
    worker.close(Deadline.after(5))


def test_the_actions_are_taken_when_sent_not_when_the_step_runs():
    worker, batch = started_worker([RaisesOnTwoEnv] * 2)
    worker.send(Reset([0, 1], [0, 0], None))
    worker.reply(Deadline.after(5))
    actions = np.array([1, 1])
    worker.send_step([1], actions[:1])
    actions[:] = 0  # the caller reuses its array before the pool polls
    assert worker.finish_step(Deadline.after(5)) == [{"t": 1}]
    assert batch.rewards[4:].tolist() == [0.0, 1.0]  # env 5 (local 1) took action 1; env 4 did not step


def test_an_envs_error_in_a_step_or_a_call_is_an_error_reply_naming_it():
    worker, batch = started_worker([RaisesOnTwoEnv] * 2)
    worker.send(Reset([0, 1], [0, 0], None))
    worker.reply(Deadline.after(5))
    worker.send_step(None, np.array([0, 2]))
    worker.poll()
    reply = worker.finish_step(Deadline.after(5))
    assert isinstance(reply, ErrorReply) and reply.env == 1 and "action 2 breaks this env" in reply.traceback
    worker.send(Call("step", (2,), {}, [0]))
    reply = worker.reply(Deadline.after(5))
    assert isinstance(reply, ErrorReply) and reply.env == 0
    worker.send(Call("t", (), {}))
    assert worker.reply(Deadline.after(5)) == [1, 0]  # it answers on: env 4 stepped once above, env 5 never


def test_a_factory_that_raises_is_an_error_reply_at_start():
    def broken():
        raise RuntimeError("cannot build")

    worker = LocalWorker(1, range(2, 3))
    worker.start(WorkerPayload(1, [broken], 2, AutoresetMode.NEXT_STEP))
    reply = worker.started(Deadline.after(5))
    assert isinstance(reply, ErrorReply) and "cannot build" in reply.summary


@pytest.mark.parametrize("first_env", [0, 3])
def test_it_says_it_runs_in_the_parent(first_env):
    worker, _ = started_worker([RaisesOnTwoEnv] * 2, first_env=first_env)
    assert worker.alive and worker.pid is None  # no process of its own to watch
    assert worker.describe() == (
        f"worker 0 (envs {first_env}-{first_env + 1}, in the parent process, pid {os.getpid()})"
    )
