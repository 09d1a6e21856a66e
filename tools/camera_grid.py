"""The camera grid of a several-camera `cnnvideo local` run: one page on `live_view.port` with a tile per camera (its
latest frame with its boxes, processed frames, fps, people, skipped share, whether its master still runs) and a
link to the camera's own live page (`live_view.port` + 1 + the camera's index).

The grid is a LiveView (the same login, token and headers as a camera's page) whose /state.json gathers every
camera's /state.json and whose /camera/<name>/frame.jpg passes on that camera's latest frame; it asks the cameras'
pages with the bearer token, so a browser logs in once, on the grid."""
from __future__ import annotations

import json
import re
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple

from cnnvideo.results.liveview import LiveView

FRAME_PATH = re.compile(r"^/camera/([A-Za-z0-9_-]{1,64})/frame\.jpg$")
ASK_TIMEOUT_S = 2.0

GRID_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>cnn-video cameras</title>
<style>
body{font-family:sans-serif;margin:12px;background:#fafafa;color:#222}
#grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:12px}
.cam{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 12px}
.cam img{width:100%;border:1px solid #ccc;min-height:40px}
.k{color:#666} .down{color:#b00}
</style></head>
<body>
<h2>cnn-video cameras <span id="total" class="k"></span></h2>
<div id="grid"></div>
<script>
const tiles={};
function tile(name){
  if(tiles[name]) return tiles[name];
  const d=document.createElement("div"); d.className="cam"; d.setAttribute("data-camera", name);
  const h=document.createElement("h3"), a=document.createElement("a"); a.className="cam-link"; a.textContent=name;
  h.appendChild(a); d.appendChild(h);
  const img=document.createElement("img"); img.className="cam-frame"; img.alt=name+": latest frame";
  img.addEventListener("load", ()=>img.setAttribute("data-size", img.naturalWidth+"x"+img.naturalHeight));
  d.appendChild(img);
  const t=document.createElement("div"); t.className="cam-text"; d.appendChild(t);
  document.getElementById("grid").appendChild(d);
  tiles[name]={div:d, link:a, img:img, text:t, frame:-1};
  return tiles[name];
}
async function tick(){
  try{
    const r=await fetch("state.json",{cache:"no-store"});
    if(r.status===401){location.href="login"; return;}
    const st=await r.json();
    let fps=0;
    (st.cameras||[]).forEach(c=>{
      const t=tile(c.name), s=c.state||{};
      t.link.href=location.protocol+"//"+location.hostname+":"+c.port+"/";
      t.div.setAttribute("data-status", c.status);
      t.div.setAttribute("data-processed", String(s.processed===undefined?"":s.processed));
      if(s.fps) fps+=s.fps;
      const det=(s.latest||{}).detections;
      t.text.className="cam-text"+(c.status==="running"?"":" down");
      t.text.textContent=c.status+(c.error?" ("+c.error+")":"")+", processed "+(s.processed??"-")+
        ", "+(s.fps?s.fps.toFixed(2):"-")+" fps"+(det?", people "+(det.person||0):"")+
        (s.skipped_share!==null&&s.skipped_share!==undefined?", skipped "+(100*s.skipped_share).toFixed(1)+"%":"");
      if(s.latest && s.latest.frame!==t.frame){
        t.frame=s.latest.frame; t.img.src="camera/"+encodeURIComponent(c.name)+"/frame.jpg?f="+t.frame;
      }
    });
    document.getElementById("total").textContent="("+fps.toFixed(2)+" fps in all)";
    document.body.setAttribute("data-updated", String(Date.now()));
  }catch(e){document.body.setAttribute("data-error", String(e));}
}
tick(); setInterval(tick, 1000);
</script></body></html>
"""


class CameraGrid:
    """The grid page for `cameras` [(name, port of its live page)] on `port`; `status(name)` says whether that
    camera's master runs ("running", "exited N")."""

    def __init__(self, port: int, cameras: List[Tuple[str, int]], host: str = "127.0.0.1",
                 token: Optional[str] = None, status: Optional[Callable[[str], str]] = None) -> None:
        self.cameras = list(cameras)
        self.ports = dict(self.cameras)
        self.ask_host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
        self.token = token
        self.status = status or (lambda name: "running")
        self.view = LiveView(port, self.state, host, token=token, page=GRID_PAGE, routes=self.route)

    def start(self) -> int:
        return self.view.start()

    def stop(self) -> None:
        self.view.stop()

    def _ask(self, name: str, path: str) -> bytes:
        req = urllib.request.Request("http://%s:%d%s" % (self.ask_host, self.ports[name], path))
        if self.token:
            req.add_header("Authorization", "Bearer %s" % self.token)
        with urllib.request.urlopen(req, timeout=ASK_TIMEOUT_S) as resp:
            return resp.read()

    def state(self) -> Dict[str, Any]:
        """Every camera: name, port, status, and its page's state (or why it could not be read)."""
        cams = []
        for name, port in self.cameras:
            entry: Dict[str, Any] = {"name": name, "port": port, "status": self.status(name)}
            try:
                entry["state"] = json.loads(self._ask(name, "/state.json"))
            except (OSError, ValueError) as exc:
                entry["error"] = "no live page: %s" % getattr(exc, "reason", exc)
            cams.append(entry)
        return {"cameras": cams}

    def route(self, path: str) -> Optional[Tuple[str, bytes]]:
        """/camera/<name>/frame.jpg: that camera's latest frame, None (404) for another path, camera or no frame."""
        m = FRAME_PATH.match(path)
        if m is None or m.group(1) not in self.ports:
            return None
        try:
            return "image/jpeg", self._ask(m.group(1), "/frame.jpg")
        except OSError:  # urllib's errors are OSErrors
            return None


__all__ = ["CameraGrid", "GRID_PAGE"]
