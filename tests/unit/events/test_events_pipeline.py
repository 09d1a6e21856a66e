"""cnnvideo.events.EventPipeline without a broker: tracker -> zones -> snapshots -> metrics in one call per
frame, recent events bounded for /api/events, pipeline_from_config's keyed errors, and the package importing
nothing else from cnnvideo."""
import ast
import json
import os

import numpy as np
import pytest

from cnnvideo.events import EventPipeline, EventsConfigError, pipeline_from_config
from cnnvideo.events.metrics import Metrics
from cnnvideo.events.snapshots import SnapshotKeeper
from cnnvideo.events.tracker import IouTracker, TrackerSettings
from cnnvideo.events.types import Detection
from cnnvideo.events.zones import ZoneMonitor, parse_zones

T0 = 1700000000.0
PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                   "shared", "cnnvideo", "events")


def person(x, score=0.9):
    return [Detection("person", score, (x, 100, x + 40, 200))]


def test_one_call_per_frame_runs_every_step(tmp_path):
    """A person walking through a zone: events carry the camera, `entered`/`left` appear, the `end` names the
    snapshot URL whose JPEG exists, metrics count detections and events, recent() returns plain JSON dicts."""
    metrics = Metrics("front")
    pipe = EventPipeline(IouTracker(TrackerSettings(min_frames=2)),
                         zones=ZoneMonitor(parse_zones({"door": [[100, 150], [200, 150], [200, 230], [100, 230]]},
                                                       (240, 320))),
                         snapshots=SnapshotKeeper(str(tmp_path / "snapshots")), metrics=metrics, camera="front",
                         snapshot_url_prefix="/snapshots/")
    image = np.zeros((240, 320, 3), dtype=np.uint8)
    kinds = []
    for f in range(20):
        kinds += [e.type for e in pipe.process(f, T0 + f * 0.1, person(10 * f, score=0.5 + f / 100), image)]
    assert pipe.zone_counts() == {"door": {}} and pipe.counts() == {"person": 1}
    end = pipe.finish(T0 + 2.5)
    assert [e.type for e in end] == ["end"] and end[0].snapshot == "/snapshots/1.jpg"
    assert os.path.isfile(str(tmp_path / "snapshots" / "1.jpg"))
    assert kinds.count("new") == 1 and kinds.count("entered") == 1 and kinds.count("left") == 1
    recent = pipe.recent()
    assert {e["camera"] for e in recent} == {"front"} and recent[-1]["type"] == "end"
    assert json.loads(json.dumps(recent)) == recent
    assert metrics.registry.get_sample_value("cnnvideo_detections_total", {"label": "person", "camera": "front"}) == 20
    assert metrics.registry.get_sample_value("cnnvideo_events_total", {"type": "entered", "camera": "front"}) == 1
    assert pipe.counts() == {}


def test_end_names_the_box_its_snapshot_shows(tmp_path):
    """The snapshot is the best-scoring frame, not the last: the `end` event's `snapshot_box` is that frame's box
    (where the JPEG's green rectangle is), while its `box` stays the last one seen; both survive to_dict/from_dict."""
    import cv2

    from cnnvideo.events.types import Event

    pipe = EventPipeline(IouTracker(TrackerSettings(min_frames=1)), snapshots=SnapshotKeeper(str(tmp_path)))
    image = np.zeros((240, 320, 3), dtype=np.uint8)
    scores = [0.5, 0.6, 0.95, 0.7, 0.55]
    for f, score in enumerate(scores):
        pipe.process(f, T0 + f * 0.1, person(20 + 10 * f, score=score), image)
    end = pipe.finish(T0 + 1.0)[0]
    assert end.snapshot_box == (40.0, 100.0, 80.0, 200.0) and end.box == (60.0, 100.0, 100.0, 200.0)
    img = cv2.imread(end.snapshot)  # BGR
    assert img[150, 40, 1] > 150 and img[150, 80, 1] > 150 and img[150, 100, 1] < 60
    assert Event.from_dict(end.to_dict()) == end


def test_recent_is_bounded():
    """recent_max bounds the kept events; recent(limit) returns the newest `limit`."""
    pipe = EventPipeline(IouTracker(TrackerSettings(min_frames=1)), recent_max=5)
    for f in range(12):
        pipe.process(f, T0 + f * 0.1, person(f))
    assert [e["frame"] for e in pipe.recent()] == [7, 8, 9, 10, 11]
    assert [e["frame"] for e in pipe.recent(2)] == [10, 11] and pipe.recent(0) == []


def test_pipeline_from_config(tmp_path):
    """A config mapping builds the pipeline (tracker settings, zones, snapshots; no mqtt section: no MQTT)."""
    pipe = pipeline_from_config({"camera": "gate", "recent_max": 3,
                                 "tracker": {"min_frames": 1, "labels": ["person"], "max_unseen_s": 0.5},
                                 "zones": {"yard": [[0, 0], [100, 0], [100, 100]]},
                                 "snapshots": {"dir": str(tmp_path), "max_tracks": 4}}, (480, 640))
    assert pipe.publisher is None and pipe.camera == "gate" and pipe.tracker.settings.labels == {"person"}
    assert pipe.snapshots.max_tracks == 4 and [z.name for z in pipe.zones.zones] == ["yard"]
    assert [e.type for e in pipe.process(0, T0, person(0) + [Detection("car", 1, (0, 0, 5, 5))])] == ["new"]


@pytest.mark.parametrize("config, message", [
    ({"trackr": {}}, "events.trackr: unknown setting"),
    ({"tracker": {"min_frame": 2}}, "events.tracker.min_frame: unknown setting"),
    ({"tracker": {"min_frames": 0}}, "events.tracker.min_frames: must be an integer >= 1 or null, got 0"),
    ({"zones": {"door": [[0, 0], [1, 1]]}}, "events.zones.door: needs at least 3 points, got 2"),
    ({"mqtt": {"topic_prefix": "a/#"}}, "events.mqtt.topic_prefix: must not contain the wildcards"),
    ({"mqtt": {"prt": 1883}}, "events.mqtt.prt: unknown setting"),
    ({"snapshots": {"max_tracks": 0}}, "events.snapshots: max_tracks must be >= 1"),
])
def test_config_errors_name_the_key(config, message):
    """Every config mistake is one EventsConfigError line starting with its key."""
    with pytest.raises(EventsConfigError) as info:
        pipeline_from_config(config, (480, 640), start_mqtt=False)
    assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


def test_package_imports_nothing_else_from_cnnvideo():
    """cnnvideo.events is a pure library: no module in it imports another cnnvideo package (only relative
    imports within itself), so the master can call it without pulling anything in."""
    bad = []
    for name in sorted(os.listdir(PKG)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(PKG, name)) as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += ["%s: %s" % (name, a.name) for a in node.names if a.name.split(".")[0] == "cnnvideo"]
            elif isinstance(node, ast.ImportFrom):
                if (node.level == 0 and (node.module or "").split(".")[0] == "cnnvideo") or node.level > 1:
                    bad.append("%s: %s%s" % (name, "." * node.level, node.module))
    assert bad == []
