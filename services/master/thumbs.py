"""report.html's strip of labelled frames: thumbnails taken as frames finish (frames are not kept), at most
2 x 24 held, the stride doubling when full. When the run's length is known (offline), the stride starts where it
would end, so no thumbnail is made only to be dropped (a 150-frame run makes 38, not 86). A detector run's
thumbnails show the boxes and a count caption. They are held as small images and made JPEG only when picked: 24
are shown (0.3 ms of the master's CPU each for the JPEG and its base64)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from cnnvideo.results import report as rpt
from cnnvideo.results.detections import caption

HELD = 48


def first_stride(run_length: int) -> int:
    """The stride the doubling would reach over `run_length` frames (1 when unknown): a power of two that keeps at
    most HELD of them."""
    every = 1
    while run_length > 0 and -(-run_length // every) > HELD:
        every *= 2
    return every


class Thumbnails:
    """Thumbnails of every `every`-th finished frame (bounded memory). `run_length` gives the run's frame count
    when it is known (0 when not, as for a live source); it is asked once, at the first frame."""

    def __init__(self, run_length: Optional[Callable[[], int]] = None) -> None:
        self.images: Dict[int, np.ndarray] = {}  # frame -> its thumbnail (rpt.thumbnail), not yet a JPEG
        self.captions: Dict[int, str] = {}  # a detector run's frames: "3 people"
        self.every = 1
        self._run_length = run_length

    def add(self, frame: int, rgb, detections: Optional[Sequence] = None) -> None:
        """Keep a thumbnail of frame `frame` (an RGB uint8 image, or None) if it is on the stride; with
        `detections` (a detector's, in frame pixels) the boxes are drawn on it and its caption is the count."""
        if self._run_length is not None:
            self.every = first_stride(self._run_length())
            self._run_length = None
        if rgb is None or frame % self.every:
            return
        small = rpt.thumbnail(rgb, detections=detections)
        if small is not None:
            self.images[frame] = small
            if detections is not None:
                self.captions[frame] = caption(detections)
        if len(self.images) > HELD:
            self.every *= 2
            self.images = {k: v for k, v in self.images.items() if k % self.every == 0}
            self.captions = {k: v for k, v in self.captions.items() if k in self.images}

    def pick(self, records, n: int = 24) -> List[tuple]:
        """Up to n evenly spread labelled frames as (frame, thumbnail URI, top-1 name, score), or for a detector
        run (frames added with detections) as (frame, thumbnail URI, caption such as "3 people", None)."""
        if self.captions:
            done = [r for r in records if r.done_at is not None and r.frame in self.captions]
        else:
            done = [r for r in records if r.top5 and r.frame in self.images]
        picked = [done[i] for i in sorted({int(round(i)) for i in np.linspace(0, len(done) - 1, min(n, len(done)))})]
        uris = {r.frame: rpt.jpeg_uri(self.images[r.frame]) for r in picked}
        if self.captions:
            return [(r.frame, uris[r.frame], self.captions[r.frame], None) for r in picked]
        return [(r.frame, uris[r.frame], r.top5[0][1], r.top5[0][2]) for r in picked]
