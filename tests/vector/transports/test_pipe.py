"""The pipe transport's wire (``subproc``): what a step sends raw, and the cheap check for a message."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

import torchwm
from torchwm.vector.messages import ErrorReply, Step
from torchwm.vector.transports.contract import Deadline
from torchwm.vector.transports.pipe import RawStep
from torchwm.vector.transports.processes import ProcessHandle
from torchwm.vector.transports.worker_process import Readable


def test_readable_answers_as_connection_poll_does():
    mine, theirs = multiprocessing.Pipe()
    readable = Readable(mine)
    try:
        assert (readable(), mine.poll()) == (False, False)
        theirs.send_bytes(b"x")
        assert (readable(), mine.poll()) == (True, True)
        mine.recv_bytes()
        assert (readable(), mine.poll()) == (False, False)
        # the other end gone: a read would raise EOFError now, so both say "there is something"
        theirs.close()
        assert (readable(), mine.poll()) == (True, True)
    finally:
        mine.close()


def _sent_commands(monkeypatch) -> list:
    sent: list = []
    send = ProcessHandle.send

    def recording_send(self, command, raw=None):
        sent.append((type(command).__name__, None if raw is None else bytes(raw)))
        send(self, command, raw)

    monkeypatch.setattr(ProcessHandle, "send", recording_send)
    return sent


def test_a_whole_share_of_array_actions_in_the_space_dtype_goes_raw(monkeypatch):
    sent = _sent_commands(monkeypatch)
    with torchwm.make_vec(
        "CartPole-v1", num_envs=4, backend="subproc", backend_kwargs={"num_workers": 2}
    ) as envs:
        envs.reset(seed=0)
        sent.clear()
        envs.step(np.array([0, 1, 1, 0]))  # Discrete's own dtype, int64: raw bytes, one message per worker
        assert sent == [("RawStep", np.array([0, 1]).tobytes()), ("RawStep", np.array([1, 0]).tobytes())]
        sent.clear()
        envs.step(
            np.array([0, 1, 1, 0], dtype=np.int32)
        )  # another dtype: pickled, so each env gets it as given
        envs.step(np.array([1, 1]), env_ids=[0, 3])  # some envs of a share: pickled with their ids
        assert [name for name, _ in sent] == ["Step", "Step", "Step", "Step"]


def test_raw_actions_of_the_wrong_size_are_an_error_of_that_step_only():
    with torchwm.make_vec(
        "CartPole-v1", num_envs=4, backend="subproc", backend_kwargs={"num_workers": 2}
    ) as envs:
        envs.reset(seed=0)
        worker = envs._stepper._handles[0]
        worker.send(RawStep(), raw=np.array([1], dtype=np.int64).data)  # one action for its two envs
        reply = worker.reply(Deadline.after(10))
        assert isinstance(reply, ErrorReply)
        assert "came as 8 bytes, expected 16" in reply.summary
        worker.send(Step([0, 1], np.array([1, 1])))  # the pipe is still in step
        assert worker.reply(Deadline.after(10)).rewards.tolist() == [1.0, 1.0]
        obs, rewards, *_ = envs.step(np.array([0, 1, 1, 0]))
        assert rewards.tolist() == [1.0] * 4


@pytest.mark.parametrize("num_workers", [1, 2])
def test_subproc_steps_the_same_arrays_as_sync(num_workers):
    actions = np.random.default_rng(0).integers(0, 2, size=(60, 5))
    results = {}
    for backend, kwargs in [("sync", {}), ("subproc", {"num_workers": num_workers})]:
        with torchwm.make_vec("CartPole-v1", num_envs=5, backend=backend, backend_kwargs=kwargs) as envs:
            trace = [envs.reset(seed=3)[0]]
            for row in actions:
                obs, rewards, terminations, truncations, _ = envs.step(row)
                trace += [obs, rewards, terminations, truncations]
        results[backend] = trace
    for ours, reference in zip(results["subproc"], results["sync"], strict=True):
        np.testing.assert_array_equal(ours, reference)
        assert ours.dtype == reference.dtype
