"""The state of one run that every part of the master reads and may end: its lock, why it failed, whether it is
closing, whether the intake ended (and why), the signal that stopped it, when it started and when a peer last
showed progress. The role builds one and hands it to each part; parts change it only through these methods."""
from __future__ import annotations

import logging
import threading
import time
from typing import Optional

log = logging.getLogger(__name__)


class RunState:
    """One run's shared flags under one condition (`cond`): the parts' only shared mutable state besides the
    tracker and the pool."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.failure: Optional[str] = None
        self.closing = False
        self.feed_done = False  # no new frames: the run has its frames, the source ended or a signal came
        self.source_error: Optional[str] = None
        self.interrupted: Optional[int] = None  # the signal that ended the run
        self.t_run = 0.0  # when the first frame was taken (0 before)
        self.last_event = time.time()  # the last sign of progress (the stall watch measures from it)

    def fail(self, message: str) -> None:
        """The run cannot go on: stop with `message` (the first failure is kept)."""
        with self.cond:
            self.fail_locked(message)

    def fail_locked(self, message: Optional[str]) -> None:
        """fail() for a caller holding `cond`; a None or empty message changes nothing."""
        if message and self.failure is None:
            self.failure = message
            log.debug("failure: %s", message)
        self.cond.notify_all()

    def name_failure(self, tag: str) -> None:
        """Prefix the failure line with `tag` (the worker that is down), unless it already starts with it."""
        with self.cond:
            if self.failure is not None and not self.failure.startswith(tag):
                self.failure = "%s: %s" % (tag, self.failure)

    def progressed(self, at: Optional[float] = None) -> None:
        """A peer showed progress (a result, a report, a resync): the stall watch starts over."""
        self.last_event = time.time() if at is None else at

    def intake_ended(self, source_error: Optional[str] = None) -> None:
        """No new frames will be taken (the clip ended, the source failed with `source_error`, or a signal)."""
        with self.cond:
            if source_error is not None:
                self.source_error = source_error
            self.feed_done = True
            self.cond.notify_all()

    def started(self, at: float) -> None:
        self.t_run = at

    def interrupt(self, signum: int) -> bool:
        """The first signal ends the intake (True); a later one is for fail()."""
        if self.interrupted is not None:
            return False
        self.interrupted = signum
        return True

    def close(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
