"""torchwm.vector.transports.worker_process: what runs inside a worker process, its end of the pipe."""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.reduction import ForkingPickler

import pytest

from torchwm.vector.messages import ErrorReply
from torchwm.vector.transports.worker_process import ParentGone, ParentPipe, send_reply


def test_a_reply_that_cannot_be_pickled_is_answered_with_an_error_naming_the_env():
    parent, worker = multiprocessing.Pipe()
    try:
        send_reply(worker, 7, [1, threading.Lock()], first_env=4)
        seq, reply, raw_count = ForkingPickler.loads(parent.recv_bytes())
        assert seq == 7 and raw_count == 0
        assert isinstance(reply, ErrorReply)
        assert reply.env == 1  # the local index of the env whose value failed
        assert "env 5" in reply.summary and "cannot be pickled" in reply.summary
        # The pipe stays in step: the next reply is read whole.
        send_reply(worker, 8, [1, 2])
        assert ForkingPickler.loads(parent.recv_bytes()) == (8, [1, 2], 0)
    finally:
        parent.close()
        worker.close()


def test_raw_buffers_follow_their_reply():
    parent, worker = multiprocessing.Pipe()
    try:
        send_reply(worker, 1, "rows", raw=(b"abc", b"de"))
        assert ForkingPickler.loads(parent.recv_bytes()) == (1, "rows", 2)
        assert [parent.recv_bytes(), parent.recv_bytes()] == [b"abc", b"de"]
    finally:
        parent.close()
        worker.close()


def test_the_parents_end_closed_is_parent_gone_not_an_envs_error():
    parent, worker = multiprocessing.Pipe()
    pipe = ParentPipe(worker)
    parent.close()
    with pytest.raises(ParentGone):
        pipe.recv_bytes()
    assert not issubclass(ParentGone, Exception)  # no `except Exception` answering env errors takes it
    worker.close()
