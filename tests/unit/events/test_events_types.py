"""cnnvideo.events.types: Detection checks its input, Event round-trips through plain, inert JSON."""
import json
import math

import pytest

from cnnvideo.events.types import Detection, Event


def make_event(**over):
    kw = dict(type="new", track_id=7, label="person", score=0.875, box=(1, 2.5, 30, 40), capture_time=1700000000.25,
              frame=12, zones=("door",), camera="cam")
    kw.update(over)
    return Event(**kw)


def test_json_round_trip():
    """to_json -> from_json gives the same Event (floats as sent, tuples restored), and to_dict is JSON-plain."""
    e = make_event(snapshot="/snapshots/7.jpg", zone="door", type="entered")
    back = Event.from_json(e.to_json())
    assert back == e
    assert json.loads(json.dumps(e.to_dict())) == e.to_dict()


def test_script_label_stays_inert_data():
    """A label like `<script>` is escaped in the JSON text (no raw `<`, `>` or `&`) yet loads back unchanged."""
    label = '</script><script>alert("x")&</script>\u2028'
    text = make_event(label=label).to_json()
    for ch in "<>&\u2028":
        assert ch not in text
    assert json.loads(text)["label"] == label
    assert Event.from_json(text).label == label


def test_json_is_strict():
    """Non-finite numbers never reach JSON: Detection and Event refuse them (and to_json uses allow_nan=False)."""
    with pytest.raises(ValueError):
        Detection("person", float("nan"), (0, 0, 1, 1))
    with pytest.raises(ValueError, match="score"):
        make_event(score=math.inf)
    with pytest.raises(ValueError, match="capture_time"):
        make_event(capture_time=float("nan"))


def test_detection_checks_box_and_label():
    """A box is 4 finite floats with x1 <= x2, y1 <= y2, a label a non-empty string; ints become floats."""
    d = Detection("car", 1, [1, 2, 3, 4])
    assert d.box == (1.0, 2.0, 3.0, 4.0) and isinstance(d.score, float)
    for bad in [(0, 0, 1), (5, 0, 1, 1), (0, 5, 1, 1), (0, 0, float("inf"), 1)]:
        with pytest.raises(ValueError):
            Detection("car", 0.5, bad)
    with pytest.raises(ValueError):
        Detection("", 0.5, (0, 0, 1, 1))


def test_event_type_is_checked():
    """Only new|update|end|entered|left are event types."""
    with pytest.raises(ValueError, match="event type"):
        make_event(type="exec")
