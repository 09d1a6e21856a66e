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


def test_a_run_of_known_length_makes_no_thumbnail_it_would_drop(monkeypatch):
    """With the run's length known (offline), the stride starts where doubling would end: 150 frames make 38
    thumbnails (every 4th), the same ones the doubling keeps, not 86; an unknown length (0) starts at 1."""
    from cnnvideo.master import thumbs as thumbs_module
    from cnnvideo.master.thumbs import first_stride

    assert [first_stride(n) for n in (0, 1, HELD, HELD + 1, 150, 1000)] == [1, 1, 1, 2, 4, 32]
    made = []
    real = thumbs_module.rpt.thumbnail
    monkeypatch.setattr(thumbs_module.rpt, "thumbnail", lambda *a, **k: made.append(a) or real(*a, **k))
    rgb = np.zeros((32, 48, 3), dtype=np.uint8)
    known, doubling = Thumbnails(lambda: 150), Thumbnails()
    for f in range(150):
        known.add(f, rgb)
    assert len(made) == 38 and sorted(known.images) == list(range(0, 150, 4))
    del made[:]
    for f in range(150):
        doubling.add(f, rgb)
    assert len(made) == 86 and sorted(doubling.images) == sorted(known.images)
    live = Thumbnails(lambda: 0)
    live.add(0, rgb)
    assert live.every == 1


def test_shrink_is_close_to_area_averaging():
    """A thumbnail's shrink (area halving, then bilinear) has the asked size and stays within a few grey levels of
    OpenCV's INTER_AREA on a smooth image with edges; no side goes below 1."""
    import cv2

    from cnnvideo.results.report import shrink

    yy, xx = np.mgrid[0:480, 0:720]
    img = np.stack([(xx * 255 // 719), (yy * 255 // 479), ((xx // 60 + yy // 60) % 2) * 255], -1).astype(np.uint8)
    small = shrink(img, 240, 160)
    area = cv2.resize(img, (240, 160), interpolation=cv2.INTER_AREA)
    assert small.shape == (160, 240, 3) and small.dtype == np.uint8
    assert np.abs(small.astype(int) - area).mean() < 3.0
    assert shrink(img, 1, 1).shape == (1, 1, 3)
