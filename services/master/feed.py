"""The master's frames: taken from a source as they arrive, numbered in send order, pixels kept only while a frame
is in flight (a re-send after a resync needs them); the input change of recent sent frames for the planner."""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional

import numpy as np

from cnnvideo.config import Config
from cnnvideo.video.frames import read_frames, single_threaded
from cnnvideo.video.sources import Source, SourceError, SourceOptions
from cnnvideo.wire.hop import InputChange

log = logging.getLogger(__name__)

WINDOW = 8  # sent-frame pairs in the running input-change window (live planning)


def source_options(cfg: Config) -> SourceOptions:
    s = cfg.source
    return SourceOptions(realtime=s.realtime, drop=s.drop, queue=s.queue, loop=s.loop, fps=s.fps,
                         reopen_s=s.reopen_s)


class Feed:
    """Frames of the run: `take()` gives the next frame id, `frame(f)` its pixels until `release(f)`."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.limit = int(cfg.frames)  # 0 = until stop()
        self.offline = cfg.source.mode == "offline"
        self.source = Source(cfg.video, tuple(cfg.frame_size), source_options(cfg),
                             limit=self.limit if not cfg.source.realtime else 0)
        self.pixels: Dict[int, np.ndarray] = {}
        self.captured_at: Dict[int, float] = {}
        self.first_read_at: Optional[float] = None  # when the master read its first frame (report.json start)
        self.capture_seq: Dict[int, int] = {}
        self.next_id = 0
        self.window: Deque[np.ndarray] = collections.deque(maxlen=WINDOW)
        self.sent_change = InputChange(cfg.delta.input_threshold)  # what the input hop sends of each taken frame
        self.stopping = threading.Event()
        self.error: Optional[str] = None
        self.ahead: Optional[np.ndarray] = None  # offline: [N, 3] input change of the clip's frames (look-ahead)
        self.peak_held = 0
        self.pending: Deque[int] = collections.deque()  # taken by warm_up, not yet sent
        self.to_trainer = 0  # frames captured for the trainer to fit on (a live source, opened once)
        self.to_calibration = 0  # frames captured for int8 calibration (a live source; calibrating.py)
        self.taps: List[Callable[[np.ndarray, float], None]] = []  # each taken frame's (pixels, capture time) also
        # goes to these (a recalibration sampling the camera's frames while the run goes on: recalibration.py)

    def open(self) -> None:
        """Open the source (SourceError with one line if it cannot be); offline, scan the clip's input change.
        OpenCV runs single-threaded in the master (frames.single_threaded)."""
        single_threaded()
        if self.offline:
            self.ahead = self._scan()
        self.source.open()

    def run_length(self) -> int:
        """How many frames this run takes, when that is known before it ends (an offline run of `frames` frames,
        once opened); 0 when it is not (a live source, or a run until a signal)."""
        return len(self.ahead) if self.ahead is not None and self.limit > 0 else 0

    def _scan(self) -> np.ndarray:
        """Input change rates of the first `frames` frames (one pass of the clip when frames is 0), frame by
        frame: the look-ahead of offline mode, without holding the frames."""
        change, rows = InputChange(self.cfg.delta.input_threshold), []
        for f in read_frames(self.cfg.video, tuple(self.cfg.frame_size), limit=self.limit, loop=self.limit > 0):
            rows.append(change.rates(f))
        return np.array(rows)

    def training_frames(self, n: int, timeout: float = 60.0) -> list:
        """The source's next n frames for the trainer (not frames of the run: captured = taken + to_trainer +
        skipped); SourceError if the source ends or fails first."""
        frames = []
        deadline = time.time() + timeout
        while len(frames) < n:
            item = self.source.get(timeout=0.5)
            if item is not None:
                frames.append(item.rgb)
                deadline = time.time() + timeout
            elif self.source.ended or time.time() > deadline or self.stopping.is_set():
                raise SourceError("source %s gave %d of the %d frames the trainer fits on"
                                  % (self.source.stats()["video"], len(frames), n))
        self.to_trainer += len(frames)
        return frames

    @property
    def exhausted(self) -> bool:
        return self.limit > 0 and self.next_id >= self.limit

    def warm_up(self, n: int) -> int:
        """Live: take up to n frames now (they are sent first) so the planner starts from their input change;
        their wait counts in their capture-to-result latency. Returns how many were taken."""
        for _ in range(n):
            f = self._take_one()
            if f is None:
                break
            self.pending.append(f)
        return len(self.pending)

    def take(self) -> Optional[int]:
        """The next frame's id (its pixels held until release), or None when the run has its frames, the source
        ended or stop() was called. SourceError if the source failed (frames taken before stay valid)."""
        if self.pending:
            return self.pending.popleft()
        return self._take_one()

    def _take_one(self) -> Optional[int]:
        while not self.exhausted and not self.stopping.is_set():
            item = self.source.get(timeout=0.5)
            if item is None:
                if self.source.ended:
                    return None
                continue
            f = self.next_id
            self.next_id += 1
            if f == 0:
                self.first_read_at = time.time()
            self.pixels[f] = item.rgb
            self.captured_at[f] = item.t
            self.capture_seq[f] = item.seq
            self.peak_held = max(self.peak_held, len(self.pixels))
            if self.ahead is None:  # live: the planner's input change is the recent frames' (offline: the scan's)
                self.window.append(self.sent_change.rates(item.rgb))
            for tap in list(self.taps):
                tap(item.rgb, item.t)
            return f
        return None

    def frame(self, f: int) -> np.ndarray:
        return self.pixels[f]

    def release(self, f: int) -> None:
        """Frame f ended (completed or dropped): its pixels and capture facts go."""
        self.pixels.pop(f, None)
        self.captured_at.pop(f, None)
        self.capture_seq.pop(f, None)

    def stop(self) -> None:
        """No new frames after this (a signal): frames in flight still drain."""
        self.stopping.set()

    def change(self, frame: int, n: int) -> np.ndarray:
        """[n, 3] input change rates the planner may use for frames frame..frame+n-1: offline the clip's own
        (look-ahead), live the mean of the recent sent frames, repeated (only the past)."""
        if self.ahead is not None and len(self.ahead):
            idx = np.arange(frame, frame + n) % len(self.ahead)
            return self.ahead[idx]
        recent = [w for w in list(self.window)[1:]] or list(self.window)  # the first row is a keyframe (all 1)
        mean = np.mean(recent, axis=0) if recent else np.ones(3)
        return np.tile(mean, (n, 1))

    def mean_change(self) -> Optional[np.ndarray]:
        """Mean input change for the cost model: offline over the clip, live over the running window."""
        if self.ahead is not None and len(self.ahead) > 1:
            return self.ahead[1:].mean(axis=0)
        recent = list(self.window)[1:]
        return np.mean(recent, axis=0) if recent else None

    def close(self) -> None:
        self.source.close()

    def stats(self, processed: int) -> Dict[str, Any]:
        """The report's `source` section (skipped = captured - frames taken into the run - frames to the trainer and
        to int8 calibration)."""
        st = self.source.stats()
        st["taken"] = self.next_id
        st["to_trainer"] = self.to_trainer
        st["to_calibration"] = self.to_calibration
        st["processed"] = processed
        st["peak_frames_held"] = self.peak_held
        st["skipped_share"] = round(st["skipped"] / st["captured"], 4) if st["captured"] else 0.0
        return st


__all__ = ["Feed", "SourceError", "source_options"]
