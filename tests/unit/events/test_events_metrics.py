"""cnnvideo.events.metrics: every metric is on the Metrics object's own registry, `render()` passes
`promtool check metrics`, the values (fps, latency, hop rate, publisher deltas) are what was observed, and every
series carries the camera's label."""
import os
import re
import subprocess

import pytest

from cnnvideo.events.metrics import Metrics, RateWindow, content_type
from cnnvideo.events.types import Detection, Event

PROMTOOL = "/usr/bin/promtool"


def filled(camera="door"):
    m = Metrics(camera)
    for i in range(10):
        m.frame_captured()
        m.frame_processed(capture_time=100.0 + i * 0.1, result_time=100.25 + i * 0.1)
    m.frame_skipped(3)
    m.frame_dropped()
    m.hop_sent("master->w1", 1000, now=0.0)
    m.hop_sent("master->w1", 3000, now=2.0)
    m.hop_sent("w1->w2", 500, now=0.0)
    m.stage_computed("w1", "torch", 0.125)
    m.stage_computed("w2", "onnxruntime", 0.5)
    m.observe_detections([Detection("person", 0.9, (0, 0, 1, 1)), Detection("dog", 0.5, (0, 0, 1, 1))])
    m.observe_events([Event(type="new", track_id=1, label="a", score=1, box=(0, 0, 1, 1), capture_time=0, frame=0)])
    m.observe_publisher(published=5, dropped=2, queued=3, connected=True)
    m.observe_publisher(published=7, dropped=2, queued=0, connected=False)
    return m


def test_promtool_check_metrics_is_clean():
    """`promtool check metrics` reads render()'s text and reports no problem (exit 0, no output)."""
    if not os.path.exists(PROMTOOL):
        pytest.skip("promtool not installed (Debian package prometheus)")
    text = filled().render()
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.strip() == b"" and proc.stderr.strip() == b"", proc


def test_values_are_what_was_observed():
    """Counters, the latency histogram, fps, hop rate and the publisher's cumulative stats come out right."""
    m = filled()

    def v(name, labels=None):
        return m.registry.get_sample_value(name, dict(labels or {}, camera="door"))

    assert v("cnnvideo_frames_captured_total") == 10 and v("cnnvideo_frames_skipped_total") == 3
    assert v("cnnvideo_capture_to_result_seconds_count") == 10
    assert v("cnnvideo_capture_to_result_seconds_bucket", {"le": "0.25"}) == 10
    assert v("cnnvideo_capture_to_result_seconds_bucket", {"le": "0.1"}) == 0
    assert v("cnnvideo_processed_fps") == pytest.approx(10.0)  # 9 results after the first over 0.9 s
    assert v("cnnvideo_hop_bytes_total", {"hop": "master->w1"}) == 4000
    assert v("cnnvideo_hop_effective_bytes_per_second", {"hop": "master->w1"}) == pytest.approx(1500.0)
    assert v("cnnvideo_stage_compute_seconds_total", {"worker": "w2", "engine": "onnxruntime"}) == 0.5
    assert v("cnnvideo_detections_total", {"label": "dog"}) == 1
    assert v("cnnvideo_events_total", {"type": "new"}) == 1
    assert v("cnnvideo_events_published_total") == 7 and v("cnnvideo_events_dropped_total") == 2
    assert v("cnnvideo_mqtt_connected") == 0 and v("cnnvideo_events_queued") == 0
    assert b'cnnvideo_frames_processed_total{camera="door"} 10.0' in m.render()
    assert content_type().startswith("text/plain")


def test_each_instance_has_its_own_registry():
    """Two Metrics in one process do not collide (the global registry would refuse duplicate names) and do not
    share values."""
    a, b = Metrics("door"), Metrics("door")
    a.frame_captured(4)
    assert a.registry.get_sample_value("cnnvideo_frames_captured_total", {"camera": "door"}) == 4
    assert b.registry.get_sample_value("cnnvideo_frames_captured_total", {"camera": "door"}) == 0


def sample_labels(text):
    """{metric name: [labels of each sample line]} from a text exposition (comment lines left out)."""
    out = {}
    for line in text.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$', line)
        assert m, line
        out.setdefault(m.group(1), []).append(dict(re.findall(r'([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
    return out


ALL_SAMPLES = {
    "frames_captured_total", "frames_processed_total", "frames_skipped_total", "frames_dropped_total",
    "processed_fps", "capture_to_result_seconds_bucket", "capture_to_result_seconds_count",
    "capture_to_result_seconds_sum", "hop_bytes_total", "hop_effective_bytes_per_second",
    "stage_compute_seconds_total", "detections_total", "events_total", "events_published_total",
    "events_dropped_total", "events_queued", "mqtt_connected"}


def test_every_series_carries_its_camera():
    """Two masters' Metrics (cameras door and yard): every sample line of each rendering, of every metric (the
    unlabelled ones, the labelled ones, the histogram's buckets, sum, count and created), has its own camera and
    none of the other's; the values stay apart."""
    door, yard = filled("door"), filled("yard")
    yard.frame_captured(5)
    for m, camera in ((door, "door"), (yard, "yard")):
        text = m.render()
        series = sample_labels(text)
        assert {n[len("cnnvideo_"):] for n in series if not n.endswith("_created")} == ALL_SAMPLES  # all of them
        for name, label_sets in series.items():
            assert all(labels.get("camera") == camera for labels in label_sets), (name, label_sets)
        assert all('camera="%s"' % camera in line for line in text.decode().splitlines()
                   if line and not line.startswith("#"))
        assert m.registry.get_sample_value("cnnvideo_processed_fps", {"camera": camera}) == pytest.approx(10.0)
        assert m.registry.get_sample_value("cnnvideo_processed_fps") is None  # no series without the camera
    assert door.registry.get_sample_value("cnnvideo_frames_captured_total", {"camera": "door"}) == 10
    assert yard.registry.get_sample_value("cnnvideo_frames_captured_total", {"camera": "yard"}) == 15
    assert door.registry.get_sample_value("cnnvideo_hop_bytes_total", {"camera": "door", "hop": "w1->w2"}) == 500


def test_camera_is_required_and_not_a_label_of_its_own():
    """An empty camera is refused; a metric declaring a `camera` label itself is refused when collected."""
    with pytest.raises(ValueError):
        Metrics("")
    from prometheus_client import Counter

    m = Metrics("door")
    Counter("clash", "a metric with its own camera", ["camera"], registry=m._unlabelled).labels(camera="x").inc()
    with pytest.raises(ValueError, match="clash"):
        m.render()


def test_rate_window_forgets_old_samples():
    """The rate covers only the last window_s seconds."""
    w = RateWindow(window_s=2.0)
    w.add(0.0, 1000)
    w.add(1.0, 1000)
    assert w.add(10.0, 10) == 0.0  # alone in its window
    assert w.add(11.0, 10) == pytest.approx(10.0)
