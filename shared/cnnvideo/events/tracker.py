"""Trackers that turn per-frame detections into tracks with stable ids and `new`/`update`/`end` events.

`BoxTracker` holds what every kind shares; `IouTracker` matches a detection to a track's last box (the light
kind), `cnnvideo.events.kalman.KalmanTracker` to its box predicted by a constant-velocity Kalman filter (the
default: it holds identities through misses and crossings); `cnnvideo.events.trackers.make_tracker(settings)`
picks by `kind`.

Time is capture time, not the frame number: the master's drop policy can skip frames, so a track expires
after `max_unseen_s` seconds of capture time without a match (and, optionally, after `max_unseen_updates`
processed frames without one). A track is announced (`new`, and given its id) only after `min_frames`
matched frames, so a one-frame false detection never becomes an event; ids are 1, 2, 3... in announcement
order and never reused. A kind may drop a candidate (not yet announced) that misses a frame, may hand a lost
announced track's id to a candidate confirmed where that track is expected (`_heir`), and may keep a missed track
from coasting when its expected box is unlikely to be where the object is (`_may_coast`).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

import numpy as np

from .types import Box, Detection, Event, EventsConfigError

KINDS = ("kalman", "iou")
MATCHERS = ("auto", "greedy", "hungarian")
MAX_UNSEEN_S = {"kalman": 2.0, "iou": 1.0}  # max_unseen_s when unset: the Kalman tracker relinks after longer gaps
MIN_FRAMES = {"kalman": 2, "iou": 3}  # min_frames when unset: Kalman candidates must hit in consecutive frames
IOU_THRESHOLD = {"kalman": 0.2, "iou": 0.3}  # iou_threshold when unset: the Kalman tracker matches inside its gate


@dataclasses.dataclass(frozen=True)
class TrackerSettings:
    """How detections are matched to tracks and when tracks are announced and ended.

    kind: `kalman` (match to each track's predicted box; the default) or `iou` (match to its last box).
    iou_threshold: least IoU for a detection to continue a track (None: 0.2 for `kalman`, whose Mahalanobis gate
        also holds a match; 0.3 for `iou`).
    min_frames: matched frames before a track is announced with `new` (1 = at once; None: 2 for `kalman`, whose
        candidates must match them in consecutive processed frames, 3 for `iou`).
    max_unseen_s: capture-time seconds without a match after which a track ends (None: 2.0 for `kalman`, 1.0
        for `iou`).
    max_unseen_updates: processed frames without a match after which a track ends (None: time only).
    labels: only these labels are tracked (None: all).
    class_aware: a detection continues only a track of its own label.
    matcher: `greedy` (highest IoU first), `hungarian` (optimal total IoU; needs scipy) or `auto` (hungarian
        when scipy is installed, else greedy).
    centroid_fallback_px: after IoU matching, pair the rest by centre distance up to this many pixels
        (0: off); helps when skipped frames let a fast object move past any overlap.
    update_interval_s: least capture time between two `update` events of one track (0: every match). Zones
        and snapshots see a track through its events, so a larger interval also delays `entered`/`left` and
        offers fewer frames for the snapshot; throttle what is published instead (EventPipeline's
        publish_types) when that matters.
    coast_s: an announced track the detector missed keeps sending `update` (score 0, its predicted box, or for
        `iou` its last box) until it has been unseen this many seconds (0: only matched frames; None: 0.1 s for
        `kalman`, 0 for `iou`). A score of 0 marks a box with no detection behind it; snapshots never pick it.
    """

    iou_threshold: Optional[float] = None
    min_frames: Optional[int] = None
    max_unseen_s: Optional[float] = None
    max_unseen_updates: Optional[int] = None
    labels: Optional[FrozenSet[str]] = None
    class_aware: bool = True
    matcher: str = "auto"
    centroid_fallback_px: float = 0.0
    update_interval_s: float = 0.0
    kind: str = "kalman"
    coast_s: Optional[float] = None

    def __post_init__(self):
        if self.labels is not None:
            object.__setattr__(self, "labels", frozenset(self.labels))
        self.validate()

    def validate(self, key: str = "events.tracker") -> None:
        """Raise EventsConfigError naming the first bad field."""
        if self.kind not in KINDS:
            raise EventsConfigError("%s.kind: must be one of %s, got %r" % (key, "|".join(KINDS), self.kind))
        if self.iou_threshold is not None and not 0.0 < self.iou_threshold <= 1.0:
            raise EventsConfigError("%s.iou_threshold: must be in (0, 1] or null, got %r" % (key, self.iou_threshold))
        if self.min_frames is not None and (int(self.min_frames) != self.min_frames or self.min_frames < 1):
            raise EventsConfigError("%s.min_frames: must be an integer >= 1 or null, got %r" % (key, self.min_frames))
        if self.max_unseen_s is not None and not self.max_unseen_s > 0:
            raise EventsConfigError("%s.max_unseen_s: must be > 0 seconds or null, got %r" % (key, self.max_unseen_s))
        if self.max_unseen_updates is not None and (int(self.max_unseen_updates) != self.max_unseen_updates
                                                    or self.max_unseen_updates < 1):
            raise EventsConfigError("%s.max_unseen_updates: must be an integer >= 1 or null, got %r"
                                    % (key, self.max_unseen_updates))
        if self.matcher not in MATCHERS:
            raise EventsConfigError("%s.matcher: must be one of %s, got %r" % (key, "|".join(MATCHERS), self.matcher))
        if self.matcher == "hungarian":
            try:
                import scipy.optimize  # noqa: F401
            except ImportError:
                raise EventsConfigError("%s.matcher: hungarian needs scipy, which is not installed" % key) from None
        if self.centroid_fallback_px < 0:
            raise EventsConfigError("%s.centroid_fallback_px: must be >= 0, got %r" % (key, self.centroid_fallback_px))
        if self.update_interval_s < 0:
            raise EventsConfigError("%s.update_interval_s: must be >= 0, got %r" % (key, self.update_interval_s))
        unseen = MAX_UNSEEN_S[self.kind] if self.max_unseen_s is None else self.max_unseen_s
        if self.coast_s is not None and not 0 <= self.coast_s < unseen:
            raise EventsConfigError("%s.coast_s: must be >= 0 and below max_unseen_s (%r), or null, got %r"
                                    % (key, unseen, self.coast_s))

    def assigner(self) -> Callable[[np.ndarray, np.ndarray], List[Tuple[int, int]]]:
        """The assignment function `matcher` names (`auto`: Hungarian when scipy imports)."""
        if self.matcher == "hungarian" or (self.matcher == "auto" and has_scipy()):
            return hungarian_assign
        return greedy_assign


def has_scipy() -> bool:
    """Whether scipy.optimize imports (it is optional: the amd64 image has no scipy)."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        return False
    return True


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in `a` (N, 4) with every box in `b` (M, 4), as an (N, M) array (broadcast, no loops)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ix1 = np.maximum(a[:, None, 0], b[None, :, 0])
    iy1 = np.maximum(a[:, None, 1], b[None, :, 1])
    ix2 = np.minimum(a[:, None, 2], b[None, :, 2])
    iy2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(ix2 - ix1, 0, None) * np.clip(iy2 - iy1, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def centre_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distance between the centres of every box in `a` (N, 4) and `b` (M, 4), as (N, M)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ca = np.stack([(a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2], axis=1)
    cb = np.stack([(b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2], axis=1)
    return np.linalg.norm(ca[:, None, :] - cb[None, :, :], axis=2)


def greedy_assign(score: np.ndarray, valid: np.ndarray) -> List[Tuple[int, int]]:
    """Pairs (row, col) taken best score first among `valid` cells, each row and column at most once."""
    rows, cols = np.nonzero(valid)
    if rows.size == 0:
        return []
    order = np.argsort(-score[rows, cols], kind="stable")
    used_r, used_c, pairs = set(), set(), []
    for r, c in zip(rows[order].tolist(), cols[order].tolist()):
        if r not in used_r and c not in used_c:
            used_r.add(r)
            used_c.add(c)
            pairs.append((r, c))
    return pairs


def hungarian_assign(score: np.ndarray, valid: np.ndarray) -> List[Tuple[int, int]]:
    """Pairs maximising the total score over `valid` cells (scipy's linear_sum_assignment)."""
    from scipy.optimize import linear_sum_assignment

    if not valid.any():
        return []
    cost = np.where(valid, -score, 1e6)
    rows, cols = linear_sum_assignment(cost)
    return [(r, c) for r, c in zip(rows.tolist(), cols.tolist()) if valid[r, c]]


@dataclasses.dataclass
class Track:
    """A tracker's state for one object; `track_id` is 0 until the track is announced."""

    key: int
    label: str
    box: Box
    score: float
    first_seen: float
    last_seen: float
    hits: int = 1
    misses: int = 0
    track_id: int = 0
    last_update_emitted: float = float("-inf")

    @property
    def confirmed(self) -> bool:
        return self.track_id > 0


class BoxTracker:
    """What every kind shares: expiry by capture time, min_frames, ids, events; `update()` per processed frame,
    `finish()` at the end. Subclasses say where a track is expected (`_expected`) and follow their tracks
    through the hooks `_advance`, `_corrected`, `_added` and `_retain`."""

    DEFAULT_MAX_UNSEEN_S = MAX_UNSEEN_S["iou"]  # max_unseen_s when the settings leave it unset
    DEFAULT_COAST_S = 0.0  # coast_s when the settings leave it unset
    DEFAULT_MIN_FRAMES = MIN_FRAMES["iou"]  # min_frames when the settings leave it unset
    DEFAULT_IOU_THRESHOLD = IOU_THRESHOLD["iou"]  # iou_threshold when the settings leave it unset

    def __init__(self, settings: Optional[TrackerSettings] = None):
        self.settings = settings or TrackerSettings()
        self._tracks: List[Track] = []
        self._next_key = 1
        self._next_id = 1
        self._last_time: Optional[float] = None
        self._assign = self.settings.assigner()
        s = self.settings
        self._max_unseen = float(s.max_unseen_s) if s.max_unseen_s is not None else self.DEFAULT_MAX_UNSEEN_S
        self._coast = float(s.coast_s) if s.coast_s is not None else min(self.DEFAULT_COAST_S, self._max_unseen / 2)
        self._min_frames = int(s.min_frames) if s.min_frames is not None else self.DEFAULT_MIN_FRAMES
        self._iou_threshold = float(s.iou_threshold) if s.iou_threshold is not None else self.DEFAULT_IOU_THRESHOLD
        self._tentative_misses: Optional[int] = None  # a candidate missed this many frames in a row is dropped

    @property
    def tracks(self) -> List[Track]:
        """Announced tracks still alive (a copy of the list)."""
        return [t for t in self._tracks if t.confirmed]

    @property
    def announced(self) -> int:
        """Tracks announced so far (the last id given)."""
        return self._next_id - 1

    def counts(self) -> Dict[str, int]:
        """Live announced tracks per label."""
        out: Dict[str, int] = {}
        for t in self._tracks:
            if t.confirmed:
                out[t.label] = out.get(t.label, 0) + 1
        return out

    # ------------------------------------------------------------------ hooks
    def _expected(self) -> np.ndarray:
        """Where each track is expected in the current frame, (N, 4) boxes."""
        raise NotImplementedError

    def _advance(self, dt: float) -> None:
        """Capture time moved on by `dt` seconds since the last processed frame."""

    def _corrected(self, rows: List[int], boxes: np.ndarray) -> None:
        """Tracks `rows` were matched to `boxes` (M, 4)."""

    def _added(self, boxes: np.ndarray) -> None:
        """New tracks were appended for `boxes` (M, 4)."""

    def _retain(self, keep: np.ndarray) -> None:
        """Keep only the tracks where the boolean mask `keep` is true."""
        self._tracks = [t for t, k in zip(self._tracks, keep.tolist()) if k]

    def _may_coast(self, rows: List[int]) -> np.ndarray:
        """Which of the missed tracks `rows` may send a coasted `update` (within coast_s), (len(rows),) bool;
        all by default."""
        return np.ones(len(rows), dtype=bool)

    def _heir(self, row: int, matched: Set[int]) -> Optional[int]:
        """Candidate `row` reached min_frames: the row of a lost announced track (not in `matched`) whose id it
        should take instead of a new one, or None (the default: always a new id)."""
        return None

    # ------------------------------------------------------------------ matching
    def _gate(self, rows: List[int], boxes: np.ndarray) -> np.ndarray:
        """Which (track row, box) pairs may match at all, (len(rows), len(boxes)) bool; all by default."""
        return np.ones((len(rows), len(boxes)), dtype=bool)

    def _match_rows(self, rows: List[int], dets: List[Detection], cols: List[int],
                    expected: np.ndarray) -> List[Tuple[int, int]]:
        """Pairs (track row, detection index) among `rows` and detections `cols`: IoU with the expected box,
        then (centroid_fallback_px) centre distance for the rest."""
        if not rows or not cols:
            return []
        s = self.settings
        tb = expected[rows]
        db = np.array([dets[c].box for c in cols], dtype=np.float64)
        same = self._gate(rows, db)
        if s.class_aware:
            tl = np.array([self._tracks[r].label for r in rows], dtype=object)
            dl = np.array([dets[c].label for c in cols], dtype=object)
            same &= tl[:, None] == dl[None, :]
        iou = iou_matrix(tb, db)
        pairs = self._assign(iou, same & (iou >= self._iou_threshold))
        if s.centroid_fallback_px > 0:
            free_t = np.ones(len(rows), dtype=bool)
            free_d = np.ones(len(cols), dtype=bool)
            for r, c in pairs:
                free_t[r] = False
                free_d[c] = False
            dist = centre_distances(tb, db)
            valid = same & (dist <= s.centroid_fallback_px) & free_t[:, None] & free_d[None, :]
            pairs += self._assign(-dist, valid)
        return [(rows[r], cols[c]) for r, c in pairs]

    def _match(self, dets: List[Detection], expected: np.ndarray) -> List[Tuple[int, int]]:
        """Pairs (track row, detection index) for this frame; all tracks at once."""
        return self._match_rows(list(range(len(self._tracks))), dets, list(range(len(dets))), expected)

    # ------------------------------------------------------------------ frames
    def _event(self, kind: str, t: Track, frame: int, capture_time: float, box: Optional[Box] = None,
               score: Optional[float] = None) -> Event:
        return Event(type=kind, track_id=t.track_id, label=t.label, score=t.score if score is None else score,
                     box=t.box if box is None else box, capture_time=capture_time, frame=frame)

    def update(self, frame: int, capture_time: float, detections: Sequence[Detection]) -> List[Event]:
        """Match one processed frame's detections; returns its `update`, `new` and `end` events in that order.

        `capture_time` is the frame's capture time in epoch seconds; a time earlier than the previous frame's
        (a clock step) is treated as the previous time, so tracks never expire backwards.
        """
        s = self.settings
        now = float(capture_time)
        dt = 0.0
        if self._last_time is not None:
            now = max(now, self._last_time)
            dt = now - self._last_time
        self._last_time = now
        ends: List[Event] = []
        # a track unseen for too long ends before matching, so a returning object starts a new track
        ends += self._expire(frame, now, by_misses=False)
        self._advance(dt)
        dets = [d for d in detections if s.labels is None or d.label in s.labels]
        expected = self._expected()
        pairs = self._match(dets, expected)
        matched_t = {r for r, _ in pairs}
        matched_d = {c for _, c in pairs}
        if pairs:  # before the ids are settled, so that `_heir` sees each candidate corrected by its box
            self._corrected([r for r, _ in pairs], np.array([dets[c].box for _, c in pairs], dtype=np.float64))
        updates: List[Event] = []
        news: List[Event] = []
        merged: Set[int] = set()  # lost tracks whose ids candidates took: dropped without `end`
        for r, c in pairs:
            t, d = self._tracks[r], dets[c]
            t.box, t.score, t.last_seen = d.box, d.score, now
            t.hits += 1
            t.misses = 0
            heir = self._heir(r, matched_t | merged) if not t.confirmed and t.hits >= self._min_frames else None
            if heir is not None:
                old = self._tracks[heir]
                t.track_id, t.first_seen, t.last_update_emitted = old.track_id, old.first_seen, now
                merged.add(heir)
                updates.append(self._event("update", t, frame, now))
            elif not t.confirmed and t.hits >= self._min_frames:
                self._announce(t, now)
                news.append(self._event("new", t, frame, now))
            elif t.confirmed and now - t.last_update_emitted >= s.update_interval_s:
                t.last_update_emitted = now
                updates.append(self._event("update", t, frame, now))
        missed = [i for i in range(len(self._tracks)) if i not in matched_t and i not in merged]
        coasts = self._may_coast(missed)
        for i, may in zip(missed, coasts.tolist()):
            t = self._tracks[i]
            t.misses += 1
            if (may and t.confirmed and 0 < now - t.last_seen <= self._coast
                    and now - t.last_update_emitted >= s.update_interval_s):
                t.last_update_emitted = now
                box = tuple(float(v) for v in expected[i])
                updates.append(self._event("update", t, frame, now, box=box, score=0.0))
        if merged:
            self._retain(np.array([i not in merged for i in range(len(self._tracks))], dtype=bool))
        fresh = [d for c, d in enumerate(dets) if c not in matched_d]
        for d in fresh:
            t = Track(key=self._next_key, label=d.label, box=d.box, score=d.score, first_seen=now, last_seen=now)
            self._next_key += 1
            self._tracks.append(t)
            if self._min_frames <= 1:
                self._announce(t, now)
                news.append(self._event("new", t, frame, now))
        if fresh:
            self._added(np.array([d.box for d in fresh], dtype=np.float64))
        ends += self._expire(frame, now, by_misses=True)
        return updates + news + ends

    def _expire(self, frame: int, now: float, by_misses: bool) -> List[Event]:
        """Drop tracks unseen for more than max_unseen_s (or max_unseen_updates misses), and candidates that
        missed `_tentative_misses` processed frames in a row (None: they expire by time); `end` for announced ones."""
        s = self.settings
        ends: List[Event] = []
        keep = np.ones(len(self._tracks), dtype=bool)
        tentative = self._tentative_misses
        for i, t in enumerate(self._tracks):
            expired = now - t.last_seen > self._max_unseen or (
                by_misses and s.max_unseen_updates is not None and t.misses > s.max_unseen_updates) or (
                by_misses and tentative is not None and not t.confirmed and t.misses >= tentative)
            if expired:
                keep[i] = False
                if t.confirmed:
                    ends.append(self._event("end", t, frame, now))
        if not keep.all():
            self._retain(keep)
        return ends

    def _announce(self, t: Track, now: float) -> None:
        t.track_id = self._next_id
        t.last_update_emitted = now
        self._next_id += 1

    def finish(self, capture_time: float, frame: int = -1) -> List[Event]:
        """End every announced track (the stream is over); unannounced candidates are dropped silently."""
        now = float(capture_time)
        if self._last_time is not None and now < self._last_time:
            now = self._last_time
        ends = [self._event("end", t, frame, now) for t in self._tracks if t.confirmed]
        self._retain(np.zeros(len(self._tracks), dtype=bool))
        return ends


class IouTracker(BoxTracker):
    """The light kind: a detection continues the track whose last box it overlaps most (greedy or Hungarian)."""

    def _expected(self) -> np.ndarray:
        return np.array([t.box for t in self._tracks], dtype=np.float64).reshape(-1, 4)
