"""rpc/window.py: the send window runs calls concurrently up to its depth, blocks the producer beyond it, and keeps
transfer times honest when calls overlap."""
import threading
import time

import pytest

from cnnvideo.rpc.window import SendWindow


def test_a_slow_answer_does_not_hold_the_next_send():
    """Proves the point of the window: while one call waits (a throttled receiver), the next ones start, up to the
    depth; the depth+1-th submit waits for a slot."""
    w = SendWindow("t", depth=2)
    release = threading.Event()
    started = []

    def call(i):
        started.append(i)
        release.wait(5)

    assert w.submit(call, 0) and w.submit(call, 1)
    time.sleep(0.2)
    assert sorted(started) == [0, 1] and w.in_flight() == 2
    t = threading.Thread(target=w.submit, args=(call, 2))
    t.start()
    time.sleep(0.3)
    assert started.count(2) == 0, "a third call started beyond depth 2"
    release.set()
    t.join(5)
    time.sleep(0.2)
    assert sorted(started) == [0, 1, 2]
    w.close()


def test_depth_one_is_the_old_blocking_sender():
    """depth 1 runs calls one after another, in order."""
    w = SendWindow("t", depth=1)
    order = []
    for i in range(5):
        w.submit(lambda i=i: (time.sleep(0.01), order.append(i)))
    w.submit(lambda: None)
    time.sleep(0.2)
    assert order == [0, 1, 2, 3, 4]
    w.close()


def test_busy_start_counts_a_message_from_when_the_link_was_free():
    """Two overlapping messages: the second's transfer starts when the first finished, not when it was sent."""
    w = SendWindow("t", depth=2)
    assert w.busy_start(10.0, 10.5) == 10.0
    assert w.busy_start(10.1, 10.9) == 10.5
    assert w.busy_start(12.0, 12.2) == 12.0  # an idle link: from its own send
    w.close()


def test_closed_window_takes_nothing_and_bad_depth_is_refused():
    w = SendWindow("t", depth=2)
    w.close()
    assert w.submit(lambda: None) is False
    with pytest.raises(ValueError, match="depth"):
        SendWindow("t", depth=0)
