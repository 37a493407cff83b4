"""torchwm.vector.transports.handoff_ping: the ping round trips through a word of shared memory that time
the machine's hand-off (a thread answers here, as the helper process does for worker_count)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from torchwm.vector.transports import handoff_ping


class Alive:
    """What round_trips asks of its helper: whether it still runs."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self.exitcode = None

    def is_alive(self) -> bool:
        return self.thread.is_alive()


@pytest.mark.parametrize("sleep", [False, True])
def test_each_ping_is_answered_and_timed(sleep):
    words = np.zeros(16, dtype=np.int32)
    answerer = threading.Thread(target=handoff_ping.answer_pings, args=(words,), daemon=True)
    answerer.start()
    try:
        times = handoff_ping.round_trips(words, 20, sleep, Alive(answerer), give_up=float("inf"))
    finally:
        words[0] = -1  # the answerer's stop word
        answerer.join(5)
    assert len(times) == 20 and all(t > 0 for t in times)
    assert int(words[1]) == 20  # the last pong answered the last ping
    assert not answerer.is_alive()


def test_a_helper_that_stops_answering_fails_the_measurement_within_its_deadline():
    words = np.zeros(16, dtype=np.int32)
    gone = threading.Thread(target=lambda: None)
    gone.start()
    gone.join()
    with pytest.raises(TimeoutError, match="stopped answering pings"):
        handoff_ping.round_trips(words, 1, False, Alive(gone), give_up=0.0)
