"""The live view's new routes and its bearer-token auth on a real server (127.0.0.1): /metrics, /api/events,
/api/events/<id>/snapshot.jpg (integer ids only), 401 without the token, the `?token=` cookie, metrics_open,
and the events list in a real headless chromium with model labels shown as text, never as HTML."""
import json
import os
import re
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import browser  # noqa: E402

from cnnvideo.results.liveview import LiveView  # noqa: E402

TOKEN = "unit-token-0123456789abcdef"
JPEG = b"\xff\xd8\xff\xe0fake"


def events(limit):
    evs = [{"type": "end", "track_id": 7, "label": "<img src=x onerror=alert(1)>", "score": 0.5, "frame": 3,
            "capture_time": 1700000000.0, "zone": None, "snapshot": "api/events/7/snapshot.jpg"},
           {"type": "new", "track_id": 8, "label": "cat & dog", "score": 0.25, "frame": 4,
            "capture_time": 1700000001.0, "zone": None, "snapshot": None}]
    return {"events": evs[-limit:] if limit else [], "counts": {"cat & dog": 1}}


def snapshot(track_id):
    assert isinstance(track_id, int)
    return JPEG if track_id == 7 else None


def serve(**kw):
    v = LiveView(0, lambda: {"processed": 1}, metrics=lambda: (b"m_total 1\n", "text/plain; version=0.0.4"),
                 events=events, snapshot=snapshot, **kw)
    v.start()
    return v


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kw):
        return None


@pytest.fixture
def open_view():
    v = serve()
    yield "http://127.0.0.1:%d" % v.port
    v.stop()


def test_routes_without_a_token(open_view):
    """No token: /metrics is the callback's text with its content type, /api/events the JSON with `<`, `>`, `&`
    escaped, limit clamps, a snapshot by integer id or 404 (bad ids never reach the callback)."""
    status, headers, body = get(open_view + "/metrics")
    assert status == 200 and body == b"m_total 1\n" and headers["Content-Type"] == "text/plain; version=0.0.4"
    status, headers, body = get(open_view + "/api/events?limit=1")
    assert status == 200 and headers["X-Content-Type-Options"] == "nosniff"
    assert b"<" not in body and b"&" not in body and json.loads(body)["events"][0]["label"] == "cat & dog"
    assert len(json.loads(get(open_view + "/api/events?limit=abc")[2])["events"]) == 2
    assert get(open_view + "/api/events/7/snapshot.jpg")[2] == JPEG
    for bad in ("/api/events/8/snapshot.jpg", "/api/events/7a/snapshot.jpg", "/api/events/../7/snapshot.jpg",
                "/api/events/%37/snapshot.jpg", "/api/events/7/snapshot.jpg/x", "/api/events/1234567890/snapshot.jpg"):
        assert get(open_view + bad)[0] == 404, bad


def test_token_header_cookie_and_open_metrics():
    """With a token: 401 (with WWW-Authenticate) without it or with a wrong one; 200 with `Authorization: Bearer`;
    `/?token=` answers 303 to `/` with an HttpOnly SameSite=Strict cookie that then works alone; /metrics open
    only with metrics_open."""
    v = serve(token=TOKEN)
    base = "http://127.0.0.1:%d" % v.port
    try:
        for path in ("/", "/state.json", "/metrics", "/api/events", "/api/events/7/snapshot.jpg", "/nope"):
            status, headers, _ = get(base + path)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
            assert get(base + path, {"Authorization": "Bearer " + TOKEN[:-1] + "x"})[0] == 401
        assert get(base + "/api/events", {"Authorization": "Bearer " + TOKEN})[0] == 200
        assert get(base + "/?token=wrong")[0] == 401
        opener = urllib.request.build_opener(NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as e:
            opener.open(base + "/?token=" + TOKEN, timeout=5)
        assert e.value.code == 303 and e.value.headers["Location"] == "/"
        cookie = e.value.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert get(base + "/api/events/7/snapshot.jpg", {"Cookie": cookie.split(";")[0]})[2] == JPEG
        assert v.refused >= 13
    finally:
        v.stop()
    v = serve(token=TOKEN, metrics_open=True)
    try:
        base = "http://127.0.0.1:%d" % v.port
        assert get(base + "/metrics")[0] == 200 and get(base + "/api/events")[0] == 401
    finally:
        v.stop()


def test_chromium_lists_events_as_text_with_thumbnails():
    """Headless chromium opens `/?token=` (cookie, then the page): the events list shows newest first, the
    label `<img src=x onerror=...>` as escaped text (no element made of it), the snapshot thumbnail requested
    with the cookie (it is a fake JPEG here, so it is only checked to be there)."""
    v = serve(token=TOKEN)
    try:
        dom = browser.dump_dom("http://127.0.0.1:%d/?token=%s" % (v.port, TOKEN))
    finally:
        v.stop()
    items = re.findall(r'<li class="event" data-type="(\w+)"', dom)
    assert items == ["new", "end"], dom[-2000:]
    assert "end #7 &lt;img src=x onerror=alert(1)&gt; (0.50) frame 3" in dom
    assert "new #8 cat &amp; dog (0.25)" in dom
    assert len(re.findall(r"<img ", dom)) == 2  # the latest-frame <img> and the one thumbnail
    assert re.search(r'<img class="ev-thumb" alt="snapshot" width="96" src="api/events/7/snapshot.jpg"', dom)
