"""results.jsonl: one JSON line per finished frame, appended as results arrive (what the CNN saw, when, where).

A line is {"frame", "camera" (its name: events.camera, or its key under `cameras:`), "capture_time",
"result_time" (Unix seconds), "top5": [[index, name, score], ...], "cuts", "bytes": {hop: bytes}, "reused": bool}
("reused": the result came as an empty update, so the previous result of its stream stands; nothing was decoded
for it), for a detector "boxes": [{"label", "score", "box": [x1, y1,
x2, y2]}] in frame pixels (after "top5"), and under a pool plan "route": the worker of each stage (after "cuts").
Hop byte counts come from three places (the master's own send, the workers' stage reports, the result itself) in
any order, so a line is written once the result and every hop of its route are known, in the order results are
handed on (frame order); close() writes whatever is still incomplete (a worker's report lost with a crash).
"""
from __future__ import annotations

import collections
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional, Sequence

from cnnvideo.wire.protocol import reporter

log = logging.getLogger(__name__)

ORDER_SLACK = 32  # results that may wait behind a line still missing a hop's report


def plan_hops(cuts: List[int], route: Optional[Sequence[int]] = None) -> List[str]:
    """Hops a frame with plan `cuts` crosses on `route` (the worker of each stage; None: a chain, stage s on worker
    s): master to the first stage's worker, then worker to worker up to the last stage with work, and that
    worker's result hop to the master."""
    last = reporter(cuts)
    ws = list(route) if route else list(range(len(cuts) - 1))
    return (["m->w%d" % ws[0]] + ["w%d->w%d" % (ws[s], ws[s + 1]) for s in range(last)]
            + ["w%d->m" % ws[last]])


class ResultsLog:
    """Appends one line per frame to `path` (created afresh), flushed line by line."""

    def __init__(self, path: str, camera: str = "") -> None:
        self.path = path
        self.camera = camera  # each line's `camera` (the camera's name in events and MQTT topics)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.fh = open(path, "w")
        # the master opens the log as its run starts: its process CPU seconds then (report.json master.cpu_s counts
        # from here, setup_cpu_s up to here)
        self.opened_cpu_s = time.process_time()
        self.pending: Dict[int, Dict[str, Any]] = {}
        self.order: collections.deque = collections.deque()  # frames with a result, not written yet, in order
        self.written = 0

    def _entry(self, frame: int) -> Dict[str, Any]:
        return self.pending.setdefault(frame, {"frame": int(frame), "bytes": {}})

    def sent(self, frame: int, cuts: List[int], capture_time: float, nbytes: int,
             route: Optional[Sequence[int]] = None) -> None:
        """The master sent the frame (its input hop's bytes) on `route` (a pool plan's worker of each stage; None:
        a chain); the first send's time is its capture time."""
        e = self._entry(frame)
        e.setdefault("capture_time", round(float(capture_time), 6))
        e["cuts"] = [int(c) for c in cuts]
        e["bytes"] = {}  # a re-send may take another route
        if route is not None and len(route):
            e["route"] = [int(w) for w in route]
        else:
            e.pop("route", None)
        e["bytes"][plan_hops(cuts, e.get("route"))[0]] = int(nbytes)

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
        self.order.append(frame)
        self._maybe_write(frame)

    def on_result(self, done) -> None:
        """A completed frame (delivery.Completed) from the master's result consumers."""
        self.result(done.frame, done.t_result, done.top5, done.hop, done.nbytes, done.reused, boxes=done.detections)

    def _complete(self, frame: int) -> bool:
        e = self.pending.get(frame)
        return (e is not None and "result_time" in e and "cuts" in e
                and all(h in e["bytes"] for h in plan_hops(e["cuts"], e.get("route"))))

    def _maybe_write(self, frame: int) -> None:
        """Write the lines whose frames have their result and every hop's bytes, in the order the results came
        (frame order: the master hands results on in order); a line still missing a hop's report is written
        anyway once ORDER_SLACK later results wait behind it."""
        while self.order and (self._complete(self.order[0]) or len(self.order) > ORDER_SLACK):
            f = self.order.popleft()
            if f in self.pending:
                self._write(self.pending.pop(f))

    def _write(self, e: Dict[str, Any]) -> None:
        order = ("frame", "camera", "capture_time", "result_time", "top5", "boxes", "cuts", "route", "bytes", "reused")
        if self.camera:  # (the master always names its camera; a log made without one keeps its old lines)
            e["camera"] = self.camera
        self.fh.write(json.dumps({k: e.get(k) for k in order if k not in ("boxes", "route", "camera") or k in e})
                      + "\n")
        self.fh.flush()
        self.written += 1

    def close(self) -> Optional[str]:
        """Write the frames that have a result but miss a hop's report, then close; the path."""
        if self.fh is None:
            return None
        for frame in list(self.order):
            if frame in self.pending:
                self._write(self.pending.pop(frame))
        self.order.clear()
        self.fh.close()
        self.fh = None
        return self.path
