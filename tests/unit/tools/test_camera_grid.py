"""The camera grid of a several-camera run (tools/camera_grid.py) over two real camera live pages (LiveView servers
with frames of two sizes) behind one token: its JSON and frames through the bearer token, and a real chromium
that logs in once on the grid and sees a tile per camera."""
import json
import os
import re
import sys
import urllib.error
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import browser  # noqa: E402

from cnnvideo.results.liveview import LiveView  # noqa: E402
from cnnvideo.tools.camera_grid import CameraGrid  # noqa: E402
from cnnvideo.tools.local_cameras import live_ports  # noqa: E402

TOKEN = "grid-token-1234567890"


def camera(processed, size, people):
    """A camera's live page: a state with `processed` frames and a detector's latest detections, and a frame."""
    state = {"processed": processed, "fps": 2.5, "skipped_share": 0.25,
             "latest": {"frame": processed - 1, "result": "x", "detections": {"person": people}}}
    view = LiveView(0, lambda: dict(state), token=TOKEN)
    view.set_frame(np.full(size + (3,), 90, dtype=np.uint8))
    view.start()
    return view


def get(url, token=None):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def test_the_grid_shows_every_camera_behind_one_login():
    """/state.json holds each camera's own state and status (a camera whose page is gone says why);
    /camera/<name>/frame.jpg is that camera's JPEG; an unknown camera is 404 and no token 401. Chromium logs in
    on the grid once and gets a tile per camera: its processed count, people, status, its frame at its own size and
    a link to the camera's own page on its port."""
    door, yard = camera(12, (240, 320), 2), camera(7, (120, 160), 0)
    cams = [("door", door.port), ("yard", yard.port), ("gate", 9)]  # nothing listens on the discard port
    grid = CameraGrid(0, cams, token=TOKEN, status=lambda n: "exited 1" if n == "gate" else "running")
    base = "http://127.0.0.1:%d/" % grid.start()
    try:
        status, body = get(base + "state.json", TOKEN)
        st = {c["name"]: c for c in json.loads(body)["cameras"]}
        assert status == 200 and st["door"]["state"]["processed"] == 12 and st["yard"]["state"]["processed"] == 7
        assert st["gate"]["status"] == "exited 1" and st["gate"]["error"].startswith("no live page"), st["gate"]
        status, jpeg = get(base + "camera/yard/frame.jpg", TOKEN)
        assert status == 200 and jpeg[:2] == b"\xff\xd8"
        assert get(base + "camera/nope/frame.jpg", TOKEN)[0] == 404
        assert get(base + "camera/gate/frame.jpg", TOKEN)[0] == 404
        assert get(base + "state.json")[0] == 401
        with browser.Chromium() as chromium:
            page = chromium.page()
            assert page.navigate(base) == base + "login"
            assert page.log_in(TOKEN) == base
            page.wait_for("document.querySelectorAll('.cam-frame[data-size]').length === 2")
            dom = page.dom()
    finally:
        grid.stop()
        door.stop()
        yard.stop()
    tiles = re.findall(r'<div class="cam" data-camera="(\w+)" data-status="([^"]+)" data-processed="(\d*)"', dom)
    assert tiles == [("door", "running", "12"), ("yard", "running", "7"), ("gate", "exited 1", "")], dom[-3000:]
    assert 'href="http://127.0.0.1:%d/"' % door.port in dom and 'href="http://127.0.0.1:9/"' in dom
    assert re.search(r'src="camera/door/frame.jpg\?f=11" data-size="320x240"', dom), dom[-3000:]
    assert re.search(r'src="camera/yard/frame.jpg\?f=6" data-size="160x120"', dom)
    assert "processed 12, 2.50 fps, people 2, skipped 25.0%" in dom and "(5.00 fps in all)" in dom


def test_live_ports_one_for_the_grid_and_one_per_camera():
    """A several-camera run forwards the grid's port and one per camera; one camera keeps one port."""
    from cnnvideo import config

    one = config.Config()
    assert live_ports(one) == 1
    one.cameras = [config.Camera("a", "x.avi", (96, 128), config.Source(), {}, 1.0, own=("video",)),
                   config.Camera("b", "y.avi", (96, 128), config.Source(), {}, 1.0, own=("video",))]
    assert live_ports(one) == 3
