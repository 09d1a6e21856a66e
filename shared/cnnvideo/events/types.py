"""The data the events library passes around: a detector's `Detection`, the `Event` it becomes, and the
`EventsConfigError` every module raises for a bad setting.

Events leave the process (MQTT, `/api/events`, a browser), so `Event.to_json()` is plain JSON with `<`, `>`
and `&` escaped as \\u escapes: a label such as `<script>` stays inert text even if a page inlines it.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

Box = Tuple[float, float, float, float]  # (x1, y1, x2, y2) in frame pixels, x1 <= x2, y1 <= y2

EVENT_TYPES = ("new", "update", "end", "entered", "left")


class EventsConfigError(ValueError):
    """A bad events setting; the message is one line naming the key, e.g. `events.zones.door: needs ...`."""


def as_box(box: Sequence[float]) -> Box:
    """`box` as a tuple of 4 finite floats with x1 <= x2 and y1 <= y2 (ValueError otherwise)."""
    if len(box) != 4:
        raise ValueError("a box is (x1, y1, x2, y2), got %d values" % len(box))
    x1, y1, x2, y2 = (float(v) for v in box)
    if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
        raise ValueError("box coordinates must be finite: %r" % (tuple(box),))
    if x2 < x1 or y2 < y1:
        raise ValueError("box needs x1 <= x2 and y1 <= y2: %r" % (tuple(box),))
    return (x1, y1, x2, y2)


@dataclasses.dataclass(frozen=True)
class Detection:
    """One detector output for one frame: a label, a score in [0, 1] and a box in frame pixels."""

    label: str
    score: float
    box: Box

    def __post_init__(self):
        if not isinstance(self.label, str) or not self.label:
            raise ValueError("a detection needs a non-empty string label, got %r" % (self.label,))
        score = float(self.score)
        if not math.isfinite(score):
            raise ValueError("detection score must be finite, got %r" % (self.score,))
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "box", as_box(self.box))


@dataclasses.dataclass(frozen=True)
class Event:
    """Something that happened to a track: `new` (announced), `update`, `end`, `entered`/`left` a zone.

    `zones` are the zones the track is in after this event; `zone` names the zone an `entered`/`left` is
    about. `capture_time` is the capture time (epoch seconds) of the frame that caused the event, `frame` its
    index; `snapshot` is the path or URL of the track's best frame (set on `end` when snapshots are kept) and
    `snapshot_box` the box drawn on it (the track's best-scoring box, which need not be its last one).
    """

    type: str
    track_id: int
    label: str
    score: float
    box: Box
    capture_time: float
    frame: int
    zones: Tuple[str, ...] = ()
    zone: Optional[str] = None
    camera: Optional[str] = None
    snapshot: Optional[str] = None
    snapshot_box: Optional[Box] = None

    def __post_init__(self):
        if self.type not in EVENT_TYPES:
            raise ValueError("event type must be one of %s, got %r" % ("|".join(EVENT_TYPES), self.type))
        object.__setattr__(self, "box", as_box(self.box))
        if self.snapshot_box is not None:
            object.__setattr__(self, "snapshot_box", as_box(self.snapshot_box))
        object.__setattr__(self, "zones", tuple(self.zones))
        for name in ("score", "capture_time"):
            v = float(getattr(self, name))
            if not math.isfinite(v):
                raise ValueError("event %s must be finite, got %r" % (name, v))
            object.__setattr__(self, name, v)

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON-able dict (lists, strings, numbers, None)."""
        d = dataclasses.asdict(self)
        d["box"] = [round(v, 2) for v in self.box]
        if self.snapshot_box is not None:
            d["snapshot_box"] = [round(v, 2) for v in self.snapshot_box]
        d["zones"] = list(self.zones)
        d["score"] = round(float(self.score), 4)
        return d

    def to_json(self) -> str:
        """Compact JSON; `<`, `>`, `&` and the JS line separators are \\u-escaped so it is safe to inline."""
        text = json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False, sort_keys=True)
        for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                        ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
            text = text.replace(ch, esc)
        return text

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Event":
        """The inverse of `to_dict` (unknown keys are ignored, so newer senders stay readable)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["box"] = tuple(kw["box"])
        if kw.get("snapshot_box") is not None:
            kw["snapshot_box"] = tuple(kw["snapshot_box"])
        kw["zones"] = tuple(kw.get("zones") or ())
        return cls(**kw)

    @classmethod
    def from_json(cls, text: str) -> "Event":
        """Parse `to_json` output (plain `json.loads`: data only, nothing is evaluated)."""
        return cls.from_dict(json.loads(text))
