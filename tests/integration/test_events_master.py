"""The master's events, metrics and live-view auth in real `cnnvideo local` runs (issue 23): alexnet with random
weights on tiny frames of a clip whose scenes (black, white, stripes) give different top-1 labels, played as a
camera; a real mosquitto, a real Prometheus and a real headless chromium, on 127.0.0.1 (the live view bound to
0.0.0.0 is reached at a non-loopback address of this host when it has one). Every wait is bounded."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from cnnvideo.rpc.net import free_port

from .helpers import LocalRun, base_config, cnnvideo, write_config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import browser  # noqa: E402

MOSQUITTO = "/usr/sbin/mosquitto"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
TOKEN = "test-token-0123456789abcdef"
SCENE_FRAMES = 6  # frames per scene: at 8 fps a label holds ~0.75 s


STARTUP_S = 600.0  # the launcher's own bound on its roles' start (tools/launcher.py STARTUP_TIMEOUT_S)


def wait_for(cond, timeout, what, run=None):
    """Poll `cond` every 50 ms until true; fail naming `what` (with the run's last log lines) after `timeout` s.
    With a `run`, the `timeout` s count from its first frame sent: how long its roles take to start depends on the
    host's load (a CI run beside the docker tier took 55 s to its first frame, and timed out 30 s later), and the
    launcher bounds that itself."""
    if run is not None and run.sent < 1:
        start = time.monotonic() + STARTUP_S
        while run.sent < 1 and run.proc.poll() is None and time.monotonic() < start:
            time.sleep(0.05)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if run is not None and run.proc.poll() is not None:
            raise AssertionError("the run ended while waiting for %s:\n%s" % (what, "".join(run.lines[-30:])))
        time.sleep(0.05)
    tail = "".join(run.lines[-30:]) if run is not None else ""
    raise AssertionError("timed out after %.0f s waiting for %s\n%s" % (timeout, what, tail))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def scenes_video(tmp_path_factory):
    """36 frames at 96x128: black, white and stripes, SCENE_FRAMES each, twice (random-weight alexnet at seed 0
    names them Samoyed, magpie and pretzel)."""
    from cnnvideo.video.frames import write_video

    stripes = np.repeat(((np.indices((96, 128))[1] % 16) < 8)[:, :, None], 3, 2).astype(np.uint8) * 255
    scenes = [np.zeros((96, 128, 3), np.uint8), np.full((96, 128, 3), 255, np.uint8), stripes]
    frames = [scenes[(i // SCENE_FRAMES) % 3] for i in range(6 * SCENE_FRAMES)]
    return write_video(str(tmp_path_factory.mktemp("scenes") / "scenes.avi"), iter(frames))


def events_config(video, cache, **over):
    """A camera-like run until a signal: 8 fps realtime, 2 workers, no exactness check (CPU for the tests)."""
    data = base_config(video, cache, frames=0, in_flight=2, check=False, trainer={"frames": 8, "video": video},
                       source={"realtime": True, "fps": 8.0}, limits={"worker_down_s": 30.0})
    data.update(over)
    return data


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kw):
        return None


OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)  # direct; redirects answered


def get(url, token=None, timeout=5.0):
    """(status, headers, body) of a GET to `url` (a server of this host), with the bearer token when given."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", "Bearer %s" % token)
    try:
        with OPENER.open(req, timeout=timeout) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def stop(run, timeout=60):
    return run.stop(timeout)


@pytest.mark.skipif(not os.path.exists(MOSQUITTO), reason="mosquitto not installed (Debian package)")
def test_label_change_events_over_mqtt_and_the_last_will(tmp_path, scenes_video, cache_dir):
    """During a run a real mosquitto gets `new` / `end` events of the changing top-1 label with stable ids (each
    `end` closes the `new` of the same id and label, ids count up from 1, a label change is an `end` then a
    `new` of another label), the live count per label is retained, availability is `online`; SIGKILL on the
    master makes the broker publish its last will, `offline`."""
    pytest.importorskip("paho.mqtt.client")
    from .test_events_mqtt import Broker, Subscriber

    os.makedirs(str(tmp_path / "broker"))
    broker = Broker(tmp_path / "broker").start()
    sub = Subscriber(broker.port, "t/cnn/#")
    run = None
    try:
        data = events_config(scenes_video, cache_dir, events={
            "enabled": True, "camera": "door", "label_change": {"update_interval_s": 0.5},
            "mqtt": {"host": "127.0.0.1", "port": broker.port, "topic_prefix": "t/cnn", "reconnect_min_s": 1,
                     "reconnect_max_s": 1}},
            reliability={"restart": False})  # `cnnvideo local` would restart the killed master (`online` again)
        run = LocalRun(write_config(str(tmp_path / "mqtt.yml"), data), str(tmp_path / "out"))

        def events():
            return sub.events("t/cnn/door/events")

        wait_for(lambda: sum(e["type"] == "end" for e in events()) >= 2, 85, "two `end` events", run)
        assert sub.on("t/cnn/available")[0] == ("online", False)
        run.wait_for(lambda: "master" in run.pids, 5)
        os.kill(run.pids["master"], signal.SIGKILL)
        wait_for(lambda: ("offline", False) in sub.on("t/cnn/available"), 10, "the last will `offline`")
        evs = [e for e in events() if e["type"] in ("new", "end")]
        assert evs[0]["type"] == "new" and evs[0]["track_id"] == 1 and evs[0]["camera"] == "door"
        opened = {}
        for i, e in enumerate(evs):
            if e["type"] == "new":
                assert e["track_id"] == len(opened) + 1 and not any(v is not None for v in opened.values())
                opened[e["track_id"]] = e["label"]
            else:
                assert opened.get(e["track_id"]) == e["label"], (e, opened)
                opened[e["track_id"]] = None
                nxt = evs[i + 1] if i + 1 < len(evs) else None
                if nxt is not None:  # the label changed: the next track starts on the same frame
                    assert nxt["type"] == "new" and nxt["label"] != e["label"] and nxt["frame"] == e["frame"]
        # a late subscriber gets the retained state: counts per label and `offline`
        late = Subscriber(broker.port, "t/cnn/#")
        try:
            def retained_counts():
                return {t: p for t, p, r in list(late.messages) if t.endswith("/count") and r}

            # the broker sends the retained topics one by one: `available` may come before the counts
            wait_for(lambda: late.on("t/cnn/available") == [("offline", True)] and retained_counts(), 5,
                     "retained `offline` and counts")
            counts = retained_counts()
            labels = {e["label"] for e in evs}
            assert counts and set(counts) <= {"t/cnn/door/%s/count" % re.sub(r"[^A-Za-z0-9_.-]", "_", lb)
                                              for lb in labels}, (counts, labels)
            assert sorted(counts.values()).count("1") <= 1 and set(counts.values()) <= {"0", "1"}
        finally:
            late.close()
        print("mqtt: %d events (%s), labels %s" % (len(events()), ",".join(sorted({e["type"] for e in events()})),
                                                   sorted({e["label"] for e in evs})))
    finally:
        sub.close()
        if run is not None:
            code, _, log = stop(run)
            assert code != 0  # the master was killed: the run fails, as it should
        broker.stop()


@pytest.mark.skipif(not os.path.exists(PROMETHEUS), reason="prometheus not installed (Debian package)")
def test_prometheus_scrapes_the_master_with_the_bearer_token(tmp_path, scenes_video, cache_dir):
    """A real Prometheus scrapes the master's /metrics every second with the bearer token (the live view has a
    token and /metrics is not open: a scrape without it gets 401); its HTTP API then answers a query for the
    processed fps with a value > 0 and for the hop bytes; `promtool check metrics` finds nothing wrong in the
    text; the report's `events` block has tracks, events by type and snapshots."""
    port, prom_port = free_port(), free_port()
    data = events_config(scenes_video, cache_dir, live_view={"port": port, "token": TOKEN},
                         events={"enabled": True})
    run = LocalRun(write_config(str(tmp_path / "prom.yml"), data), str(tmp_path / "out"))
    conf = tmp_path / "prometheus.yml"
    conf.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: cnnvideo\n"
        "    scrape_interval: 1s\n"
        "    scrape_timeout: 1s\n"
        "    authorization: {type: Bearer, credentials: %s}\n"
        "    static_configs: [{targets: ['127.0.0.1:%d']}]\n" % (TOKEN, port))
    prom = subprocess.Popen([PROMETHEUS, "--config.file=%s" % conf, "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=open(str(tmp_path / "prometheus.log"), "w"))
    api = "http://127.0.0.1:%d/api/v1/query?query=" % prom_port

    def query(expr):
        status, _, body = get(api + urllib.parse.quote(expr))
        result = json.loads(body)["data"]["result"] if status == 200 else []
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}

    try:
        wait_for(lambda: get("http://127.0.0.1:%d/metrics" % port, TOKEN)[0] == 200 if _listening(port) else False,
                 85, "the master's /metrics", run)
        fps = {}

        def scraped():
            fps.update(query('cnnvideo_processed_fps{job="cnnvideo"} > 0'))
            return bool(fps)

        wait_for(scraped, 40, "Prometheus to scrape a processed fps > 0", run)
        hops = query("cnnvideo_hop_bytes_total")
        names = {dict(k)["hop"] for k in hops}  # the plan decides which worker sends the result
        assert "m->w0" in names and names & {"w0->m", "w1->m"} and min(hops.values()) > 0, hops
        assert query("up") and list(query("up").values()) == [1.0]
        status, headers, text = get("http://127.0.0.1:%d/metrics" % port, TOKEN)
        from cnnvideo.events.metrics import content_type

        assert status == 200 and headers["Content-Type"] == content_type()  # prometheus_client's own
        assert get("http://127.0.0.1:%d/metrics" % port)[0] == 401
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=30)
        assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check
        body = text.decode()
        for name in ("cnnvideo_frames_captured_total", "cnnvideo_frames_processed_total",
                     "cnnvideo_capture_to_result_seconds_bucket", "cnnvideo_stage_compute_seconds_total",
                     "cnnvideo_detections_total", "cnnvideo_events_total"):
            assert re.search(r"^%s(\{[^}]*\})? [0-9.e+]+$" % name, body, re.M), name
        compute = re.findall(r'^cnnvideo_stage_compute_seconds_total\{camera="cam",engine="([^"]+)",worker="(w\d)"\} '
                             r'([0-9.e+-]+)$', body, re.M)
        assert "w0" in {w for _, w, v in compute if float(v) > 0}, compute
        assert all(e.startswith("torch") for e, _, _ in compute), compute
        print("prometheus: processed fps %s" % list(fps.values()))
    finally:
        prom.terminate()
        try:
            prom.wait(15)
        except subprocess.TimeoutExpired:
            prom.kill()
        code, report, log = stop(run)
    assert code == 0, log[-3000:]
    ev = report["events"]
    assert ev["kind"] == "classifier" and ev["tracks"] >= 1 and ev["mqtt"] is None
    assert ev["by_type"]["new"] == ev["tracks"] == ev["by_type"]["end"] == ev["snapshots_written"]
    assert len(os.listdir(ev["snapshots_dir"])) == ev["snapshots_written"]


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def test_view_on_another_address_without_a_token_refuses_to_start(tmp_path, scenes_video, cache_dir):
    """live_view.host 0.0.0.0 with no token (config or CNNVIDEO_VIEW_TOKEN): `cnnvideo local` and `cnnvideo
    master` stop with one error line naming live_view.token and a non-zero exit before anything starts
    (no role is spawned, no port is bound, no output is written)."""
    port = free_port()
    data = events_config(scenes_video, cache_dir, live_view={"port": port, "host": "0.0.0.0"})
    path = write_config(str(tmp_path / "open.yml"), data)
    os.environ.pop("CNNVIDEO_VIEW_TOKEN", None)
    for args in (["local", "-c", path, "--out", str(tmp_path / "out")],
                 ["master", "-c", path, "--out", str(tmp_path / "out")]):
        t0 = time.monotonic()
        proc = cnnvideo(args, timeout=60)
        errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
        assert proc.returncode != 0 and len(errors) == 1 and "live_view.token" in errors[0], proc.stderr[-2000:]
        assert "[local] started" not in proc.stderr and not os.path.exists(str(tmp_path / "out" / "report.json"))
        assert not _listening(port)
        print("%s refused in %.1f s: %s" % (args[0], time.monotonic() - t0, errors[0]))


def host_address() -> str:
    """A non-loopback IPv4 address of this host (the first of `hostname -I`) that a server bound to 0.0.0.0
    answers on, else 127.0.0.1."""
    import ipaddress

    try:
        found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except (OSError, subprocess.SubprocessError):
        found = []
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))
        server.listen(1)
        for addr in found:
            try:
                ip = ipaddress.ip_address(addr)
            except ValueError:
                continue
            if ip.version != 4 or ip.is_loopback or ip.is_link_local:
                continue
            try:
                socket.create_connection((addr, server.getsockname()[1]), timeout=2).close()
                return addr
            except OSError:
                continue
    return "127.0.0.1"


def test_live_page_logs_in_through_the_form_in_chromium(tmp_path, scenes_video, cache_dir):
    """The live view bound to 0.0.0.0 with a token, reached at a non-loopback address of this host (127.0.0.1
    only when there is none): scripts get 200 with the bearer header, 401 without it or with a wrong one, and
    429 from an address after 5 wrong tokens (the browser's address is another one and unaffected); a snapshot
    id that is not an integer is 404. Headless chromium opens the page and gets the login form and no data (its
    own fetch of the JSON and the frame: 401); a wrong token typed into the form is refused; the right one opens
    the page with an HttpOnly, SameSite=Strict session cookie that is not the token, and no header set by hand:
    the page shows the processed frames and fps, the latest frame (128x96), the recent events with the ended
    labels' snapshot thumbnails (128x96) loaded; logout ends the session (the JSON is 401 again)."""
    port = free_port()
    addr = host_address()
    print("chromium reaches the live view (bound to 0.0.0.0) at %s" % addr)
    data = events_config(scenes_video, cache_dir, live_view={"port": port, "host": "0.0.0.0", "token": TOKEN},
                         events={"enabled": True})
    run = LocalRun(write_config(str(tmp_path / "page.yml"), data), str(tmp_path / "out"))
    base, loop = "http://%s:%d" % (addr, port), "http://127.0.0.1:%d" % port
    t0 = time.monotonic()
    try:
        snaps = str(tmp_path / "out" / "snapshots")
        wait_for(lambda: os.path.isdir(snaps) and len([f for f in os.listdir(snaps) if f.endswith(".jpg")
                                                       and not f.endswith(".tmp.jpg")]) >= 1,
                 85, "a snapshot", run)
        t_snap = time.monotonic() - t0
        status, _, body = get(base + "/api/events", TOKEN)
        assert status == 200
        api = json.loads(body)
        ended = [e for e in api["events"] if e["type"] == "end" and e["snapshot"]]
        assert ended and ended[0]["snapshot"] == "api/events/%d/snapshot.jpg" % ended[0]["track_id"]
        shot = "/" + ended[0]["snapshot"]
        assert get(base + shot, TOKEN)[2][:2] == b"\xff\xd8" and get(base + "/", TOKEN)[0] == 200
        for path in ("/api/events", shot, "/metrics", "/state.json", "/frame.jpg"):
            assert get(base + path)[0] == 401, path
        status, headers, _ = get(base + "/")
        assert status == 303 and headers["Location"] == "login" and "Set-Cookie" not in headers
        for bad in ("/api/events/1x/snapshot.jpg", "/api/events/../../report.json", "/api/events/-1/snapshot.jpg",
                    "/api/events/%2e%2e/snapshot.jpg", "/api/events/99999/snapshot.jpg"):
            assert get(base + bad, TOKEN)[0] == 404, bad
        if addr != "127.0.0.1":  # wrong tokens from 127.0.0.1 until it gets 429, the right one included
            for path in ("/api/events", shot, "/metrics", "/state.json", "/"):
                assert get(loop + path, "wrong-token-0123456789")[0] == 401, path
            assert get(loop + "/state.json", "wrong-token-0123456789")[0] == 429
            assert get(loop + "/state.json", TOKEN)[0] == 429
        with browser.Chromium() as chromium:
            page = chromium.page()
            assert page.navigate(base + "/") == base + "/login"
            login = page.dom()
            assert 'name="token"' in login and "processed" not in login and "state.json" not in login, login
            assert page.evaluate("Promise.all(['state.json', 'api/events', 'frame.jpg', '%s'.slice(1)].map("
                                 "u => fetch(u).then(r => r.status)))" % shot, await_promise=True) == [401] * 4
            assert page.log_in("wrong-token-0123456789") == base + "/login"
            assert page.evaluate("document.getElementById('login-error').textContent") == "Wrong token."
            assert page.log_in(TOKEN) == base + "/"
            page.wait_for("document.getElementById('frame').getAttribute('data-size') && "
                          "Number(document.body.getAttribute('data-updated')) >= 1 && "
                          "[...document.querySelectorAll('img.ev-thumb')].some(i => i.getAttribute('data-size'))", 30)
            dom = page.dom()
            cookies = page.cookies(base + "/")
            js_cookies = page.evaluate("document.cookie")
            assert page.click("#logout button") == base + "/login"
            after = page.evaluate("fetch('state.json').then(r => r.status)", await_promise=True)
    finally:
        code, report, log = stop(run)
    assert code == 0, log[-3000:]
    assert [(c["name"], c["httpOnly"], c["sameSite"], c["path"]) for c in cookies] == \
        [("cnnvideo_session", True, "Strict", "/")], cookies
    assert cookies[0]["value"] != TOKEN and cookies[0]["expires"] > time.time() + 3600 and js_cookies == ""
    assert after == 401
    processed = int(re.search(r'id="processed"[^>]*>(\d+)<', dom).group(1))
    assert processed >= 1 and re.search(r'id="fps"[^>]*>\d+\.\d\d<', dom), dom[:3000]
    assert re.search(r'<img id="frame"[^>]*data-size="128x96"', dom), dom[:3000]
    items = re.findall(r'<li class="event" data-type="(\w+)"', dom)
    assert items and set(items) <= {"new", "update", "end"} and "end" in items, dom[-3000:]
    thumbs = re.findall(r'<img class="ev-thumb"[^>]*>', dom)
    assert thumbs and any('data-size="128x96"' in t for t in thumbs), thumbs
    assert re.search(r'<span class="ev-text">[^<]* end #\d+ [^<]+ \(0\.\d\d\) frame \d+</span>', dom)
    assert report["events"]["snapshots_written"] >= 1 and report["live_view_port"] == port
    print("first snapshot after %.1f s, the browser part done %.1f s after the start" % (t_snap, time.monotonic() - t0))


def test_report_block_counts_what_the_broker_acknowledged(tmp_path):
    """MasterEvents (the master's part, on a stand-in role) with a real mosquitto: close() flushes the queue,
    and report.json's `events.mqtt` says every event was acknowledged, none queued or dropped, and that the
    publisher was connected when the run ended; the subscriber got the same events."""
    pytest.importorskip("paho.mqtt.client")
    import threading
    import types

    from cnnvideo import config
    from cnnvideo.master.events import MasterEvents

    from .test_events_mqtt import Broker, Subscriber

    os.makedirs(str(tmp_path / "broker"))
    broker = Broker(tmp_path / "broker").start()
    sub = Subscriber(broker.port, "r/#")
    try:
        cfg = config.from_dict({"frame_size": [96, 128], "events": {
            "enabled": True, "label_change": {"update_interval_s": 100},
            "mqtt": {"host": "127.0.0.1", "port": broker.port, "topic_prefix": "r"}}}, check_files=False)
        m = types.SimpleNamespace(cfg=cfg, out=str(tmp_path / "out"), cond=threading.Condition(),
                                  tracker=types.SimpleNamespace(records={}, dropped=0), feed=None)
        ev = MasterEvents(m)
        ev.start()
        wait_for(lambda: ev.pipeline.publisher.stats().connected, 10, "the publisher to connect")
        img = np.zeros((96, 128, 3), np.uint8)
        for f, label in enumerate(["cat", "dog", "dog", "cow"]):
            m.tracker.records[f] = types.SimpleNamespace(top5=[[f, label, 0.5]])
            ev.hook(f, 1700000000.0 + f, None, img)
        block = ev.close()
        assert block["mqtt"] == {"host": "127.0.0.1", "port": broker.port, "published": 6, "queued": 0,
                                 "dropped": 0, "connected": True}, block
        assert block["tracks"] == 3 and block["by_type"] == {"end": 3, "new": 3} and block["snapshots_written"] == 3
        wait_for(lambda: len(sub.events("r/cam/events")) == 6, 5, "six events at the subscriber")
        assert [(e["type"], e["track_id"], e["label"]) for e in sub.events("r/cam/events")] == [
            ("new", 1, "cat"), ("end", 1, "cat"), ("new", 2, "dog"), ("end", 2, "dog"), ("new", 3, "cow"),
            ("end", 3, "cow")]
    finally:
        sub.close()
        broker.stop()
