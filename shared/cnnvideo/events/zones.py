"""Named polygon zones in frame pixels: validation, point-in-polygon, `entered`/`left` events and live counts.

A track is in a zone when its box's bottom-centre point is inside the polygon: the usual choice for a
camera looking down at a floor, since that point is where the object stands (the box centre of a person
near a door line would be at chest height, far from the floor area the zone marks).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

from .types import Event, EventsConfigError

Point = Tuple[float, float]
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # zone names end up in JSON and in metric labels


@dataclasses.dataclass(frozen=True)
class Zone:
    """A named polygon (at least 3 points, x right, y down, in frame pixels)."""

    name: str
    points: Tuple[Point, ...]

    def contains(self, xy: np.ndarray) -> np.ndarray:
        """Which of the points `xy` (N, 2) lie inside (even-odd ray casting over all edges at once)."""
        return points_in_polygon(xy, np.asarray(self.points, dtype=np.float64))


def points_in_polygon(xy: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Boolean (N,) for points `xy` (N, 2) inside polygon `poly` (K, 2): a horizontal ray from each point
    crosses an odd number of edges; vectorised over points x edges."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    x, y = xy[:, 0:1], xy[:, 1:2]  # (N, 1)
    x1, y1 = poly[:, 0][None, :], poly[:, 1][None, :]  # (1, K)
    x2, y2 = np.roll(poly[:, 0], -1)[None, :], np.roll(poly[:, 1], -1)[None, :]
    straddles = (y1 > y) != (y2 > y)
    with np.errstate(divide="ignore", invalid="ignore"):
        x_cross = x1 + (y - y1) * (x2 - x1) / np.where(y2 != y1, y2 - y1, 1.0)
    crossings = straddles & (x < x_cross)
    return (crossings.sum(axis=1) % 2) == 1


def anchor_points(boxes: np.ndarray) -> np.ndarray:
    """The bottom-centre point (x, y2) of each box (N, 4)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([(boxes[:, 0] + boxes[:, 2]) / 2.0, boxes[:, 3]], axis=1)


def parse_zones(config: Optional[Mapping[str, Any]], frame_size: Tuple[int, int],
                key: str = "events.zones") -> List[Zone]:
    """Zones from a mapping `name -> [[x, y], ...]` checked against a frame of `frame_size` (height, width), the
    order of every size in cnn-video (the config's `frame_size`); the points are (x, y): x right, y down.

    Raises EventsConfigError with a one-line message naming the key, e.g.
    `events.zones.door: needs at least 3 points`.
    """
    if config is None:
        return []
    if not isinstance(config, Mapping):
        raise EventsConfigError("%s: must be a mapping of zone name to a list of [x, y] points" % key)
    h, w = frame_size
    zones = []
    for name, pts in config.items():
        k = "%s.%s" % (key, name)
        if not isinstance(name, str) or not NAME.match(name):
            raise EventsConfigError("%s: zone names are 1-64 letters, digits, '_' or '-'" % k)
        if not isinstance(pts, (list, tuple)):
            raise EventsConfigError("%s: must be a list of [x, y] points" % k)
        if len(pts) < 3:
            raise EventsConfigError("%s: needs at least 3 points, got %d" % (k, len(pts)))
        points = []
        for i, p in enumerate(pts):
            if (not isinstance(p, (list, tuple)) or len(p) != 2
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in p)
                    or not all(math.isfinite(v) for v in p)):
                raise EventsConfigError("%s: point %d must be [x, y] numbers, got %r" % (k, i, p))
            x, y = float(p[0]), float(p[1])
            if not (0 <= x <= w and 0 <= y <= h):
                raise EventsConfigError("%s: point %d (x %g, y %g) is outside the frame (x 0..%d, y 0..%d: frame_size "
                                        "[%d, %d] is height, width)" % (k, i, x, y, w, h, h, w))
            points.append((x, y))
        arr = np.asarray(points)
        area = 0.5 * abs(float(np.dot(arr[:, 0], np.roll(arr[:, 1], -1)) - np.dot(arr[:, 1], np.roll(arr[:, 0], -1))))
        if area <= 0:
            raise EventsConfigError("%s: the polygon has no area (points on one line)" % k)
        zones.append(Zone(name=name, points=tuple(points)))
    return zones


class ZoneMonitor:
    """Follows announced tracks through zones: annotates events with `zones`, adds `entered`/`left`, counts."""

    def __init__(self, zones: Iterable[Zone]):
        self.zones = list(zones)
        self._inside: Dict[int, Set[str]] = {}  # track id -> zone names it is in
        self._labels: Dict[int, str] = {}

    def update(self, events: Sequence[Event]) -> List[Event]:
        """The tracker's events with `zones` filled in, each followed by its `entered`/`left` events;
        an `end` is preceded by `left` for every zone the track was still in."""
        if not self.zones:
            return list(events)
        live = [e for e in events if e.type in ("new", "update")]
        inside = np.zeros((len(live), len(self.zones)), dtype=bool)
        if live:
            anchors = anchor_points(np.array([e.box for e in live]))
            for j, z in enumerate(self.zones):  # one vectorised test per zone, over every track at once
                inside[:, j] = z.contains(anchors)
        row = {id(e): i for i, e in enumerate(live)}
        out: List[Event] = []
        for e in events:
            before = self._inside.get(e.track_id, set())
            if e.type == "end":
                for z in self.zones:
                    if z.name in before:
                        out.append(dataclasses.replace(e, type="left", zone=z.name, zones=()))
                self._inside.pop(e.track_id, None)
                self._labels.pop(e.track_id, None)
                out.append(dataclasses.replace(e, zones=()))
                continue
            if e.type not in ("new", "update"):
                out.append(e)
                continue
            now = {z.name for j, z in enumerate(self.zones) if inside[row[id(e)], j]}
            names = tuple(z.name for z in self.zones if z.name in now)
            self._inside[e.track_id] = now
            self._labels[e.track_id] = e.label
            out.append(dataclasses.replace(e, zones=names))
            for z in self.zones:
                if z.name in before and z.name not in now:
                    out.append(dataclasses.replace(e, type="left", zone=z.name, zones=names))
            for z in self.zones:
                if z.name in now and z.name not in before:
                    out.append(dataclasses.replace(e, type="entered", zone=z.name, zones=names))
        return out

    def counts(self) -> Dict[str, Dict[str, int]]:
        """Live tracks per zone and label: {zone: {label: n}} (every zone present, possibly empty)."""
        out: Dict[str, Dict[str, int]] = {z.name: {} for z in self.zones}
        for tid, names in self._inside.items():
            label = self._labels[tid]
            for n in names:
                out[n][label] = out[n].get(label, 0) + 1
        return out
