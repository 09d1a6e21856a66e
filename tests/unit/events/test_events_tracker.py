"""cnnvideo.events.tracker: stable ids over moving and crossing boxes, expiry by capture time (frames may be
skipped), min_frames against flicker, the label filter and a vectorised IoU that agrees with the definition."""
import numpy as np
import pytest

from cnnvideo.events.tracker import IouTracker, TrackerSettings, iou_matrix
from cnnvideo.events.types import Detection, EventsConfigError

FPS = 10.0
T0 = 1700000000.0


def box_at(x, y, w=40, h=100):
    return (x, y, x + w, y + h)


def run(tracker, frames):
    """Feed (frame, detections) pairs at FPS in capture time; all events in order."""
    events = []
    for frame, dets in frames:
        events += tracker.update(frame, T0 + frame / FPS, dets)
    return events


def test_moving_box_keeps_one_id():
    """A box moving 6 px a frame for 30 frames is one track: one `new` (after min_frames), updates, one `end`."""
    tr = IouTracker(TrackerSettings(min_frames=3))
    events = run(tr, [(f, [Detection("person", 0.9, box_at(10 + 6 * f, 50))]) for f in range(30)])
    events += tr.finish(T0 + 3.0)
    kinds = [e.type for e in events]
    assert kinds.count("new") == 1 and kinds.count("end") == 1
    assert events[0].type == "new" and events[0].frame == 2
    assert {e.track_id for e in events} == {1}
    assert kinds.count("update") == 27
    assert events[-2].box == pytest.approx(box_at(10 + 6 * 29, 50))


def test_two_crossing_people_keep_their_ids():
    """Two people walking past each other (one a little lower) keep their ids through the overlap: each id's
    boxes move in one direction only."""
    tr = IouTracker(TrackerSettings(min_frames=2))
    frames = []
    for f in range(40):
        frames.append((f, [Detection("person", 0.8, box_at(20 + 8 * f, 100)),
                           Detection("person", 0.8, box_at(340 - 8 * f, 140))]))
    events = run(tr, frames) + tr.finish(T0 + 5)
    xs = {}
    for e in events:
        if e.type in ("new", "update"):
            xs.setdefault(e.track_id, []).append(e.box[0])
    assert sorted(xs) == [1, 2]
    directions = sorted(np.sign(np.diff(v)).tolist() for v in xs.values())
    assert directions == [[-1.0] * 38, [1.0] * 38]  # never a swap: each id moves one way throughout
    assert [e.track_id for e in events if e.type == "end"] == [1, 2]


def test_skipped_frames_within_max_unseen_s_keep_the_track():
    """The drop policy skips 8 frames (0.8 s of capture time < max_unseen_s 1.0): the track survives; a gap
    of 1.5 s ends it and the object comes back as id 2. Frame numbers alone do not expire anything."""
    tr = IouTracker(TrackerSettings(min_frames=1, max_unseen_s=1.0))
    b = box_at(100, 100)
    ev = run(tr, [(f, [Detection("person", 0.9, b)]) for f in range(3)])
    ev += tr.update(10, T0 + 1.0, [Detection("person", 0.9, b)])  # frames 3..9 were never processed
    assert [e.type for e in ev] == ["new", "update", "update", "update"] and {e.track_id for e in ev} == {1}
    ev = tr.update(500, T0 + 1.9, [Detection("person", 0.9, b)])  # a big frame jump, but only 0.9 s
    assert [(e.type, e.track_id) for e in ev] == [("update", 1)]
    ev = tr.update(501, T0 + 3.4, [Detection("person", 0.9, b)])  # 1.5 s unseen: ends, a new track starts
    assert [(e.type, e.track_id) for e in ev] == [("new", 2), ("end", 1)]


def test_empty_frames_expire_by_time_or_by_updates():
    """Processed frames without the object end its track after max_unseen_s of capture time, or after
    max_unseen_updates misses when that is set."""
    tr = IouTracker(TrackerSettings(min_frames=1, max_unseen_s=0.5))
    run(tr, [(0, [Detection("person", 0.9, box_at(0, 0))])])
    assert run(tr, [(f, []) for f in range(1, 6)]) == []  # 0.5 s: not yet
    assert [e.type for e in tr.update(6, T0 + 0.6, [])] == ["end"]
    tr = IouTracker(TrackerSettings(min_frames=1, max_unseen_s=10, max_unseen_updates=2))
    run(tr, [(0, [Detection("person", 0.9, box_at(0, 0))])])
    assert run(tr, [(1, []), (2, [])]) == []
    assert [e.type for e in run(tr, [(3, [])])] == ["end"]


def test_min_frames_suppresses_flicker():
    """Detections that appear for one frame at random places never become events; a steady object is announced
    on its min_frames-th frame, and ids count announced tracks only (no gaps from flicker)."""
    rng = np.random.default_rng(0)
    tr = IouTracker(TrackerSettings(min_frames=3, max_unseen_s=0.3))
    frames = []
    for f in range(30):
        x, y = rng.uniform(0, 600, 2)
        dets = [Detection("person", 0.4, box_at(x, y, 10, 10))]
        if f >= 20:
            dets.append(Detection("car", 0.9, box_at(700, 300)))
        frames.append((f, dets))
    events = run(tr, frames)
    assert [(e.type, e.track_id, e.label, e.frame) for e in events if e.type == "new"] == [("new", 1, "car", 22)]


def test_label_filter_and_class_aware_matching():
    """Only labels in `labels` are tracked, and a detection of another label does not continue a track."""
    tr = IouTracker(TrackerSettings(min_frames=1, labels=frozenset({"person", "dog"})))
    ev = tr.update(0, T0, [Detection("person", 0.9, box_at(0, 0)), Detection("car", 0.9, box_at(200, 0))])
    assert [(e.type, e.label) for e in ev] == [("new", "person")]
    ev = tr.update(1, T0 + 0.1, [Detection("dog", 0.9, box_at(0, 0))])  # same place, other label
    assert [(e.type, e.label, e.track_id) for e in ev] == [("new", "dog", 2)]
    assert tr.counts() == {"person": 1, "dog": 1}


def test_centroid_fallback_links_a_jump_past_any_overlap():
    """After skipped frames a fast object no longer overlaps its last box: without the fallback it is a new
    track; with centroid_fallback_px it continues the old one."""
    for fallback, ids in ((0.0, {1, 2}), (120.0, {1})):
        tr = IouTracker(TrackerSettings(min_frames=1, centroid_fallback_px=fallback, max_unseen_s=1))
        ev = tr.update(0, T0, [Detection("car", 0.9, box_at(0, 0))])
        ev += tr.update(5, T0 + 0.5, [Detection("car", 0.9, box_at(100, 0))])
        assert {e.track_id for e in ev} == ids


def test_hungarian_matcher_keeps_crossing_ids():
    """The Hungarian matcher (scipy) gives the same ids on the crossing scene as greedy."""
    pytest.importorskip("scipy")
    for matcher in ("greedy", "hungarian"):
        tr = IouTracker(TrackerSettings(min_frames=1, matcher=matcher))
        last = {}
        for f in range(40):
            for e in tr.update(f, T0 + f / FPS, [Detection("person", 0.8, box_at(20 + 8 * f, 100)),
                                                 Detection("person", 0.8, box_at(340 - 8 * f, 140))]):
                if e.track_id in last:
                    assert (e.box[0] - last[e.track_id]) in (8.0, -8.0), matcher
                last[e.track_id] = e.box[0]


def test_update_interval_limits_update_events():
    """update_interval_s 0.5 at 10 fps gives an `update` every 5th frame, not every frame."""
    tr = IouTracker(TrackerSettings(min_frames=1, update_interval_s=0.5))
    ev = run(tr, [(f, [Detection("person", 0.9, box_at(f, 0))]) for f in range(21)])
    assert [e.frame for e in ev if e.type == "update"] == [5, 10, 15, 20]


def test_clock_step_back_expires_nothing():
    """A capture time earlier than the previous one is taken as the previous: no track ends early or late."""
    tr = IouTracker(TrackerSettings(min_frames=1, max_unseen_s=1))
    tr.update(0, T0 + 10, [Detection("person", 0.9, box_at(0, 0))])
    assert tr.update(1, T0, [Detection("person", 0.9, box_at(0, 0))])[0].capture_time == T0 + 10


def test_iou_matrix_matches_the_definition():
    """The broadcast IoU equals a per-pair reference on random boxes, including empty and disjoint ones."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 100, (7, 4))
    b = rng.uniform(0, 100, (5, 4))
    a[:, 2:] = a[:, :2] + rng.uniform(0, 50, (7, 2))
    b[:, 2:] = b[:, :2] + rng.uniform(0, 50, (5, 2))
    b[0, 2:] = b[0, :2]  # a zero-area box

    def ref(p, q):
        iw = max(0.0, min(p[2], q[2]) - max(p[0], q[0]))
        ih = max(0.0, min(p[3], q[3]) - max(p[1], q[1]))
        union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - iw * ih
        return iw * ih / union if union > 0 else 0.0

    want = np.array([[ref(p, q) for q in b] for p in a])
    assert np.allclose(iou_matrix(a, b), want)
    assert iou_matrix(np.zeros((0, 4)), b).shape == (0, 5)


def test_settings_errors_name_the_key():
    """Bad tracker settings raise EventsConfigError with a one-line message naming the field."""
    with pytest.raises(EventsConfigError, match=r"^events\.tracker\.min_frames: "):
        TrackerSettings(min_frames=0)
    with pytest.raises(EventsConfigError, match=r"^events\.tracker\.max_unseen_s: "):
        TrackerSettings(max_unseen_s=0)
    with pytest.raises(EventsConfigError, match=r"^events\.tracker\.matcher: "):
        TrackerSettings(matcher="magic")


def test_unset_settings_take_each_kinds_defaults():
    """min_frames and iou_threshold left unset take the kind's value (MIN_FRAMES, IOU_THRESHOLD): a still box is
    announced at its 2nd frame by the Kalman tracker and at its 3rd by the IoU tracker, and set explicitly the
    value holds for both; a box that moves to IoU 0.25 with its last box continues an IoU track only when
    iou_threshold is set below the IoU kind's 0.3."""
    from cnnvideo.events.trackers import make_tracker

    still = [(f, [Detection("person", 0.9, box_at(100, 100))]) for f in range(4)]
    for kind, first in (("kalman", 1), ("iou", 2)):
        assert [e.frame for e in run(make_tracker(TrackerSettings(kind=kind)), still) if e.type == "new"] == [first]
        explicit = make_tracker(TrackerSettings(kind=kind, min_frames=4))
        assert [e.frame for e in run(explicit, still) if e.type == "new"] == [3]
    shift = 40 * 0.6  # 40 px wide boxes this far apart overlap at IoU (40 - 24) / (40 + 24) = 0.25
    moved = [(f, [Detection("person", 0.9, box_at(100 + shift * f, 100))]) for f in range(3)]
    assert iou_matrix(np.array([box_at(100, 100)]), np.array([box_at(100 + shift, 100)]))[0, 0] == pytest.approx(0.25)
    assert [e.type for e in run(IouTracker(TrackerSettings(min_frames=1)), moved)].count("new") == 3
    assert [e.type for e in run(IouTracker(TrackerSettings(min_frames=1, iou_threshold=0.2)), moved)].count("new") == 1
