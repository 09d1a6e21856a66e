"""Online exactness check: a share of completed frames re-run on the unsplit model in a background thread.

The master offers (frame, input, output) as results arrive; a bounded queue holds what waits. Offline runs wait
for room (every sampled frame is checked); live runs never wait: a sample that finds the queue full is counted
as `missed`, so an endless run never piles up frames.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, Optional, Tuple

import numpy as np

from cnnvideo.results import labels

log = logging.getLogger(__name__)


class OnlineChecker:
    """Compares sampled outputs with `reference(frame_rgb)` (the whole model) as the run goes."""

    def __init__(self, reference: Callable[[np.ndarray], np.ndarray], share: float = 1.0, queue: int = 4,
                 block: bool = True, defer: bool = False,
                 compare: Optional[Callable[[np.ndarray, np.ndarray], Any]] = None,
                 error: Optional[Callable[[np.ndarray, np.ndarray], float]] = None) -> None:
        self.reference = reference
        # compare(output, reference output) for a model whose outputs are not ImageNet scores (a detector: its
        # boxes matched); None = a classifier's top-1 and top-5 agreement
        self.compare = compare
        # error(output, reference output): a frame's max abs error; None = element-wise (a detector's rows are
        # compared blind to their order instead: tied scores may swap)
        self.error = error
        # defer: nothing is checked until close() or a full queue (the reference's CPU stays out of the run)
        self.defer = bool(defer)
        self.draining = False
        self.share = float(share)
        self.queue_cap = max(int(queue), 1)
        self.block = block
        self.cond = threading.Condition()
        self.queue: Deque[Tuple[int, np.ndarray, np.ndarray]] = collections.deque()
        self.offered = self.sampled = self.checked = self.missed = 0
        self.max_err = 0.0
        self.errors: Dict[int, float] = {}  # frame -> max abs error (checked frames only)
        self.problem: Optional[str] = None
        self.busy_s = 0.0
        self.top1_same = 0  # checked frames whose top-1 equals the reference's
        self.top5_overlap = 0.0  # sum over checked frames of the share of the reference's top-5 kept
        self.closed = False
        self.checking = 0  # frames taken off the queue and being checked (0 or 1)
        self.thread = threading.Thread(target=self._run, name="online-check", daemon=True)
        self.thread.start()

    def wants(self) -> bool:
        """True if the next offered frame is in the sample (every frame at share 1, about 1 in 1/share else)."""
        k = self.offered
        return int((k + 1) * self.share) > int(k * self.share)

    def offer(self, frame: int, rgb: np.ndarray, output: np.ndarray) -> bool:
        """Queue the frame for checking if sampled; False if not sampled or (live) the queue was full."""
        with self.cond:
            take = self.wants()
            self.offered += 1
            if not take:
                return False
            self.sampled += 1
            while self.block and self._held() >= self.queue_cap and not self.closed:
                self.cond.wait(0.5)
            if self._held() >= self.queue_cap or self.closed:
                self.missed += 1
                return False
            self.queue.append((frame, rgb, np.array(output, copy=True)))
            self.cond.notify_all()
            return True

    def _run(self) -> None:
        while True:
            with self.cond:
                while (not self.queue or self._holding()) and not self.closed:
                    self.cond.wait(0.5)
                if not self.queue:
                    return
                frame, rgb, out = self.queue.popleft()  # close() may clear the queue meanwhile: it is ours now
                self.checking = 1
            t0 = time.time()
            ref = self.reference(rgb)
            if ref.shape != out.shape:
                err = float("inf")
                problem = "frame %d: result shape %r differs from the reference's %r" % (frame, out.shape, ref.shape)
            else:
                problem = None
                err = self._error(out, ref)
                if self.compare is not None:
                    self.compare(out, ref)
                    same, overlap = False, 0.0
                elif out.size:
                    same = labels.top1(out) == labels.top1(ref)
                    overlap = labels.top5_overlap([out], [ref]) or 0.0
                else:
                    same, overlap = True, 1.0
            with self.cond:
                self.checking = 0
                self.busy_s += time.time() - t0
                self.checked += 1
                self.errors[frame] = err
                if problem is None:
                    self.top1_same += int(same)
                    self.top5_overlap += overlap
                self.max_err = max(self.max_err, err)
                if problem and self.problem is None:
                    self.problem = problem
                self.cond.notify_all()

    def _error(self, out: np.ndarray, ref: np.ndarray) -> float:
        if not out.size:
            return 0.0
        if self.error is not None:
            return float(self.error(out, ref))
        return float(np.max(np.abs(ref.astype(np.float64) - out.astype(np.float64))))

    def _held(self) -> int:
        """Frames queued or being checked (holding the lock)."""
        return len(self.queue) + self.checking

    def pending(self) -> int:
        """Samples queued or being checked now: those whose checks are still to come (not the missed ones)."""
        with self.cond:
            return self._held()

    def _holding(self) -> bool:
        """A deferred checker holds its queue until close() or until the queue is full (holding the lock)."""
        return self.defer and not self.draining and self._held() < self.queue_cap

    def close(self, timeout: float = 600.0) -> None:
        """Check what is queued (up to `timeout` s), then stop the thread."""
        deadline = time.time() + timeout
        with self.cond:
            self.draining = True
            self.cond.notify_all()
            while self._held() and time.time() < deadline and self.thread.is_alive():
                self.cond.wait(0.5)
            self.closed = True
            self.missed += len(self.queue)
            self.queue.clear()
            self.cond.notify_all()
        self.thread.join(5)

    def agreement(self) -> Tuple[Optional[float], Optional[float]]:
        """(top-1 agreement, mean top-5 overlap) over the checked frames, None before any."""
        with self.cond:
            if not self.checked or self.compare is not None:
                return None, None
            return self.top1_same / float(self.checked), self.top5_overlap / float(self.checked)

    def summary(self) -> Dict[str, Any]:
        """The report's `check` section."""
        with self.cond:
            return {"share": self.share, "offered": self.offered, "sampled": self.sampled, "checked": self.checked,
                    "missed": self.missed, "max_abs_err": self.max_err if self.checked else None,
                    "busy_s": round(self.busy_s, 3), "waits_for_room": self.block, "deferred": self.defer}
