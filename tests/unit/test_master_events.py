"""The master's events part (services/master/events.py) on a stand-in role: a classifier's frames (no detections)
become label-change events from the frame records' top-5, a detector's detections go through the IoU tracker,
metrics follow the feed and tracker counters, the API hides snapshot paths, and close() gives report.json's
`events` block once."""
import threading
import types

import numpy as np

from cnnvideo import config
from cnnvideo.events.types import Detection
from cnnvideo.master.events import MasterEvents, top1_detection

T0 = 1700000000.0


def role(tmp_path, **events):
    cfg = config.from_dict({"frame_size": [96, 128], "live_view": {"port": 0},
                            "events": dict({"enabled": True}, **events)}, check_files=False)
    stats = {"captured": 0, "skipped": 0}
    return types.SimpleNamespace(
        cfg=cfg, out=str(tmp_path), cond=threading.Condition(), links=None,  # (before setup: no pool members yet)
        tracker=types.SimpleNamespace(records={}, dropped=0),
        feed=types.SimpleNamespace(source=types.SimpleNamespace(stats=lambda: dict(stats)), stats=stats))


def test_top1_detection():
    """The first top-5 entry as a whole-frame box, its score clamped to [0, 1]; None without one."""
    d = top1_detection([[3, "cat", 1.5], [4, "dog", 0.1]], 128, 96)
    assert (d.label, d.score, d.box) == ("cat", 1.0, (0.0, 0.0, 128.0, 96.0))
    assert top1_detection(None, 1, 1) is None and top1_detection([], 1, 1) is None


def test_classifier_frames_make_label_change_events(tmp_path):
    """cat, cat, dog (records' top-5) -> new 1, end 1 + new 2; the end's snapshot is served by integer id only
    through the API URL; metrics count captured/skipped/dropped from the counters; close() ends track 2 and
    reports tracks, types and snapshots, once."""
    m = role(tmp_path, label_change={"update_interval_s": 100})
    ev = MasterEvents(m)
    ev.start()
    img = np.zeros((96, 128, 3), np.uint8)
    kinds = []
    for f, label in enumerate(["cat", "cat", "dog"]):
        m.tracker.records[f] = types.SimpleNamespace(top5=[[f, label, 0.5]])
        kinds += [(e.type, e.track_id) for e in ev.hook(f, T0 + f, None, img)]
        ev.processed(T0 + f, T0 + f + 0.2)
    assert kinds == [("new", 1), ("end", 1), ("new", 2)] and ev.kind == "classifier"
    api = ev.recent(10)
    assert [e["snapshot"] for e in api["events"]] == [None, "api/events/1/snapshot.jpg", None]
    assert api["counts"] == {"dog": 1}
    assert ev.snapshot(1)[:2] == b"\xff\xd8" and ev.snapshot(2) is None
    m.feed.stats.update(captured=10, skipped=4)
    m.tracker.dropped = 1
    body, ctype = ev.render()
    reg = ev.metrics.registry
    assert reg.get_sample_value("cnnvideo_frames_captured_total", {"camera": "cam"}) == 10
    assert reg.get_sample_value("cnnvideo_frames_skipped_total", {"camera": "cam"}) == 4
    assert reg.get_sample_value("cnnvideo_frames_dropped_total", {"camera": "cam"}) == 1
    assert reg.get_sample_value("cnnvideo_frames_processed_total", {"camera": "cam"}) == 3
    assert reg.get_sample_value("cnnvideo_detections_total", {"label": "cat", "camera": "cam"}) == 2
    assert b"cnnvideo_capture_to_result_seconds_bucket" in body and ctype.startswith("text/plain")
    block = ev.close()
    assert block == {"kind": "classifier", "tracks": 2, "by_type": {"end": 2, "new": 2}, "snapshots_written": 2,
                     "snapshots_dir": str(tmp_path / "snapshots"), "mqtt": None}
    assert ev.close() is block and ev.hook(3, T0 + 3, None, img) == []


def test_detections_go_through_the_iou_tracker(tmp_path):
    """A list of detections (even empty) marks a detector: the IoU tracker of events.tracker makes the tracks."""
    m = role(tmp_path, tracker={"min_frames": 2, "kind": "iou"})  # the Kalman default would coast on frame 3
    ev = MasterEvents(m)
    ev.start()
    kinds = []
    for f in range(4):
        dets = [Detection("person", 0.9, (10 + f, 10, 50 + f, 80))] if f < 3 else []
        kinds += [e.type for e in ev.hook(f, T0 + f * 0.1, dets, None)]
    assert kinds == ["new", "update"] and ev.kind == "detector"
    assert ev.close()["by_type"] == {"end": 1, "new": 1, "update": 1}


def test_disabled_events_still_meter(tmp_path):
    """events.enabled false with the live view on: no pipeline (the hook returns []), metrics still count."""
    m = role(tmp_path)
    m.cfg.events.enabled = False
    m.cfg.live_view.port = 8080
    ev = MasterEvents(m)
    ev.start()
    assert ev.pipeline is None and ev.hook(0, T0, None, None) == [] and ev.close() is None
    ev.hop_sent("m->w0", 100)
    assert ev.metrics.registry.get_sample_value("cnnvideo_hop_bytes_total", {"hop": "m->w0", "camera": "cam"}) == 100
    assert ev.recent() == {"enabled": False, "events": [], "counts": {}}


def test_zones_span_the_frame_width_and_height(tmp_path):
    """frame_size [96, 128] is (height, width): the master passes it as is, so a zone over the whole frame (x up to
    128, y up to 96) is accepted and the box standing at its bottom edge is inside it."""
    m = role(tmp_path, zones={"all": [[0, 0], [128, 0], [128, 96], [0, 96]]}, tracker={"min_frames": 1})
    ev = MasterEvents(m)
    ev.start()
    assert [z.name for z in ev.pipeline.zones.zones] == ["all"]
    kinds = [e.type for e in ev.hook(0, T0, [Detection("person", 0.9, (100.0, 40.0, 120.0, 90.0))],
                                     np.zeros((96, 128, 3), np.uint8))]
    assert kinds == ["new", "entered"]
    ev.close()
