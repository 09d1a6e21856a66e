"""cnnvideo.events.zones: config validation with one-line keyed errors, vectorised point-in-polygon on the box
bottom-centre, entered/left events per track and zone, and live counts per zone and label."""
import numpy as np
import pytest

from cnnvideo.events.tracker import IouTracker, TrackerSettings
from cnnvideo.events.types import Detection, Event, EventsConfigError
from cnnvideo.events.zones import ZoneMonitor, anchor_points, parse_zones, points_in_polygon

FRAME = (480, 640)  # (height, width), as the config's frame_size; zone points are (x, y)
DOOR = [[100, 200], [300, 200], [300, 400], [100, 400]]
OUTSIDE = "is outside the frame (x 0..640, y 0..480: frame_size [480, 640] is height, width)"


@pytest.mark.parametrize("zones, message", [
    ({"door": [[0, 0], [10, 10]]}, "events.zones.door: needs at least 3 points, got 2"),
    ({"door": [[0, 0], [10, 10], [700, 10]]}, "events.zones.door: point 2 (x 700, y 10) " + OUTSIDE),
    ({"door": [[0, 0], [10, 10], [5, -1]]}, "events.zones.door: point 2 (x 5, y -1) " + OUTSIDE),
    ({"door": [[0, 0], [10, 10], [10, 500]]}, "events.zones.door: point 2 (x 10, y 500) " + OUTSIDE),
    ({"door": [[0, 0], [10, 10], ["a", 3]]}, "events.zones.door: point 2 must be [x, y] numbers, got ['a', 3]"),
    ({"door": [[0, 0], [10, 10], [20, 20]]}, "events.zones.door: the polygon has no area (points on one line)"),
    ({"door": "0,0 1,1 2,2"}, "events.zones.door: must be a list of [x, y] points"),
    ({"front door": DOOR}, "events.zones.front door: zone names are 1-64 letters, digits, '_' or '-'"),
    ([DOOR], "events.zones: must be a mapping of zone name to a list of [x, y] points"),
])
def test_validation_errors_are_one_line_and_name_the_key(zones, message):
    """Each bad zone config raises EventsConfigError (a ValueError) whose single-line message names the key."""
    with pytest.raises(EventsConfigError) as info:
        parse_zones(zones, FRAME)
    assert str(info.value) == message and "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_valid_zones_parse():
    """Points on the frame edge are inside the frame; no config means no zones."""
    zones = parse_zones({"door": DOOR, "all": [[0, 0], [640, 0], [640, 480], [0, 480]]}, FRAME)
    assert [z.name for z in zones] == ["door", "all"] and zones[0].points[0] == (100.0, 200.0)
    assert parse_zones(None, FRAME) == []


def test_point_in_polygon_on_a_concave_zone():
    """The vectorised even-odd test agrees with the expected answer on an L-shaped (concave) polygon."""
    ell = np.array([[0, 0], [10, 0], [10, 4], [4, 4], [4, 10], [0, 10]], dtype=float)
    pts = np.array([[2, 2], [8, 2], [2, 8], [8, 8], [11, 2], [-1, 5], [5, 5]])
    assert points_in_polygon(pts, ell).tolist() == [True, True, True, False, False, False, False]


def test_anchor_is_the_box_bottom_centre():
    """A tall box whose centre is above the zone but whose feet (bottom-centre) are in it is in the zone."""
    assert anchor_points(np.array([[180, 50, 220, 250]])).tolist() == [[200.0, 250.0]]
    z = parse_zones({"door": DOOR}, FRAME)[0]
    assert z.contains(anchor_points(np.array([[180, 50, 220, 250]]))).tolist() == [True]


def walk(monitor, tracker, xs, y=150, label="person"):
    """A person (40x100 box) walking through x positions, one frame (0.1 s) each, continuing the frame count of
    earlier walks on this monitor; the monitor's events."""
    out = []
    for x in xs:
        f = monitor.frames_walked = getattr(monitor, "frames_walked", -1) + 1
        out += monitor.update(tracker.update(f, 1000.0 + f * 0.1, [Detection(label, 0.9, (x, y, x + 40, y + 100))]))
    return out


def test_entered_and_left_per_track_and_zone():
    """Walking into the door zone gives `entered`, walking out `left` (with the zone named), counts follow,
    and `zones` on each event says where the track is."""
    zm = ZoneMonitor(parse_zones({"door": DOOR, "left_half": [[0, 0], [320, 0], [320, 480], [0, 480]]}, FRAME))
    tr = IouTracker(TrackerSettings(min_frames=1))
    ev = walk(zm, tr, [20, 40])  # bottom-centre (40..60, 250): in left_half, not in the door (x < 100)
    assert [(e.type, e.zone) for e in ev] == [("new", None), ("entered", "left_half"), ("update", None)]
    assert ev[0].zones == ("left_half",)
    ev = walk(zm, tr, [60, 80, 100])
    assert [(e.type, e.zone) for e in ev if e.type in ("entered", "left")] == [("entered", "door")]
    assert zm.counts() == {"door": {"person": 1}, "left_half": {"person": 1}}
    ev = walk(zm, tr, list(range(120, 400, 20)))
    left = [(e.type, e.zone, e.track_id) for e in ev if e.type == "left"]
    assert left == [("left", "door", 1), ("left", "left_half", 1)]
    assert zm.counts() == {"door": {}, "left_half": {}}


def test_end_inside_a_zone_leaves_it_first():
    """A track that ends inside a zone produces `left` for that zone before its `end`, and the count drops."""
    zm = ZoneMonitor(parse_zones({"door": DOOR}, FRAME))
    tr = IouTracker(TrackerSettings(min_frames=1))
    walk(zm, tr, [150], label="dog")
    assert zm.counts() == {"door": {"dog": 1}}
    ev = zm.update(tr.finish(1001.0))
    assert [(e.type, e.zone) for e in ev] == [("left", "door"), ("end", None)]
    assert zm.counts() == {"door": {}}


def test_no_zones_passes_events_through():
    """Without zones the monitor returns the events unchanged."""
    e = Event(type="new", track_id=1, label="a", score=1, box=(0, 0, 1, 1), capture_time=0, frame=0)
    assert ZoneMonitor([]).update([e]) == [e]
