"""cnnvideo.events.snapshots: the best-scoring frame per track is kept (copied only when better), bounded in
number, and written on `end` as a JPEG that cv2 decodes, with the box drawn where the event's box is."""
import os

import cv2
import numpy as np

from cnnvideo.events.snapshots import SnapshotKeeper
from cnnvideo.events.types import Event

H, W = 120, 160


def ev(kind, tid, score, box=(40, 30, 120, 90)):
    return Event(type=kind, track_id=tid, label="person", score=score, box=box, capture_time=0.0, frame=0)


def frame(value):
    return np.full((H, W, 3), value, dtype=np.uint8)


def test_keeps_the_best_frame_and_copies_it(tmp_path):
    """Of frames offered with scores 0.5, 0.9, 0.7 the 0.9 one is written; changing the caller's array after
    offering does not change the kept copy; a worse frame is not copied at all."""
    k = SnapshotKeeper(str(tmp_path))
    f1, f2, f3 = frame(40), frame(90), frame(200)
    assert k.offer(ev("new", 1, 0.5), f1)
    assert k.offer(ev("update", 1, 0.9, box=(10, 10, 60, 60)), f2)
    assert not k.offer(ev("update", 1, 0.7), f3)
    f2[:] = 255  # the caller reuses its buffer
    path = k.finish(ev("end", 1, 0.7))
    assert path == os.path.join(str(tmp_path), "1.jpg") and len(k) == 0
    img = cv2.imread(path)
    assert img is not None and img.shape == (H, W, 3)
    assert abs(int(img[100, 100, 1]) - 90) <= 6  # the 0.9 frame, not the later-overwritten buffer


def test_box_is_drawn_at_the_event_box(tmp_path):
    """The written JPEG has the box in the configured colour (red in RGB, so cv2's BGR order is handled) on its
    edges, and the frame's own colour inside and outside the box."""
    k = SnapshotKeeper(str(tmp_path), colour_rgb=(255, 0, 0), thickness=3)
    x1, y1, x2, y2 = 40, 30, 120, 90
    k.offer(ev("new", 5, 0.8, box=(x1, y1, x2, y2)), frame(60))
    img = cv2.imread(k.finish(ev("end", 5, 0.8)))  # BGR
    for y, x in [(y1, (x1 + x2) // 2), (y2, (x1 + x2) // 2), ((y1 + y2) // 2, x1), ((y1 + y2) // 2, x2)]:
        b, g, r = (int(v) for v in img[y, x])
        assert r > 200 and g < 60 and b < 60, (y, x, (b, g, r))
    for y, x in [((y1 + y2) // 2, (x1 + x2) // 2), (5, 5)]:
        assert np.all(np.abs(img[y, x].astype(int) - 60) <= 8), (y, x, img[y, x])


def test_memory_is_bounded(tmp_path):
    """With max_tracks 2, a third live track pushes the oldest one out: at most two frames are held."""
    k = SnapshotKeeper(str(tmp_path), max_tracks=2)
    for tid in (1, 2, 3):
        k.offer(ev("new", tid, 0.5), frame(10 * tid))
    assert len(k) == 2
    assert k.finish(ev("end", 1, 0.5)) is None
    assert k.finish(ev("end", 3, 0.5)) is not None


def test_no_frame_or_a_bad_frame_is_ignored(tmp_path):
    """Events without a frame, or with a non-RGB-uint8 array, keep nothing and write nothing."""
    k = SnapshotKeeper(str(tmp_path))
    assert not k.offer(ev("new", 1, 0.5), None)
    assert not k.offer(ev("new", 1, 0.5), np.zeros((H, W), dtype=np.uint8))
    assert not k.offer(ev("new", 1, 0.5), np.zeros((H, W, 3), dtype=np.float32))
    assert k.finish(ev("end", 1, 0.5)) is None and os.listdir(str(tmp_path)) == []
