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
    assert len(th.uris) <= HELD and th.every > 1 and all(f % th.every == 0 for f in th.uris)
    records = [FrameRecord(f, [0, 1], top5=[[1, "goldfish", 0.5]]) for f in range(500)]
    records[0].top5 = None  # unlabelled: never picked
    strip = th.pick(records, n=5)
    assert len(strip) == 5 and all(f in th.uris and f != 0 for f, _, _, _ in strip)
    assert strip[0][2:] == ("goldfish", 0.5) and strip[0][1].startswith("data:image/jpeg")
    frames = [f for f, _, _, _ in strip]
    assert frames == sorted(frames) and frames[-1] == max(f for f in th.uris if f)
