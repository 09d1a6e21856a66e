"""Online checking: the sampled share of frames is compared with the reference in the background; a live
checker never makes the caller wait and never holds more than its queue."""
import time

import numpy as np
import pytest

from cnnvideo.results.exactness import OnlineChecker


def ref(x):
    return x.astype(np.float32) * 2


def test_checks_every_frame_and_finds_an_error():
    """At share 1 with waiting allowed, every frame is checked; one wrong output shows as its error."""
    c = OnlineChecker(ref, share=1.0, queue=2, block=True)
    for f in range(20):
        x = np.full((4, 4), f, dtype=np.uint8)
        out = ref(x)
        if f == 7:
            out = out + 0.5
        c.offer(f, x, out)
    c.close()
    s = c.summary()
    assert s["checked"] == 20 and s["missed"] == 0 and s["max_abs_err"] == pytest.approx(0.5)
    assert c.errors[7] == pytest.approx(0.5) and c.errors[6] == 0.0


def test_share_samples_that_fraction():
    """share 0.25 samples 1 frame in 4."""
    c = OnlineChecker(ref, share=0.25)
    for f in range(40):
        c.offer(f, np.zeros(2, np.uint8), np.zeros(2, np.float32))
    c.close()
    assert c.summary()["sampled"] == 10 and c.summary()["checked"] == 10


def test_live_checker_never_blocks_and_stays_bounded():
    """A slow reference behind a fast producer: offers return at once, the queue stays at its cap, the rest
    is counted as missed."""
    def slow(x):
        time.sleep(0.05)
        return ref(x)

    c = OnlineChecker(slow, share=1.0, queue=3, block=False)
    t0 = time.time()
    peak = 0
    for f in range(200):
        c.offer(f, np.zeros(8, np.uint8), np.zeros(8, np.float32))
        peak = max(peak, len(c.queue))
    assert time.time() - t0 < 1.0 and peak <= 3
    # the checks still to come are the held ones, never the missed ones (a recalibration skips exactly these)
    assert 1 <= c.pending() <= 3 + 1
    with c.cond:  # (read together: the checker's thread moves them)
        assert c.sampled - c.checked - c.missed == c._held()
    c.close()
    assert c.pending() == 0
    s = c.summary()
    assert s["missed"] > 150 and s["checked"] + s["missed"] == 200 and s["max_abs_err"] == 0.0


def test_deferred_checker_holds_every_sample_until_close():
    """defer: the reference is not run while the run goes (its CPU would compete with the workers on a shared
    host), then close() checks every held frame and finds the wrong one."""
    calls = []

    def counting(x):
        calls.append(1)
        return ref(x)

    c = OnlineChecker(counting, share=1.0, queue=8, block=True, defer=True)
    for f in range(5):
        x = np.full((4, 4), f, dtype=np.uint8)
        c.offer(f, x, ref(x) + (0.25 if f == 3 else 0.0))
    time.sleep(0.3)
    assert not calls and c.summary()["checked"] == 0
    c.close()
    s = c.summary()
    assert len(calls) == 5 and s["checked"] == 5 and s["missed"] == 0 and s["deferred"] is True
    assert c.errors[3] == pytest.approx(0.25) and c.errors[2] == 0.0


def test_deferred_checker_starts_when_its_queue_is_full():
    """A deferred checker whose queue fills (a long run) checks as it goes instead of blocking the producer."""
    c = OnlineChecker(ref, share=1.0, queue=2, block=True, defer=True)
    t0 = time.time()
    for f in range(6):
        c.offer(f, np.zeros(2, np.uint8), np.zeros(2, np.float32))
    assert time.time() - t0 < 5
    deadline = time.time() + 5
    while c.summary()["checked"] < 4 and time.time() < deadline:
        time.sleep(0.05)
    assert c.summary()["checked"] >= 4  # checked during the run: the queue held at most 2
    c.close()
    assert c.summary()["checked"] == 6


def test_closing_while_a_check_runs_loses_nothing_and_raises_nothing():
    """close(timeout=0) at shutdown, while the thread is inside a slow check: the thread finishes that frame (it
    is counted once, as checked), the frames still queued count as missed, and the thread ends cleanly (it used to
    pop from the queue that close() had just emptied: IndexError in the thread)."""
    import threading

    started, release = threading.Event(), threading.Event()
    errors = []
    threading.excepthook, old = (lambda a: errors.append(a.exc_value)), threading.excepthook

    def slow(x):
        started.set()
        release.wait(5)
        return ref(x)

    try:
        c = OnlineChecker(slow, share=1.0, queue=4, block=False)
        for f in range(3):
            x = np.full((2, 2), f, dtype=np.uint8)
            c.offer(f, x, ref(x))
        assert started.wait(5)
        c.close(timeout=0)
        release.set()
        c.thread.join(5)
    finally:
        threading.excepthook = old
    s = c.summary()
    assert not errors and not c.thread.is_alive()
    assert s["checked"] == 1 and s["missed"] == 2 and s["max_abs_err"] == 0.0
