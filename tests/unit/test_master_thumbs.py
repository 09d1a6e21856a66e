"""report.html's thumbnails: at most 48 held however long the run (the stride doubles), and the strip picks up
to n evenly spread labelled frames that have one."""
import numpy as np
import pytest

from cnnvideo.master.thumbs import HELD, Thumbnails
from cnnvideo.results.report import FrameRecord

pytest.importorskip("cv2")


def test_bounded_and_evenly_picked():
    th = Thumbnails()
    rgb = np.zeros((32, 48, 3), dtype=np.uint8)
    for f in range(500):
        th.add(f, rgb)
    th.add(500, None)  # a frame whose pixels are gone: no thumbnail
    assert len(th.images) <= HELD and th.every > 1 and all(f % th.every == 0 for f in th.images)
    records = [FrameRecord(f, [0, 1], top5=[[1, "goldfish", 0.5]]) for f in range(500)]
    records[0].top5 = None  # unlabelled: never picked
    strip = th.pick(records, n=5)
    assert len(strip) == 5 and all(f in th.images and f != 0 for f, _, _, _ in strip)
    assert strip[0][2:] == ("goldfish", 0.5) and strip[0][1].startswith("data:image/jpeg")
    frames = [f for f, _, _, _ in strip]
    assert frames == sorted(frames) and frames[-1] == max(f for f in th.images if f)


def test_picked_thumbnails_are_the_jpegs_of_their_frames():
    """Thumbnails are held as small images and made JPEG when picked: each picked one is the very data URI that
    thumbnail_uri makes of its frame, boxes drawn, with the count as caption."""
    from cnnvideo.events.types import Detection
    from cnnvideo.results import report as rpt

    rng = np.random.default_rng(0)
    th, frames = Thumbnails(), {}
    boxes = [Detection("person", 0.9, (10.0, 20.0, 200.0, 300.0))]
    for f in range(60):
        frames[f] = rng.integers(0, 256, (480, 720, 3), dtype=np.uint8)
        th.add(f, frames[f], detections=boxes if f % 3 else [])
    records = [FrameRecord(f, [0, 1], done_at=1.0) for f in range(60)]
    strip = th.pick(records, n=6)
    assert len(strip) == 6
    for f, uri, text, _ in strip:
        assert uri == rpt.thumbnail_uri(frames[f], detections=boxes if f % 3 else [])
        assert text == ("1 person" if f % 3 else "0 people")
