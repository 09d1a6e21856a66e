"""Live view: the page, its JSON and the latest frame are served, and a real headless chromium shows what the
state says (fps, latency, skipped share, hops, plan, a Gantt chart with one rect per recent span, the frame)."""
import json
import os
import re
import sys
import urllib.request

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import browser  # noqa: E402

from cnnvideo.results.liveview import LiveView  # noqa: E402


def state():
    return {"mode": "live", "processed": 42, "fps": 7.25, "latency_s": {"p50": 0.31, "p95": 0.52, "max": 0.9},
            "captured": 100, "skipped": 58, "skipped_share": 0.58, "plan": [0, 4, 9], "plan_layers": "3 | 5",
            "checked": 10, "max_abs_err": 0.0, "window_s": 10,
            "hops": [{"name": "m->w0", "bytes_sent": 12345, "MBps": 2.95, "messages": 42},
                     {"name": "w0->w1", "bytes_sent": 999, "MBps": 3.01, "messages": 42}],
            "latest": {"frame": 41, "result": "class 7 (0.93)"}, "now_s": 20.0, "actors": ["m", "w0", "w1"],
            "spans": [[40, "m", "send", 15.0, 15.2, 10], [40, "w0", "compute", 15.2, 16.0, 0],
                      [41, "w1", "compute", 16.0, 17.0, 0]]}


@pytest.fixture
def view():
    v = LiveView(0, state)
    v.start()
    yield v
    v.stop()


def test_endpoints(view):
    """/state.json is the callback's state; /frame.jpg 404s before a frame, then is a JPEG of it."""
    base = "http://127.0.0.1:%d" % view.port
    assert json.loads(urllib.request.urlopen(base + "/state.json").read())["processed"] == 42
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(base + "/frame.jpg")
    view.set_frame(np.zeros((30, 40, 3), np.uint8))
    assert urllib.request.urlopen(base + "/frame.jpg").read()[:2] == b"\xff\xd8"
    assert b"<svg" in urllib.request.urlopen(base + "/").read()


def test_chromium_shows_the_state(view):
    """Headless chromium renders the figures, the hop table, three Gantt rects and the 40x30 frame."""
    view.set_frame(np.full((30, 40, 3), 128, np.uint8))
    dom = browser.dump_dom("http://127.0.0.1:%d/" % view.port)
    for ident, text in [("fps", "7.25"), ("lat_p95", "0.52"), ("skipped_share", "58.0%"), ("plan", "0, 4, 9"),
                        ("processed", "42"), ("result", "class 7 (0.93)"), ("mode", "(live)")]:
        assert re.search(r'id="%s"[^>]*>%s<' % (ident, re.escape(text)), dom), (ident, dom[:3000])
    assert re.findall(r'<tr class="hop"><td>([^<$]+)</td>', dom) == ["m-&gt;w0", "w0-&gt;w1"]
    assert len(re.findall(r'<rect class="span" x="\d', dom)) == 3
    assert 'data-size="40x30"' in dom
