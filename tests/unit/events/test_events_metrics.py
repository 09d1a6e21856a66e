"""cnnvideo.events.metrics: every metric is on the Metrics object's own registry, `render()` passes
`promtool check metrics`, and the values (fps, latency, hop rate, publisher deltas) are what was observed."""
import os
import subprocess

import pytest

from cnnvideo.events.metrics import Metrics, RateWindow, content_type
from cnnvideo.events.types import Detection, Event

PROMTOOL = "/usr/bin/promtool"


def filled():
    m = Metrics()
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
    v = m.registry.get_sample_value
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
    assert b"cnnvideo_frames_processed_total 10.0" in m.render()
    assert content_type().startswith("text/plain")


def test_each_instance_has_its_own_registry():
    """Two Metrics in one process do not collide (the global registry would refuse duplicate names) and do not
    share values."""
    a, b = Metrics(), Metrics()
    a.frame_captured(4)
    assert a.registry.get_sample_value("cnnvideo_frames_captured_total") == 4
    assert b.registry.get_sample_value("cnnvideo_frames_captured_total") == 0


def test_rate_window_forgets_old_samples():
    """The rate covers only the last window_s seconds."""
    w = RateWindow(window_s=2.0)
    w.add(0.0, 1000)
    w.add(1.0, 1000)
    assert w.add(10.0, 10) == 0.0  # alone in its window
    assert w.add(11.0, 10) == pytest.approx(10.0)
