"""LabelChangeTracker: a classifier's top-1 label per processed frame becomes one event track per run of the same
label (`end` of the old before `new` of the next), debounced by min_frames, with min_score and update throttling,
and it drives an EventPipeline (snapshots, recent events) like the IoU tracker does."""
import os

import numpy as np
import pytest

from cnnvideo.events import EventPipeline, EventsConfigError
from cnnvideo.events.labelchange import LabelChangeSettings, LabelChangeTracker, label_change_from_config
from cnnvideo.events.snapshots import SnapshotKeeper
from cnnvideo.events.types import Detection

T0 = 1700000000.0
BOX = (0, 0, 128, 96)


def top(label, score=0.5):
    return [Detection(label, score, BOX)] if label else []


def run(tracker, labels, dt=0.1):
    out = []
    for f, lb in enumerate(labels):
        out += [(e.type, e.track_id, e.label, e.frame) for e in tracker.update(f, T0 + f * dt, top(lb))]
    return out


def test_a_change_of_label_ends_one_track_and_starts_the_next():
    """cat cat dog dog cat: new 1 cat, then at frame 2 end 1 cat + new 2 dog, at frame 4 end 2 + new 3 cat; ids
    count up and are never reused; counts() is the current label; finish() ends it."""
    t = LabelChangeTracker(LabelChangeSettings(update_interval_s=10))
    assert run(t, ["cat", "cat", "dog", "dog", "cat"]) == [
        ("new", 1, "cat", 0), ("end", 1, "cat", 2), ("new", 2, "dog", 2), ("end", 2, "dog", 4), ("new", 3, "cat", 4)]
    assert t.counts() == {"cat": 1} and t.announced == 3
    assert [(e.type, e.track_id, e.label) for e in t.finish(T0 + 9)] == [("end", 3, "cat")]
    assert t.counts() == {} and t.finish(T0 + 10) == []


def test_min_frames_debounces_flicker():
    """With min_frames 2 a one-frame flicker (dog) changes nothing; two frames of dog do; no label for two frames
    ends the track without starting one."""
    t = LabelChangeTracker(LabelChangeSettings(min_frames=2, update_interval_s=10))
    assert run(t, ["cat", "cat", "dog", "cat", "dog", "dog", None, None]) == [
        ("new", 1, "cat", 1), ("end", 1, "cat", 5), ("new", 2, "dog", 5), ("end", 2, "dog", 7)]
    assert t.counts() == {}


def test_min_score_and_update_interval():
    """A top-1 under min_score is no label; the best of several detections counts; `update` at most once per
    update_interval_s of capture time, carrying the latest score."""
    t = LabelChangeTracker(LabelChangeSettings(min_score=0.3, update_interval_s=0.25))
    assert t.update(0, T0, [Detection("cat", 0.2, BOX)]) == []
    evs = t.update(1, T0 + 0.1, [Detection("cat", 0.4, BOX), Detection("dog", 0.9, BOX)])
    assert [(e.type, e.label, e.score) for e in evs] == [("new", "dog", 0.9)]
    kinds = [[e.type for e in t.update(f, T0 + 0.1 * f, [Detection("dog", 0.5 + f / 100, BOX)])] for f in range(2, 8)]
    assert kinds == [[], [], ["update"], [], [], ["update"]]


def test_capture_time_never_goes_back():
    """A frame completing out of order (earlier capture time) is stamped with the latest time seen."""
    t = LabelChangeTracker()
    t.update(5, T0 + 1.0, top("cat"))
    (end, new) = t.update(4, T0 + 0.5, top("dog"))
    assert end.capture_time == new.capture_time == T0 + 1.0


def test_config_errors_name_the_key():
    """Unknown keys and bad values are one-line EventsConfigError naming the key."""
    with pytest.raises(EventsConfigError, match=r"^events\.label_change\.min_frame: unknown setting"):
        label_change_from_config({"min_frame": 2})
    with pytest.raises(EventsConfigError, match=r"^events\.label_change\.min_score: must be in \[0, 1\]"):
        label_change_from_config({"min_score": 2})
    with pytest.raises(EventsConfigError, match=r"^x\.min_frames: must be an integer >= 1"):
        label_change_from_config({"min_frames": 0}, key="x")
    assert label_change_from_config({"min_frames": 3}).settings.min_frames == 3


def test_in_a_pipeline_with_snapshots(tmp_path):
    """In place of the IoU tracker: the ended label's best frame is written as <id>.jpg, recent() lists the
    events, counts() follows the current label."""
    pipe = EventPipeline(LabelChangeTracker(), snapshots=SnapshotKeeper(str(tmp_path)), camera="door")
    img = np.zeros((96, 128, 3), np.uint8)
    for f, lb in enumerate(["cat", "cat", "dog"]):
        pipe.process(f, T0 + f, top(lb, 0.3 + f / 10), img)
    assert pipe.counts() == {"dog": 1}
    assert [(e["type"], e["track_id"]) for e in pipe.recent()] == [("new", 1), ("update", 1), ("end", 1), ("new", 2)]
    assert pipe.recent()[2]["snapshot"] == os.path.join(str(tmp_path), "1.jpg") and os.path.isfile(tmp_path / "1.jpg")
