"""The live view's routes and its auth on a real server (127.0.0.1): /metrics, /api/events,
/api/events/<id>/snapshot.jpg (integer ids only); the auth logic (cnnvideo.results.liveauth: the session cookie's
attributes, expiry, the wrong-token limit, nothing secret in the logs) on its own and through the server (bearer
header, login form, session cookie, logout, 401 / 429, metrics_open); and the events list in a real headless
chromium logged in through the form, with model labels shown as text, never as HTML."""
import json
import logging
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import browser  # noqa: E402

from cnnvideo.results import liveauth  # noqa: E402
from cnnvideo.results.liveauth import LIMITED, OK, WRONG, ViewAuth  # noqa: E402
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


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kw):
        return None


OPENER = urllib.request.build_opener(NoRedirect)  # redirects are answers to check, not to follow


def get(url, headers=None, form=None):
    """(status, headers, body) of a GET, or of a POST of the form (a mapping) when given; redirects not followed."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with OPENER.open(req, timeout=5) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def attributes(set_cookie):
    """A Set-Cookie value as (name, value, {attribute lowercased: value or True})."""
    first, *rest = [p.strip() for p in set_cookie.split(";")]
    name, _, value = first.partition("=")
    attrs = {}
    for p in rest:
        k, sep, v = p.partition("=")
        attrs[k.lower()] = v if sep else True
    return name, value, attrs


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


    assert get(open_view + "/login")[0] == 303 and b'id="logout"' not in get(open_view + "/")[2]


# --- the auth logic on its own


def test_session_cookie_attributes():
    """The cookie is HttpOnly, SameSite=Strict, Path=/, with Max-Age the session lifetime (Secure only over TLS);
    its value is a fresh random id (43 URL-safe characters, 256 bits), never the token; logout's clears it."""
    auth = ViewAuth(TOKEN, ttl_s=3600)
    sid = auth.new_session()
    name, value, attrs = attributes(auth.set_cookie(sid))
    assert name == liveauth.SESSION_COOKIE and value == sid and re.fullmatch(r"[A-Za-z0-9_-]{43}", sid)
    assert attrs == {"max-age": "3600", "path": "/", "httponly": True, "samesite": "Strict"}
    assert attributes(auth.set_cookie(sid, secure=True))[2]["secure"] is True
    assert TOKEN not in auth.set_cookie(sid) and auth.new_session() != sid
    name, value, attrs = attributes(ViewAuth.clear_cookie())
    assert (name, value, attrs["max-age"], attrs["path"]) == (liveauth.SESSION_COOKIE, "", "0", "/")


def test_sessions_expire_and_only_digests_are_kept():
    """A session lives ttl_s on the server's clock, then is refused and forgotten; logout ends it at once; the
    server keeps a digest of each id, not the id; past max_sessions the one nearest its end goes."""
    clock = Clock()
    auth = ViewAuth(TOKEN, ttl_s=100, max_sessions=3, clock=clock)
    a = auth.new_session()
    assert auth.session_ok(a) and a not in auth.sessions and TOKEN not in repr(auth.sessions)
    clock.t += 99.9
    assert auth.session_ok(a)
    clock.t += 0.1
    assert not auth.session_ok(a) and auth.sessions == {}
    b, c = auth.new_session(), auth.new_session()
    auth.end_session(b)
    assert not auth.session_ok(b) and auth.session_ok(c)
    for bad in ("", "x", c + "x", TOKEN):
        assert not auth.session_ok(bad)
    clock.t += 1
    d, e, f = auth.new_session(), auth.new_session(), auth.new_session()
    assert len(auth.sessions) == 3 and not auth.session_ok(c) and all(auth.session_ok(s) for s in (d, e, f))
    assert liveauth.cookie_value('a="b; c"; %s=%s; x' % (liveauth.SESSION_COOKIE, d)) == d
    assert liveauth.cookie_value("other=1") == ""


def test_wrong_tokens_are_limited_per_address():
    """fail_limit wrong tokens from one address in fail_window_s, then LIMITED for any token (the right one too,
    so the answer tells nothing) until the oldest failure leaves the window; another address is not affected."""
    clock = Clock()
    auth = ViewAuth(TOKEN, fail_limit=3, fail_window_s=60, clock=clock)
    assert auth.attempt("10.0.0.1", TOKEN, "bearer header") == OK
    for i in range(3):
        assert auth.attempt("10.0.0.1", "wrong-%d" % i, "login form") == WRONG
        clock.t += 10
    assert auth.attempt("10.0.0.1", TOKEN, "login form") == LIMITED
    assert auth.attempt("10.0.0.1", "", "login form") == LIMITED and auth.limited == 2 and auth.wrong == 3
    assert auth.retry_after("10.0.0.1") == 30
    assert auth.attempt("10.0.0.2", TOKEN, "login form") == OK and auth.retry_after("10.0.0.2") == 0
    clock.t += 30  # the first failure leaves the window: one more try
    assert auth.retry_after("10.0.0.1") == 0
    assert auth.attempt("10.0.0.1", TOKEN[:-1], "login form") == WRONG
    assert auth.attempt("10.0.0.1", TOKEN, "login form") == LIMITED
    clock.t += 60
    assert auth.attempt("10.0.0.1", TOKEN, "login form") == OK and auth.failures == {}
    assert auth.token_ok(TOKEN) and not auth.token_ok("") and not auth.token_ok(TOKEN + "x")
    assert not auth.token_ok("\udcff" + TOKEN[1:])  # not encodable: refused, no exception


# --- through a real server


def test_bearer_header_for_scripts_and_401_for_everything_else():
    """With a token: the page redirects to the login form (no data); JSON, images and /metrics are 401 with
    WWW-Authenticate without a credential, with a wrong bearer token, HTTP basic auth or `?token=`; 200 with
    `Authorization: Bearer`; /metrics open only with metrics_open."""
    v = serve(token=TOKEN, auth=ViewAuth(TOKEN, fail_limit=1000))
    base = "http://127.0.0.1:%d" % v.port
    basic = "Basic " + __import__("base64").b64encode(("user:" + TOKEN).encode()).decode()
    try:
        for path in ("/", "/index.html", "/?token=" + TOKEN):
            status, headers, body = get(base + path)
            assert status == 303 and headers["Location"] == "login" and body == b"", path
            assert "Set-Cookie" not in headers
        status, headers, body = get(base + "/login")
        assert status == 200 and b'<form method="post" action="login"' in body and b'name="token"' in body
        assert b"state.json" not in body and b"processed" not in body and headers["X-Frame-Options"] == "DENY"
        for path in ("/state.json", "/frame.jpg", "/metrics", "/api/events", "/api/events/7/snapshot.jpg", "/nope"):
            status, headers, _ = get(base + path)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer"), path
            for bad in ({"Authorization": "Bearer " + TOKEN[:-1] + "x"}, {"Authorization": basic},
                        {"Cookie": "cnnvideo_view_token=" + TOKEN}, {"Cookie": "cnnvideo_session=" + TOKEN}):
                assert get(base + path, bad)[0] == 401, (path, bad)
            assert get(base + path + "?token=" + TOKEN)[0] == 401
        assert get(base + "/", {"Authorization": "Bearer " + TOKEN})[0] == 200
        assert get(base + "/api/events", {"Authorization": "Bearer " + TOKEN})[0] == 200
        assert get(base + "/metrics", {"Authorization": "bearer  " + TOKEN})[2] == b"m_total 1\n"
        assert v.refused >= 6 * 6
    finally:
        v.stop()
    v = serve(token=TOKEN, metrics_open=True)
    try:
        base = "http://127.0.0.1:%d" % v.port
        assert get(base + "/metrics")[0] == 200 and get(base + "/api/events")[0] == 401
    finally:
        v.stop()


def test_login_form_session_cookie_expiry_and_logout():
    """POST /login with the wrong token: 401 and the form again (no cookie); with the right one: 303 to the page
    with the session cookie, which alone then opens the page (with a logout button), its JSON and a snapshot;
    the cookie is Secure behind a proxy that says https; the session ends server-side after its ttl (page back
    to the login form, JSON 401) and at logout."""
    clock = Clock()
    v = serve(token=TOKEN, auth=ViewAuth(TOKEN, ttl_s=600, clock=clock))
    base = "http://127.0.0.1:%d" % v.port
    try:
        status, headers, body = get(base + "/login", form={"token": "wrong-token-0123456789"})
        assert status == 401 and "Set-Cookie" not in headers and b"Wrong token." in body and b'name="token"' in body
        status, headers, body = get(base + "/login", form={"token": TOKEN})
        assert status == 303 and headers["Location"] == "./" and body == b""
        name, sid, attrs = attributes(headers["Set-Cookie"])
        assert name == "cnnvideo_session" and sid != TOKEN and TOKEN not in headers["Set-Cookie"]
        assert attrs == {"max-age": "600", "path": "/", "httponly": True, "samesite": "Strict"}
        cookie = {"Cookie": "theme=dark; cnnvideo_session=" + sid}
        status, _, body = get(base + "/", cookie)
        assert status == 200 and b'id="logout"' in body and b"state.json" in body
        assert json.loads(get(base + "/state.json", cookie)[2]) == {"processed": 1}
        assert get(base + "/api/events", cookie)[0] == 200
        assert get(base + "/api/events/7/snapshot.jpg", cookie)[2] == JPEG
        assert get(base + "/login", cookie)[0] == 303  # logged in already: back to the page
        proxied = get(base + "/login", {"X-Forwarded-Proto": "https"}, form={"token": TOKEN})[1]["Set-Cookie"]
        assert attributes(proxied)[2]["secure"] is True
        clock.t += 600
        assert get(base + "/state.json", cookie)[0] == 401 and get(base + "/", cookie)[1]["Location"] == "login"
        sid2 = attributes(get(base + "/login", form={"token": TOKEN})[1]["Set-Cookie"])[1]
        cookie2 = {"Cookie": "cnnvideo_session=" + sid2}
        assert get(base + "/state.json", cookie2)[0] == 200
        status, headers, _ = get(base + "/logout", cookie2, form={})
        assert status == 303 and headers["Location"] == "login"
        assert attributes(headers["Set-Cookie"])[2]["max-age"] == "0"
        assert get(base + "/state.json", cookie2)[0] == 401  # gone on the server, whatever the browser keeps
        assert get(base + "/login", form={"token": "x" * 5000})[0] == 413
    finally:
        v.stop()


def test_wrong_tokens_get_429_and_are_logged_without_the_token(caplog):
    """Three wrong tokens from 127.0.0.1 (form, bearer header), then 429 with Retry-After for the form and the
    header, the right token included; a session opened before still works. Each wrong try is logged with the
    address and how it came; no log record at any level holds a token, right or wrong, or a session id."""
    caplog.set_level(logging.DEBUG)
    wrongs = ["wrong-token-aaaaaaaaaaaa", "wrong-token-bbbbbbbbbbbb", "wrong-token-cccccccccccc"]
    v = serve(token=TOKEN, auth=ViewAuth(TOKEN, fail_limit=3, fail_window_s=60))
    base = "http://127.0.0.1:%d" % v.port
    try:
        sid = attributes(get(base + "/login", form={"token": TOKEN})[1]["Set-Cookie"])[1]
        assert get(base + "/login", form={"token": wrongs[0]})[0] == 401
        assert get(base + "/state.json", {"Authorization": "Bearer " + wrongs[1]})[0] == 401
        assert get(base + "/login", form={"token": wrongs[2]})[0] == 401
        status, headers, body = get(base + "/login", form={"token": TOKEN})
        assert status == 429 and 50 <= int(headers["Retry-After"]) <= 60 and b"Too many wrong tokens" in body
        assert "Set-Cookie" not in headers
        status, headers, _ = get(base + "/metrics", {"Authorization": "Bearer " + TOKEN})
        assert status == 429 and int(headers["Retry-After"]) > 0
        assert get(base + "/state.json", {"Cookie": "cnnvideo_session=" + sid})[0] == 200
        assert get(base + "/state.json")[0] == 401  # no credential at all: not a try, plain 401
    finally:
        v.stop()
    text = "\n".join(r.getMessage() for r in caplog.records)
    lines = [r.getMessage() for r in caplog.records if "wrong token" in r.getMessage()]
    assert len(lines) == 3 and all("127.0.0.1" in ln for ln in lines), text
    assert "(login form)" in lines[0] and "(bearer header)" in lines[1] and "429" in lines[2]
    for secret in wrongs + [TOKEN, sid]:
        assert secret not in text, secret


def test_chromium_logs_in_through_the_form_and_lists_events_as_text():
    """Headless chromium opens the page: the login form. It types the token and submits; the page then lists
    the events newest first, the label `<img src=x onerror=...>` as escaped text (no element made of it), the
    snapshot thumbnail requested with the session cookie (a fake JPEG here, so only checked to be there)."""
    v = serve(token=TOKEN)
    base = "http://127.0.0.1:%d/" % v.port
    try:
        with browser.Chromium() as chromium:
            page = chromium.page()
            assert page.navigate(base) == base + "login"
            assert page.log_in(TOKEN) == base
            page.wait_for("document.getElementById('events-card').getAttribute('data-events') === '2'")
            dom = page.dom()
    finally:
        v.stop()
    items = re.findall(r'<li class="event" data-type="(\w+)"', dom)
    assert items == ["new", "end"], dom[-2000:]
    assert "end #7 &lt;img src=x onerror=alert(1)&gt; (0.50) frame 3" in dom
    assert "new #8 cat &amp; dog (0.25)" in dom
    assert len(re.findall(r"<img ", dom)) == 2  # the latest-frame <img> and the one thumbnail
    assert re.search(r'<img class="ev-thumb" alt="snapshot" width="96" src="api/events/7/snapshot.jpg"', dom)
