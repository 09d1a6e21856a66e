"""Live view: a small HTTP server (stdlib, one thread) showing a run as it goes; off unless a port is configured.

GET /            the page (inline JS and SVG, no external assets)
GET /state.json  what the page draws: processed fps, latency, skipped share, bytes and rate per hop, current
                 plan, latest result, recent stage spans (a rolling Gantt chart); built by the caller's callback
GET /frame.jpg   the latest completed frame as JPEG (a detector's boxes drawn on it)

A detector run's state has `latest.detections` ({label: boxes} of the latest frame): the page then shows the
person count and every label's count (as text: labels come from a model file).
"""
from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np

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
  <div>processed <b id="processed">0</b> frames, <b id="fps">-</b> fps</div>
  <div>latency p50 <b id="lat_p50">-</b> s, p95 <b id="lat_p95">-</b> s, max <b id="lat_max">-</b> s</div>
  <div>captured <b id="captured">-</b>, skipped <b id="skipped">-</b> (<b id="skipped_share">-</b>)</div>
  <div>plan (cuts) <b id="plan">-</b></div>
  <div class="k" id="plan_layers"></div>
  <div>checked <b id="checked">-</b>, max abs error <b id="max_err">-</b></div>
  <table><thead><tr><th>hop</th><th>bytes sent</th><th>MB/s</th><th>messages</th></tr></thead>
  <tbody id="hops"></tbody></table>
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
    const st=await (await fetch("state.json",{cache:"no-store"})).json();
    set("mode", st.mode ? "("+st.mode+")" : "");
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


class LiveView:
    """Serves the live page; `state()` is called per request and must return a JSON-able mapping."""

    def __init__(self, port: int, state: Callable[[], Dict[str, Any]], host: str = "127.0.0.1") -> None:
        self.state = state
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
                path = self.path.split("?", 1)[0]
                try:
                    if path in ("/", "/index.html"):
                        self._send(200, "text/html; charset=utf-8", PAGE.encode())
                    elif path == "/state.json":
                        self._send(200, "application/json", json.dumps(owner.state()).encode())
                    elif path == "/frame.jpg":
                        data = owner.frame_jpeg()
                        if data is None:
                            self._send(404, "text/plain", b"no frame yet\n")
                        else:
                            self._send(200, "image/jpeg", data)
                    else:
                        self._send(404, "text/plain", b"not found\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer((host, int(port)), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="live-view", daemon=True)

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
                    from cnnvideo.results.detections import draw_boxes

                    rgb = draw_boxes(rgb, self.detections)
                ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]))
                self.jpeg = buf.tobytes() if ok else None
            return self.jpeg

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(2)
