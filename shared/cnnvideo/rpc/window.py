"""A send window: up to `depth` blocking unary calls on one link at once, started in submission order.

Why: a hop's `Process` call returns when the receiver has queued the task. A receiver under a CPU cap (a cgroup's
CFS quota) that has used its quota answers only in its next period, up to 100 ms later, and a sender that waited
for each answer before sending the next message left the link idle for that time: at caps 0.1 the input hop of a
67 kB frame took 70 ms a message where the wire needs 22 ms. With a window the next message goes out while the
receiver is throttled; the receiver orders tasks by their sequence numbers (services/worker/runloop.Run.accept).

`busy_start` keeps transfer timings honest when calls overlap: a message's transfer starts when it was sent or when
the link finished the message before it, whichever is later.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

SEND_WINDOW = 3  # calls in flight per link: enough to cover one throttled period at Pi-like caps


class SendWindow:
    """Runs `fn(*args)` on at most `depth` threads; submit() blocks while `depth` calls are in flight (back-pressure
    to the producer). Calls must handle their own errors: an exception is logged by nobody."""

    def __init__(self, name: str, depth: int = SEND_WINDOW) -> None:
        if depth < 1:
            raise ValueError("send window depth must be >= 1, got %d" % depth)
        self.depth = depth
        self._slots = threading.BoundedSemaphore(depth)
        self._pool = ThreadPoolExecutor(max_workers=depth, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._link_free_at = 0.0
        self._closed = False

    def submit(self, fn: Callable[..., None], *args) -> bool:
        """Start fn(*args) once a slot is free; False (and nothing started) after close()."""
        while not self._slots.acquire(timeout=0.5):
            if self._closed:
                return False
        if self._closed:
            self._slots.release()
            return False

        def run() -> None:
            try:
                fn(*args)
            finally:
                self._slots.release()

        try:
            self._pool.submit(run)
        except RuntimeError:  # closed meanwhile
            self._slots.release()
            return False
        return True

    def busy_start(self, sent_at: float, done_at: float) -> float:
        """The start of a finished call's transfer: max(sent_at, when the link finished the previous one)."""
        with self._lock:
            start = max(sent_at, min(self._link_free_at, done_at))
            self._link_free_at = max(self._link_free_at, done_at)
        return start

    def in_flight(self) -> int:
        return self.depth - self._slots._value  # noqa: SLF001 - a read for tests and logs

    def close(self) -> None:
        """Take no more calls; calls in flight finish on their own (their timeouts bound them)."""
        self._closed = True
        self._pool.shutdown(wait=False)
