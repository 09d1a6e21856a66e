"""Frame tracking: every frame's record, the frames in flight, re-sends, counters and the run's generation.

Pure bookkeeping (no network, no clock, no locks: the master calls it holding its condition). Invariants:
every frame id ends exactly once, as completed or dropped with a reason; a result counts only if its frame
is in flight in the current generation; a resync bumps the generation, so anything of an older one is stale.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Optional, Sequence, Tuple

from cnnvideo.results import labels
from cnnvideo.results.report import FrameRecord


class FrameTracker:
    """Which frame goes next, which are in flight, how each ended."""

    def __init__(self, n_frames: int, retries: int, cap: int = 0) -> None:
        self.n_frames = int(n_frames)
        self.retries = int(retries)  # re-sends before a frame is dropped
        self.cap = int(cap)  # frames in flight at most (0 = unlimited)
        self.records: Dict[int, FrameRecord] = {}
        self.flying: set = set()
        self.retry_q: collections.deque = collections.deque()
        self.next_new = 0
        self.generation = 0
        self.pending_fault: Optional[str] = None
        self.completed = self.dropped = self.retried = self.ignored = self.resyncs = 0
        self.replica_resyncs = 0  # faults a pool plan handled by leaving replicas out, without a new generation
        self.finish_times: collections.deque = collections.deque(maxlen=256)  # recent, seconds since t0
        self.t0 = 0.0  # when the run started (finish times and states are relative to it)

    # ------------------------------------------------------------------ state
    @property
    def ended(self) -> int:
        """Frames completed or dropped."""
        return self.completed + self.dropped

    def done(self) -> bool:
        return self.ended >= self.n_frames

    def label_top5(self, frame: int, output) -> None:
        """Output-store sink of a classifier's run: the frame's top-5 (index, ImageNet name, softmax score) into its
        record."""
        rec = self.records.get(frame)
        if rec is not None:
            rec.top5 = [list(t) for t in labels.topk(output, 5)]

    def known_frames(self, n: int) -> None:
        """The source has given `n` frames so far (frames are taken one by one: the total is known at the end)."""
        self.n_frames = int(n)

    def in_flight(self) -> int:
        return len(self.flying)

    def ready(self) -> bool:
        """Whether the run loop has something to do now: a fault to handle, the end, or a frame to send."""
        if self.pending_fault is not None or self.done():
            return True
        has_work = bool(self.retry_q) or self.next_new < self.n_frames
        return has_work and (self.cap <= 0 or len(self.flying) < self.cap)

    def next_frame(self) -> Optional[Tuple[int, bool]]:
        """(frame, is_resend) to send next (re-sends first), or None if there is none now."""
        if self.retry_q:
            return self.retry_q.popleft(), True
        if self.next_new < self.n_frames:
            self.next_new += 1
            return self.next_new - 1, False
        return None

    def cuts_of(self, frame: int) -> List[int]:
        """The plan a frame was first sent with (a re-send keeps it)."""
        return list(self.records[frame].cuts)

    def oldest_pending(self) -> Optional[int]:
        """The oldest frame in flight or queued for a re-send (None if there is none): later results wait for it."""
        waiting = [min(self.flying)] if self.flying else []
        if self.retry_q:
            waiting.append(min(self.retry_q))
        return min(waiting) if waiting else None

    def state(self) -> Tuple[List[Tuple[float, List[int]]], List[float]]:
        """((send time, cuts) of the frames in flight, recent finish times), seconds since t0."""
        flying = [(self.records[f].sent_at - self.t0, list(self.records[f].cuts)) for f in sorted(self.flying)]
        return flying, sorted(self.finish_times)

    # ------------------------------------------------------------------ events
    def sent(self, frame: int, cuts: Sequence[int], at: float, resend: bool, route: Sequence[int],
             groups: Sequence[Sequence[int]]) -> FrameRecord:
        """The frame left the master (again, if resend) at `at` on `route`, one worker of each of its plan's
        `groups`."""
        rec = self.records.get(frame)
        if rec is None:
            rec = self.records[frame] = FrameRecord(frame, list(cuts), sent_at=at)
        rec.groups = [list(g) for g in groups]
        rec.route = list(route)
        rec.attempts += 1
        if resend:
            self.retried += 1
        self.flying.add(frame)
        return rec

    def complete(self, frame: int, generation: int, worker: int, at: float) -> bool:
        """A result for `frame` computed in `generation` arrived at `at`; False (and counted as ignored) if it is
        stale, a duplicate or unexpected."""
        rec = self.records.get(frame)
        if generation != self.generation or rec is None or rec.status != "pending" or frame not in self.flying:
            self.ignored += 1
            return False
        rec.done_at, rec.worker, rec.status = at, worker, "completed"
        self.finish_times.append(at - self.t0)
        self.flying.discard(frame)
        self.completed += 1
        return True

    def fault(self, message: str, generation: Optional[int] = None) -> bool:
        """Note a fault of `generation` (None = the current one) for the run loop; False if it is stale or one is
        already pending (one resync handles every fault of its generation)."""
        if generation is not None and generation != self.generation:
            return False
        if self.pending_fault is not None:
            return False
        self.pending_fault = message
        return True

    def resync(self, fault: str) -> Tuple[int, List[int], List[int]]:
        """Start a new generation after `fault`: frames in flight are queued for re-sending, or dropped once they
        have been sent 1 + retries times. Returns (generation, re-sent frames, dropped frames)."""
        self.generation += 1
        self.pending_fault = None
        self.resyncs += 1
        again, dropped = self._send_again(sorted(self.flying), fault)
        return self.generation, again, dropped

    def release_workers(self, workers: Sequence[int], fault: str) -> Tuple[List[int], List[int]]:
        """Replicas `workers` are left out after `fault`, with no new generation: only the frames in flight on a
        route through one of them are queued again (or dropped once sent 1 + retries times); the others go on.
        Returns (re-sent frames, dropped frames)."""
        self.pending_fault = None
        self.replica_resyncs += 1
        return self._send_again(self.flying_through(workers), fault)

    def resend_through(self, workers: Sequence[int], reason: str) -> Tuple[List[int], List[int]]:
        """The frames in flight through `workers` (which left without a fault) are queued again, or dropped once sent
        1 + retries times: (re-sent frames, dropped frames). A pending fault stays pending."""
        return self._send_again(self.flying_through(workers), reason)

    def flying_through(self, workers: Sequence[int]) -> List[int]:
        """The frames in flight whose route runs a stage on one of `workers`."""
        gone = set(workers)
        return [f for f in sorted(self.flying) if gone & set(self.route_of(f))]

    def route_of(self, frame: int) -> List[int]:
        """The worker of each stage of `frame` as sent."""
        return list(self.records[frame].route)

    def _send_again(self, frames: List[int], fault: str) -> Tuple[List[int], List[int]]:
        """Frames in flight that `fault` cut off leave the flight: queued for re-sending, or dropped once sent
        1 + retries times. Returns (re-sent frames, dropped frames)."""
        again, dropped = [], []
        for f in frames:
            rec = self.records[f]
            if rec.attempts > self.retries:
                rec.status = "dropped"
                rec.reason = "no result after %d sends; last fault: %s" % (rec.attempts, fault)
                self.dropped += 1
                dropped.append(f)
            else:
                again.append(f)
        self.flying.difference_update(frames)
        self.retry_q = collections.deque(sorted(set(again) | set(self.retry_q)))
        return again, dropped

    def main_plan(self, n_workers: int) -> List[int]:
        """The plan most frames used."""
        counts: Dict[tuple, int] = {}
        for r in self.records.values():
            if r.cuts:
                counts[tuple(r.cuts)] = counts.get(tuple(r.cuts), 0) + 1
        return list(max(counts.items(), key=lambda kv: kv[1])[0]) if counts else [0] * (n_workers + 1)

    def ordered(self) -> List[FrameRecord]:
        return [self.records[f] for f in sorted(self.records)]
