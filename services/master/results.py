"""results.jsonl: one JSON line per finished frame, appended as results arrive (what the CNN saw, when, where).

A line is {"frame", "capture_time", "result_time" (Unix seconds), "top5": [[index, name, score], ...], "cuts",
"bytes": {hop: bytes}, "reused": bool} ("reused": the result came as an empty update, so the previous result of
its stream stands; nothing was decoded for it), and for a detector "boxes": [{"label", "score", "box": [x1, y1,
x2, y2]}] in frame pixels (after "top5"). Hop byte counts come from three places (the master's own send, the
workers' stage reports, the result itself) in any order, so a line is written once the result and every hop of its
plan are known; close() writes whatever is still incomplete (a worker's report lost with a crash).
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, List, Optional, Sequence

from cnnvideo.wire.protocol import reporter

log = logging.getLogger(__name__)


def plan_hops(cuts: List[int]) -> List[str]:
    """Hops a frame with plan `cuts` crosses: m->w0, then worker to worker up to the last one with work, and that
    worker's result hop to the master."""
    last = reporter(cuts)
    return ["m->w0"] + ["w%d->w%d" % (w, w + 1) for w in range(last)] + ["w%d->m" % last]


class ResultsLog:
    """Appends one line per frame to `path` (created afresh), flushed line by line."""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.fh = open(path, "w")
        self.pending: Dict[int, Dict[str, Any]] = {}
        self.written = 0

    def _entry(self, frame: int) -> Dict[str, Any]:
        return self.pending.setdefault(frame, {"frame": int(frame), "bytes": {}})

    def sent(self, frame: int, cuts: List[int], capture_time: float, nbytes: int) -> None:
        """The master sent the frame (m->w0 bytes); the first send's time is its capture time."""
        e = self._entry(frame)
        e.setdefault("capture_time", round(float(capture_time), 6))
        e["cuts"] = [int(c) for c in cuts]
        e["bytes"]["m->w0"] = int(nbytes)

    def hop(self, frame: int, name: str, nbytes: int) -> None:
        """A worker reported what it sent on hop `name` for this frame."""
        if frame in self.pending:
            self.pending[frame]["bytes"][name] = int(nbytes)
            self._maybe_write(frame)

    def result(self, frame: int, result_time: float, top5: List[list], hop: str, nbytes: int,
               reused: bool = False, boxes: Optional[Sequence[Any]] = None) -> None:
        """The frame's result arrived (over hop `hop`, `nbytes` bytes) with its top-5; `reused`: it was unchanged;
        for a detector its `boxes` (cnnvideo.events.types.Detection: label, score, box x1, y1, x2, y2 in frame
        pixels)."""
        e = self._entry(frame)
        e["reused"] = bool(reused)
        e["result_time"] = round(float(result_time), 6)
        e["top5"] = [[int(i), str(n), float(s)] for i, n, s in top5]
        if boxes is not None:
            e["boxes"] = [{"label": str(d.label), "score": round(float(d.score), 4),
                           "box": [round(float(v), 1) for v in d.box]} for d in boxes]
        e["bytes"][hop] = int(nbytes)
        self._maybe_write(frame)

    def _maybe_write(self, frame: int) -> None:
        e = self.pending[frame]
        if "result_time" in e and "cuts" in e and all(h in e["bytes"] for h in plan_hops(e["cuts"])):
            self._write(self.pending.pop(frame))

    def _write(self, e: Dict[str, Any]) -> None:
        order = ("frame", "capture_time", "result_time", "top5", "boxes", "cuts", "bytes", "reused")
        self.fh.write(json.dumps({k: e.get(k) for k in order if k != "boxes" or k in e}) + "\n")
        self.fh.flush()
        self.written += 1

    def close(self) -> Optional[str]:
        """Write the frames that have a result but miss a hop's report, then close; the path."""
        if self.fh is None:
            return None
        for frame in sorted(f for f, e in self.pending.items() if "result_time" in e):
            self._write(self.pending.pop(frame))
        self.fh.close()
        self.fh = None
        return self.path
