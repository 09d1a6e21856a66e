"""Events for a classifier (no boxes): one "track" per run of the same top-1 label over consecutive processed
frames, so a change of label is an `end` (the old label) followed by a `new` (the new one).

`LabelChangeTracker` has the IouTracker's interface (`update(frame, capture_time, detections)`, `finish`,
`counts`), so it stands in for it in an EventPipeline and zones, snapshots, MQTT and metrics work unchanged.
Each frame passes at most one detection: the frame's top-1 label with its score and the whole frame as box.
A frame with none (or with a score below `min_score`) counts as "no label", which ends the current one.

`min_frames` debounces flicker: a different label (or no label) must hold for that many consecutive
processed frames before it replaces the current one; ids are 1, 2, 3... in announcement order, never reused.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from .types import Box, Detection, Event, EventsConfigError


@dataclasses.dataclass(frozen=True)
class LabelChangeSettings:
    """min_frames: consecutive processed frames a new top-1 label (or no label) must hold to take over.
    min_score: a top-1 below this score is "no label". update_interval_s: least capture time between two
    `update` events of the current label (0: one per processed frame)."""

    min_frames: int = 1
    min_score: float = 0.0
    update_interval_s: float = 1.0

    def __post_init__(self):
        self.validate()

    def validate(self, key: str = "events.label_change") -> None:
        """Raise EventsConfigError naming the first bad field."""
        if isinstance(self.min_frames, bool) or not isinstance(self.min_frames, int) or self.min_frames < 1:
            raise EventsConfigError("%s.min_frames: must be an integer >= 1, got %r" % (key, self.min_frames))
        if isinstance(self.min_score, bool) or not isinstance(self.min_score, (int, float)) \
                or not 0.0 <= self.min_score <= 1.0:
            raise EventsConfigError("%s.min_score: must be in [0, 1], got %r" % (key, self.min_score))
        if isinstance(self.update_interval_s, bool) or not isinstance(self.update_interval_s, (int, float)) \
                or not self.update_interval_s >= 0:
            raise EventsConfigError("%s.update_interval_s: must be >= 0 seconds, got %r"
                                    % (key, self.update_interval_s))


@dataclasses.dataclass
class _Current:
    track_id: int
    label: str
    score: float
    box: Box
    last_update_emitted: float


class LabelChangeTracker:
    """Top-1 label per processed frame -> `new` / `update` / `end` events (see the module docstring)."""

    def __init__(self, settings: Optional[LabelChangeSettings] = None):
        self.settings = settings or LabelChangeSettings()
        self.current: Optional[_Current] = None
        self._candidate: Optional[Tuple[Optional[str], int]] = None  # (label or None, consecutive frames)
        self._next_id = 1
        self._last_time: Optional[float] = None

    @property
    def announced(self) -> int:
        """Tracks (label runs) announced so far."""
        return self._next_id - 1

    def counts(self) -> Dict[str, int]:
        """{current label: 1}, or {} when no label is current."""
        return {} if self.current is None else {self.current.label: 1}

    def _top(self, detections: Sequence[Detection]) -> Optional[Detection]:
        best = max(detections, key=lambda d: d.score, default=None)
        if best is None or best.score < self.settings.min_score:
            return None
        return best

    def _event(self, kind: str, c: _Current, frame: int, now: float) -> Event:
        return Event(type=kind, track_id=c.track_id, label=c.label, score=c.score, box=c.box, capture_time=now,
                     frame=frame)

    def update(self, frame: int, capture_time: float, detections: Sequence[Detection]) -> List[Event]:
        """One processed frame's top-1 (at most one detection is looked at: the best); returns its events,
        `end` before `new` when the label changes. A capture time earlier than the previous one (frames
        completing out of order, a clock step) is taken as the previous time."""
        now = float(capture_time)
        if self._last_time is not None and now < self._last_time:
            now = self._last_time
        self._last_time = now
        top = self._top(detections)
        label = top.label if top is not None else None
        cur = self.current
        if cur is not None and label == cur.label:  # the same label goes on
            self._candidate = None
            cur.score, cur.box = top.score, top.box
            if now - cur.last_update_emitted >= self.settings.update_interval_s:
                cur.last_update_emitted = now
                return [self._event("update", cur, frame, now)]
            return []
        if cur is None and label is None:
            self._candidate = None
            return []
        n = self._candidate[1] + 1 if self._candidate is not None and self._candidate[0] == label else 1
        self._candidate = (label, n)
        if n < self.settings.min_frames:
            return []
        self._candidate = None
        events: List[Event] = []
        if cur is not None:
            events.append(self._event("end", cur, frame, now))
            self.current = None
        if top is not None:
            self.current = _Current(self._next_id, top.label, top.score, top.box, now)
            self._next_id += 1
            events.append(self._event("new", self.current, frame, now))
        return events

    def finish(self, capture_time: float, frame: int = -1) -> List[Event]:
        """End the current label (the stream is over)."""
        now = float(capture_time)
        if self._last_time is not None and now < self._last_time:
            now = self._last_time
        cur, self.current, self._candidate = self.current, None, None
        return [] if cur is None else [self._event("end", cur, frame, now)]


def label_change_from_config(config, key: str = "events.label_change") -> LabelChangeTracker:
    """A LabelChangeTracker from a mapping of LabelChangeSettings fields; EventsConfigError (one line, naming
    the key) for an unknown key or a bad value."""
    config = dict(config or {})
    names = [f.name for f in dataclasses.fields(LabelChangeSettings)]
    for k in config:
        if k not in names:
            raise EventsConfigError("%s.%s: unknown setting (known: %s)" % (key, k, ", ".join(sorted(names))))
    try:
        settings = LabelChangeSettings(**config)
    except EventsConfigError as e:
        raise EventsConfigError(str(e).replace("events.label_change", key, 1)) from None
    return LabelChangeTracker(settings)
