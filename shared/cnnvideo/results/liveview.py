"""Live view: a small HTTP server (stdlib, one thread) showing a run as it goes; off unless a port is configured.

GET /            the page (inline JS and SVG, no external assets)
GET /state.json  what the page draws: processed fps, latency, skipped share, bytes and rate per hop, current
                 plan, latest result, recent stage spans (a rolling Gantt chart); built by the caller's callback
GET /frame.jpg   the latest completed frame as JPEG (a detector's boxes drawn on it)
GET /metrics     Prometheus text (when the caller passes `metrics`)
GET /api/events  recent events as JSON (when the caller passes `events`); the page lists them
GET /api/events/<id>/snapshot.jpg  the snapshot JPEG of event track <id> (an integer), 404 if none
GET /login, POST /login, POST /logout  the login form, its token (a session cookie back), the session's end

Auth (`token`): without one the server is meant for 127.0.0.1 (config_validation.validate refuses another address
without a token). With one (cnnvideo.results.liveauth): scripts send `Authorization: Bearer <token>`; a browser opening
the page is sent to GET /login, a form that POSTs the token once to /login and gets a session cookie (a random id
kept server-side with an expiry; HttpOnly, SameSite=Strict, Path=/, Max-Age; Secure over TLS or behind a proxy
sending `X-Forwarded-Proto: https`), which then carries the page, its JSON and images; POST /logout ends it.
Without either the page redirects to the login form and everything else is 401; too many wrong tokens from one
address are 429. `/metrics` stays open with `metrics_open`.

A detector run's state has `latest.detections` ({label: boxes} of the latest frame): the page then shows the
person count and every label's count (as text: labels come from a model file).
"""
from __future__ import annotations

import html
import json
import logging
import re
import ssl
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from cnnvideo.results.detections import draw_boxes
from cnnvideo.results.liveauth import LIMITED, OK, ViewAuth, cookie_value

log = logging.getLogger(__name__)

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cnn-video live</title>
<style>
body{font-family:sans-serif;margin:12px;background:#fafafa;color:#222}
.row{display:flex;gap:16px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px}
td,th{padding:2px 8px;text-align:right} th{background:#eee}
#frame{max-width:480px;border:1px solid #ccc}
.k{color:#666}
</style></head>
<body>
<h2>cnn-video live <span id="mode" class="k"></span></h2>
<div class="row">
 <div class="card"><img id="frame" alt="latest frame"><div>frame <b id="frame_id">-</b>
  result <b id="result">-</b></div>
  <div id="det_row" hidden>people <b id="people">-</b> <span id="det_counts" class="k"></span></div></div>
 <div class="card">
  <div>setup <b id="setup">-</b></div>
  <div>processed <b id="processed">0</b> frames, <b id="fps">-</b> fps</div>
  <div>latency p50 <b id="lat_p50">-</b> s, p95 <b id="lat_p95">-</b> s, max <b id="lat_max">-</b> s</div>
  <div>captured <b id="captured">-</b>, skipped <b id="skipped">-</b> (<b id="skipped_share">-</b>)</div>
  <div>plan (cuts) <b id="plan">-</b></div>
  <div class="k" id="plan_layers"></div>
  <div>checked <b id="checked">-</b>, max abs error <b id="max_err">-</b></div>
  <table><thead><tr><th>hop</th><th>bytes sent</th><th>MB/s</th><th>messages</th></tr></thead>
  <tbody id="hops"></tbody></table>
  <table><thead><tr><th>worker</th><th>address</th><th>device</th><th>stage</th><th>state</th><th>frames</th>
  <th>fps</th><th>joined s</th><th>left s</th></tr></thead><tbody id="members"></tbody></table>
 </div>
</div>
<div class="card"><div class="k">stages, last <span id="window">10</span> s</div>
<svg id="gantt" width="900" height="40" xmlns="http://www.w3.org/2000/svg"></svg></div>
<script>
const COLORS={receive:"#9ecae1",decode:"#fdae6b",compute:"#74c476",encode:"#fd8d3c",send:"#6baed6"};
function set(id,v){document.getElementById(id).textContent=(v===null||v===undefined)?"-":v;}
function gantt(st){
  const svg=document.getElementById("gantt"), actors=st.actors||[], W=900, left=40, win=st.window_s||10;
  const rowH=18, t1=st.now_s, t0=t1-win;
  svg.setAttribute("height", actors.length*rowH+20);
  let h="";
  actors.forEach((a,i)=>{h+=`<text x="2" y="${i*rowH+13}" font-size="11">${a}</text>`;});
  (st.spans||[]).forEach(s=>{
    const i=actors.indexOf(s[1]); if(i<0) return;
    const x=left+(Math.max(s[3],t0)-t0)/win*(W-left), w=Math.max((s[4]-Math.max(s[3],t0))/win*(W-left),0.5);
    h+=`<rect class="span" x="${x.toFixed(1)}" y="${i*rowH+2}" width="${w.toFixed(1)}" height="${rowH-4}" `+
       `fill="${COLORS[s[2]]||"#999"}"><title>frame ${s[0]} ${s[1]} ${s[2]}</title></rect>`;});
  h+=`<text x="${left}" y="${actors.length*rowH+15}" font-size="10">-${win}s</text>`+
     `<text x="${W-30}" y="${actors.length*rowH+15}" font-size="10">now</text>`;
  svg.innerHTML=h;
}
let lastFrame=-1;
async function tick(){
  try{
    const r=await fetch("state.json",{cache:"no-store"});
    if(r.status===401){location.href="login"; return;}  // the session ended
    const st=await r.json();
    set("mode", st.mode ? "("+st.mode+")" : "");
    const su=st.setup||{};
    set("setup", su.current || (typeof su.done_s==="number" ? "done in "+su.done_s.toFixed(1)+" s" : null));
    set("processed", st.processed); set("fps", st.fps===null?null:st.fps.toFixed(2));
    const l=st.latency_s||{}; set("lat_p50",l.p50); set("lat_p95",l.p95); set("lat_max",l.max);
    set("captured", st.captured); set("skipped", st.skipped);
    set("skipped_share", st.skipped_share===null?null:(100*st.skipped_share).toFixed(1)+"%");
    set("plan", (st.plan||[]).join(", ")); set("plan_layers", st.plan_layers||"");
    set("checked", st.checked); set("max_err", st.max_abs_err);
    set("window", st.window_s);
    document.getElementById("hops").innerHTML=(st.hops||[]).map(h=>
      `<tr class="hop"><td>${h.name}</td><td>${h.bytes_sent}</td><td>${h.MBps===null?"-":h.MBps.toFixed(3)}</td>`+
      `<td>${h.messages}</td></tr>`).join("");
    const mb=document.getElementById("members"); mb.textContent="";  // (worker-sent text: never as HTML)
    (st.members||[]).forEach(m=>{const tr=document.createElement("tr"); tr.className="member";
      [m.worker,m.address,m.device,m.stage<0?"-":m.stage,m.state,m.frames,m.fps,m.joined_at_s,m.left_at_s]
        .forEach(v=>{const td=document.createElement("td"); td.textContent=(v===null||v===undefined)?"-":v;
          tr.appendChild(td);});
      mb.appendChild(tr);});
    if(st.latest && st.latest.frame!==lastFrame){
      lastFrame=st.latest.frame; set("frame_id", st.latest.frame); set("result", st.latest.result);
      const det=st.latest.detections;
      document.getElementById("det_row").hidden=!det;
      if(det){
        set("people", det.person||0);
        set("det_counts", "("+(Object.keys(det).map(k=>k+": "+det[k]).join(", ")||"nothing found")+")");
      }
      document.getElementById("frame").src="frame.jpg?f="+lastFrame;
    }
    gantt(st);
    document.body.setAttribute("data-updated", String(st.processed));
  }catch(e){document.body.setAttribute("data-error", String(e));}
}
document.getElementById("frame").addEventListener("load", e=>{
  e.target.setAttribute("data-size", e.target.naturalWidth+"x"+e.target.naturalHeight);});
tick(); setInterval(tick, 500);
</script></body></html>
"""

# The events list, added before </body> (values from models or config are set with textContent, never as HTML)
EVENTS_PANEL = """<div class="card" id="events-card"><div class="k">recent events</div>
<ul id="events" style="list-style:none;padding:0;margin:4px 0"></ul></div>
<script>
let eventsKey="";
function eventItem(e){
  const li=document.createElement("li"); li.className="event"; li.setAttribute("data-type", String(e.type));
  li.style.cssText="display:flex;gap:8px;align-items:center;margin:2px 0";
  if(e.snapshot){
    const img=document.createElement("img"); img.className="ev-thumb"; img.alt="snapshot"; img.width=96;
    img.addEventListener("load", ()=>img.setAttribute("data-size", img.naturalWidth+"x"+img.naturalHeight));
    img.src=String(e.snapshot); li.appendChild(img);
  }
  const t=document.createElement("span"); t.className="ev-text";
  const when=new Date(1000*e.capture_time).toLocaleTimeString();
  t.textContent=when+" "+e.type+" #"+e.track_id+" "+e.label+" ("+Number(e.score).toFixed(2)+")"+
    (e.zone?" zone "+e.zone:"")+" frame "+e.frame;
  li.appendChild(t); return li;
}
async function eventsTick(){
  try{
    const r=await fetch("api/events?limit=20",{cache:"no-store"}); if(!r.ok) return;
    const data=await r.json(), evs=data.events||[];
    const key=evs.length+":"+JSON.stringify(evs[evs.length-1]||null);
    if(key===eventsKey) return; eventsKey=key;
    document.getElementById("events").replaceChildren(...evs.slice().reverse().map(eventItem));
    document.getElementById("events-card").setAttribute("data-events", String(evs.length));
  }catch(e){document.getElementById("events-card").setAttribute("data-error", String(e));}
}
eventsTick(); setInterval(eventsTick, 1000);
</script>
"""
# The page's logout button (with a token), put before its heading
LOGOUT_FORM = """<form method="post" action="logout" id="logout" style="float:right">
<button type="submit">log out</button></form>
"""
# What a browser without a session gets: a form that posts the token once (no data of the run)
LOGIN_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cnn-video live: log in</title>
<style>body{font-family:sans-serif;margin:12px;background:#fafafa;color:#222} .err{color:#b00}</style></head>
<body><h2>cnn-video live</h2>
<form method="post" action="login" id="login">
<label>token <input type="password" name="token" id="token" autocomplete="current-password" required autofocus>
</label> <button type="submit">log in</button></form>
<p class="err" id="login-error">%s</p>
</body></html>
"""
FORM_MAX = 4096  # bytes of a login form body
SNAPSHOT_PATH = re.compile(r"^/api/events/([0-9]{1,9})/snapshot\.jpg$")


def json_bytes(value: Any) -> bytes:
    """JSON with `<`, `>`, `&` escaped, so a label such as `</script>` stays inert even if inlined."""
    text = json.dumps(value, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


class LiveView:
    """Serves the live page; `state()` is called per request and must return a JSON-able mapping."""

    def __init__(self, port: int, state: Callable[[], Dict[str, Any]], host: str = "127.0.0.1",
                 token: Optional[str] = None, metrics: Optional[Callable[[], Tuple[bytes, str]]] = None,
                 metrics_open: bool = False, events: Optional[Callable[[int], Dict[str, Any]]] = None,
                 snapshot: Optional[Callable[[int], Optional[bytes]]] = None,
                 auth: Optional[ViewAuth] = None, page: Optional[str] = None,
                 routes: Optional[Callable[[str], Optional[Tuple[str, bytes]]]] = None) -> None:
        """`metrics()` -> (body, content type) for /metrics; `events(limit)` -> the /api/events JSON;
        `snapshot(track_id)` -> JPEG bytes or None; `token`: what every request needs (a bearer header or a
        session from the login form); `auth`: that ViewAuth made by the caller instead (its own limits);
        `page`: another page's HTML at / (the camera grid's); `routes(path)` -> (content type, body) of another
        GET path, or None for 404 (behind the same auth)."""
        self.state = state
        self.page = page if page is not None else PAGE.replace("</body>", EVENTS_PANEL + "</body>")
        self.routes = routes
        self.auth = auth if auth is not None else (ViewAuth(token) if token else None)
        self.metrics = metrics
        self.metrics_open = metrics_open
        self.events = events
        self.snapshot = snapshot
        self.refused = 0  # requests answered 401 or 429
        self.lock = threading.Lock()
        self.frame: Optional[np.ndarray] = None  # RGB of the latest completed frame
        self.detections: Optional[Sequence[Any]] = None  # its detections (drawn when encoded)
        self.jpeg: Optional[bytes] = None
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                owner.requests += 1
                path, _, query = self.path.partition("?")
                try:
                    if path == "/login":
                        self._login_page()
                        return
                    if not self._authorised(path):
                        return
                    if path in ("/", "/index.html"):
                        page = owner.page
                        if owner.auth is not None:
                            page = page.replace("<h2>", LOGOUT_FORM + "<h2>", 1)
                        self._send(200, "text/html; charset=utf-8", page.encode())
                    elif path == "/metrics" and owner.metrics is not None:
                        body, ctype = owner.metrics()
                        self._send(200, ctype, body)
                    elif path == "/api/events" and owner.events is not None:
                        self._send(200, "application/json", json_bytes(owner.events(_limit(query))))
                    elif SNAPSHOT_PATH.match(path) and owner.snapshot is not None:
                        data = owner.snapshot(int(SNAPSHOT_PATH.match(path).group(1)))
                        if data is None:
                            self._send(404, "text/plain", b"no snapshot\n")
                        else:
                            self._send(200, "image/jpeg", data)
                    elif path == "/state.json":
                        self._send(200, "application/json", json.dumps(owner.state()).encode())
                    elif path == "/frame.jpg":
                        data = owner.frame_jpeg()
                        if data is None:
                            self._send(404, "text/plain", b"no frame yet\n")
                        else:
                            self._send(200, "image/jpeg", data)
                    else:
                        found = owner.routes(path) if owner.routes is not None else None
                        if found is None:
                            self._send(404, "text/plain", b"not found\n")
                        else:
                            self._send(200, found[0], found[1])
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self) -> None:  # noqa: N802
                owner.requests += 1
                path = self.path.partition("?")[0]
                try:
                    if path == "/login":
                        self._login()
                    elif path == "/logout":
                        if owner.auth is not None:
                            owner.auth.end_session(self._session())
                        self._redirect("login" if owner.auth is not None else "./",
                                       ViewAuth.clear_cookie(self._secure()))
                    else:
                        self._send(404, "text/plain", b"not found\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _authorised(self, path: str) -> bool:
                """True when no token is set, the request has a live session cookie or the right bearer header,
                or it is an open /metrics. Else the page redirects to the login form, a wrong bearer token is
                401 (429 past the limit) and anything else 401."""
                auth = owner.auth
                if auth is None or (path == "/metrics" and owner.metrics_open) or auth.session_ok(self._session()):
                    return True
                given = _bearer(self.headers.get("Authorization", ""))
                if given:
                    result = auth.attempt(self.client_address[0], given, "bearer header")
                    if result == OK:
                        return True
                    if result == LIMITED:
                        self._too_many("text/plain", b"429: too many wrong tokens from this address\n")
                        return False
                elif path in ("/", "/index.html"):
                    self._redirect("login")
                    return False
                owner.refused += 1
                self._send(401, "text/plain", b"401: log in at /login, or send Authorization: Bearer <token>\n",
                           [("WWW-Authenticate", 'Bearer realm="cnnvideo"')])
                return False

            def _login_page(self) -> None:
                if owner.auth is None or owner.auth.session_ok(self._session()):
                    self._redirect("./")
                else:
                    self._send(200, "text/html; charset=utf-8", _login_html(""))

            def _login(self) -> None:
                """POST /login: the form's token once; a session cookie and back to the page when right."""
                auth = owner.auth
                if auth is None:
                    self._redirect("./")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= FORM_MAX:
                    self.close_connection = True
                    self._send(413, "text/plain", b"413: a login form is at most 4 kB\n")
                    return
                form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
                client = self.client_address[0]
                result = auth.attempt(client, form.get("token", [""])[0], "login form")
                if result == OK:
                    log.info("live view: %s logged in", client)
                    self._redirect("./", auth.set_cookie(auth.new_session(), self._secure()))
                elif result == LIMITED:
                    self._too_many("text/html; charset=utf-8", _login_html(
                        "Too many wrong tokens from this address: try again in %d s." % auth.retry_after(client)))
                else:
                    owner.refused += 1
                    self._send(401, "text/html; charset=utf-8", _login_html("Wrong token."))

            def _too_many(self, ctype: str, body: bytes) -> None:
                owner.refused += 1
                wait = owner.auth.retry_after(self.client_address[0]) if owner.auth is not None else 0
                self._send(429, ctype, body, [("Retry-After", str(max(1, wait)))])

            def _session(self) -> str:
                return cookie_value(self.headers.get("Cookie", ""))

            def _secure(self) -> bool:
                """Served over TLS: here, or by a proxy in front that says so."""
                return isinstance(self.connection, ssl.SSLSocket) or \
                    self.headers.get("X-Forwarded-Proto", "").strip().lower() == "https"

            def _redirect(self, location: str, cookie: Optional[str] = None) -> None:
                self.send_response(303)
                self.send_header("Location", location)
                if cookie is not None:
                    self.send_header("Set-Cookie", cookie)
                self.send_header("Cache-Control", "no-store")
                self.send_header("Referrer-Policy", "no-referrer")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _send(self, code: int, ctype: str, body: bytes, headers: Sequence[Tuple[str, str]] = ()) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("X-Frame-Options", "DENY")
                self.send_header("Referrer-Policy", "no-referrer")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, int(port)), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="live-view", daemon=True)

    def token_ok(self, given: str) -> bool:
        """`given` is the token (constant-time comparison; False when none is set or given)."""
        return self.auth is not None and self.auth.token_ok(given)

    def start(self) -> int:
        self.thread.start()
        log.info("live view on http://%s:%d/", self.httpd.server_address[0], self.port)
        return self.port

    def set_frame(self, rgb: np.ndarray, detections: Optional[Sequence[Any]] = None) -> None:
        """The latest completed frame (kept by reference; encoded only when a browser asks), with a detector's
        detections (frame pixels) to draw on it then."""
        with self.lock:
            self.frame = rgb
            self.detections = detections
            self.jpeg = None

    def frame_jpeg(self) -> Optional[bytes]:
        with self.lock:
            if self.jpeg is None and self.frame is not None:
                import cv2

                rgb = self.frame
                if self.detections:
                    rgb = draw_boxes(rgb, self.detections)
                ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]))
                self.jpeg = buf.tobytes() if ok else None
            return self.jpeg

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(2)


def _bearer(header: str) -> str:
    scheme, _, value = header.strip().partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _login_html(message: str) -> bytes:
    return (LOGIN_PAGE % html.escape(message)).encode()


def _limit(query: str, default: int = 50, most: int = 1000) -> int:
    """`limit=N` of a query string, clamped to 0..most (default when absent or not a number)."""
    value = urllib.parse.parse_qs(query).get("limit", [""])[0]
    return max(0, min(most, int(value))) if value.isdigit() else default
