"""The master's side of a detector run: each finished frame's outputs decoded into detections (frame pixels),
counted for report.json, compared with the unsplit model's when checked. The role owns one (None for a
classifier) and hands the detections on to the live view, the thumbnails and results.jsonl."""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from cnnvideo.events.types import Detection
from cnnvideo.results import detections as dt


class MasterDetections:
    """Decodes, counts and checks one run's detections (thread-safe: the checker runs on its own thread)."""

    def __init__(self, spec: dt.DetectorSpec, frame_size: Sequence[int], iou: float = 0.5,
                 output_names: Optional[Sequence[str]] = None) -> None:
        self.spec = spec
        self.frame_h, self.frame_w = int(frame_size[0]), int(frame_size[1])
        self.output_names = list(output_names) if output_names is not None else None
        self.counts = dt.DetectionCounts()
        self.agreement = dt.DetectionAgreement(iou)
        self.people: Dict[int, int] = {}  # frame -> persons found
        self.lock = threading.Lock()
        self.watchers: List[Callable[[int, int, int], None]] = []  # each check's (matched, found, expected) boxes

    @classmethod
    def for_config(cls, model: str, detect: Any, frame_size: Sequence[int],
                   output_names: Optional[Sequence[str]] = None) -> Optional["MasterDetections"]:
        """One for a registered detector `model` with the config's `detect:` settings, None for a classifier."""
        if not dt.is_detector(model):
            return None
        return cls(dt.spec_for(model, detect), frame_size, output_names=output_names)

    def decode(self, outputs: Any) -> List[Detection]:
        """The detections of one frame's outputs ({name: array}, a list in output order, or a torch detector's
        packed [rows, 6] array)."""
        named = dt.unpack_packed(outputs) if self.spec.packed else dt.as_outputs(outputs, self.output_names)
        return dt.decode(named, self.spec, self.frame_w, self.frame_h)

    def frame(self, frame: int, outputs: Any) -> List[Detection]:
        """Decode a finished frame's outputs and count them; its detections."""
        dets = self.decode(outputs)
        with self.lock:
            self.counts.add(dets)
            self.people[int(frame)] = dt.count(dets, "person")
        return dets

    def check(self, split_outputs: Any, reference_outputs: Any) -> Tuple[float, float, float]:
        """Compare a checked frame's split-run outputs with the unsplit model's; that frame's (P, R, F1)."""
        split, ref = self.decode(split_outputs), self.decode(reference_outputs)
        with self.lock:
            before = self.agreement.matched
            p, r, f1 = self.agreement.add(split, ref)
            matched, watchers = self.agreement.matched - before, list(self.watchers)
        for watch in watchers:  # (outside the lock: a watcher may start a recalibration)
            watch(matched, len(split), len(ref))
        return p, r, f1

    def raw_error(self, split_outputs: Any, reference_outputs: Any) -> float:
        """A checked frame's max abs error on the raw outputs, blind to the order of tied rows (dt.raw_error)."""
        return dt.raw_error(self._named(split_outputs), self._named(reference_outputs), self.spec)

    def _named(self, outputs: Any) -> Any:
        return outputs if self.spec.packed else dt.as_outputs(outputs, self.output_names)

    def report(self) -> Dict[str, Any]:
        """report.json fields: `detections` (per label: boxes, frames_with, max_per_frame), `detection_agreement`
        (precision/recall/F1 against the unsplit model), `detector` (spec settings) and `people_per_frame`."""
        with self.lock:
            people = [[f, n] for f, n in sorted(self.people.items())]
            return {"detector": {"name": self.spec.name, "score_threshold": self.spec.score_threshold,
                                 "labels": list(self.spec.label_filter)},
                    "detections": self.counts.summary(),
                    "detection_agreement": self.agreement.summary(),
                    "people_per_frame": people}
