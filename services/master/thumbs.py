"""report.html's strip of labelled frames: thumbnails taken as frames finish (frames are not kept), at most
2 x 24 held, the stride doubling when full."""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from cnnvideo.results import report as rpt

HELD = 48


class Thumbnails:
    """Thumbnails of every `every`-th finished frame (bounded memory)."""

    def __init__(self) -> None:
        self.uris: Dict[int, str] = {}
        self.every = 1

    def add(self, frame: int, rgb) -> None:
        """Keep a thumbnail of frame `frame` (an RGB uint8 image, or None) if it is on the stride."""
        if rgb is None or frame % self.every:
            return
        uri = rpt.thumbnail_uri(rgb)
        if uri:
            self.uris[frame] = uri
        if len(self.uris) > HELD:
            self.every *= 2
            self.uris = {k: v for k, v in self.uris.items() if k % self.every == 0}

    def pick(self, records, n: int = 24) -> List[tuple]:
        """Up to n evenly spread labelled frames as (frame, thumbnail URI, top-1 name, score)."""
        done = [r for r in records if r.top5 and r.frame in self.uris]
        picked = [done[i] for i in sorted({int(round(i)) for i in np.linspace(0, len(done) - 1, min(n, len(done)))})]
        return [(r.frame, self.uris[r.frame], r.top5[0][1], r.top5[0][2]) for r in picked]
