"""The best-scoring frame of each track, written as `<out_dir>/<track_id>.jpg` with the box drawn when the
track ends: one picture per object for a notification or the events page.

Memory is bounded: a frame is copied only when it beats the track's best score, and at most `max_tracks`
frames are held (beyond that the track whose best frame is oldest gives its place up, with a log line),
so the cost is at most max_tracks x one frame.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import Optional, Tuple

import numpy as np

from .types import Box, Event

LOG = logging.getLogger("cnnvideo.events.snapshots")


@dataclasses.dataclass
class Best:
    """A track's best frame so far (its own copy) and the box and score it was seen with."""

    frame: np.ndarray
    box: Box
    score: float
    label: str


class SnapshotKeeper:
    """Keep each live track's best frame (`offer`) and write it on the track's `end` (`finish`)."""

    def __init__(self, out_dir: str, max_tracks: int = 32, colour_rgb: Tuple[int, int, int] = (0, 255, 0),
                 thickness: int = 2, jpeg_quality: int = 90):
        if max_tracks < 1:
            raise ValueError("max_tracks must be >= 1")
        self.out_dir = out_dir
        self.max_tracks = max_tracks
        self.colour_rgb = tuple(int(c) for c in colour_rgb)
        self.thickness = int(thickness)
        self.jpeg_quality = int(jpeg_quality)
        self._best: "collections.OrderedDict[int, Best]" = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._best)

    def offer(self, event: Event, frame: Optional[np.ndarray]) -> bool:
        """Take `frame` (H x W x 3 RGB uint8) as the track's best if the event's score beats it; True if kept.

        The array is copied only then, so the caller may reuse its buffer.
        """
        if frame is None or event.type not in ("new", "update", "entered", "left"):
            return False
        if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
            return False
        old = self._best.get(event.track_id)
        if old is not None and event.score <= old.score:
            return False
        if old is None and len(self._best) >= self.max_tracks:
            gone, _ = self._best.popitem(last=False)
            LOG.info("events.snapshots: more than %d live tracks; track %d's snapshot is not kept",
                     self.max_tracks, gone)
        self._best[event.track_id] = Best(frame=frame.copy(), box=event.box, score=event.score, label=event.label)
        self._best.move_to_end(event.track_id)
        return True

    def best_box(self, track_id: int) -> Optional[Box]:
        """The box of the track's held best frame (what `finish` will draw), or None."""
        best = self._best.get(track_id)
        return None if best is None else best.box

    def path_for(self, track_id: int) -> str:
        return os.path.join(self.out_dir, "%d.jpg" % track_id)

    def finish(self, event: Event) -> Optional[str]:
        """On an `end` event: write the track's best frame with its box and free it; the path, or None."""
        best = self._best.pop(event.track_id, None)
        if best is None:
            return None
        return self.write(event.track_id, best)

    def write(self, track_id: int, best: Best) -> Optional[str]:
        """Draw `best.box` on (a BGR copy of) `best.frame` and write the JPEG atomically."""
        import cv2

        img = cv2.cvtColor(best.frame, cv2.COLOR_RGB2BGR)
        h, w = img.shape[:2]
        x1, y1, x2, y2 = best.box
        p1 = (int(round(min(max(x1, 0), w - 1))), int(round(min(max(y1, 0), h - 1))))
        p2 = (int(round(min(max(x2, 0), w - 1))), int(round(min(max(y2, 0), h - 1))))
        r, g, b = self.colour_rgb
        cv2.rectangle(img, p1, p2, (b, g, r), self.thickness)
        path = self.path_for(track_id)
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            tmp = path + ".tmp.jpg"
            if not cv2.imwrite(tmp, img, [int(cv2.IMWRITE_JPEG_QUALITY), self.jpeg_quality]):
                raise OSError("cv2.imwrite failed")
            os.replace(tmp, path)
        except OSError as e:
            LOG.warning("events.snapshots: cannot write %s: %s", path, e)
            return None
        return path

    def flush(self) -> None:
        """Forget every held frame (without writing)."""
        self._best.clear()
