"""Issue 23 on people, not labels: the trained person detector over vtest.avi (pedestrians) in a real `cnnvideo
local` run played as a camera, publishing to a real mosquitto (Debian's) on 127.0.0.1 that is stopped mid-run and
started again. Every wait is bounded."""
from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from .helpers import REPO, LocalRun, base_config, write_config
from .test_events_master import MOSQUITTO, wait_for

pytestmark = pytest.mark.slow

FRAMES = 72
FPS = 6.0  # a realtime camera at 6 fps for 12 s; `drop: none` makes the reader wait, so no frame is skipped


def green_edges(img, box, tol=3):
    """Share of the pixels on the rectangle `box` (x1, y1, x2, y2 in pixels; a 2-pixel line) that are green in
    the BGR image `img`, looking up to `tol` pixels either side of each edge for the drawn line."""
    h, w = img.shape[:2]
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    x1, x2 = min(max(x1, 0), w - 1), min(max(x2, 0), w - 1)
    y1, y2 = min(max(y1, 0), h - 1), min(max(y2, 0), h - 1)
    green = (img[:, :, 1] > 150) & (img[:, :, 0] < 110) & (img[:, :, 2] < 110)
    hits = []
    for x in (x1, x2):
        cols = green[y1:y2 + 1, max(x - tol, 0):x + tol + 1]
        hits.append(cols.any(axis=1))
    for y in (y1, y2):
        rows = green[max(y - tol, 0):y + tol + 1, x1:x2 + 1]
        hits.append(rows.any(axis=0))
    return float(np.concatenate(hits).mean())


@pytest.mark.skipif(not os.path.exists(MOSQUITTO), reason="mosquitto not installed (Debian package)")
def test_people_events_survive_a_broker_restart(tmp_path, person_detector):
    """People walking in vtest.avi become tracks: `new` before `end` with the same id and label, ids announced in
    increasing order, the retained person count. The broker is killed (SIGKILL) mid-run and started again 4 s later:
    the run still processes every frame, events captured after the restart arrive, what the publisher's bound
    (queue_max 5) could not hold is counted as dropped in report.json. Every `end` that arrived names a
    snapshot JPEG that decodes and has the green box drawn at the event's `snapshot_box`. With `check` off the
    report still names the detector's file as its weights (it said `random`, the unused key's default)."""
    pytest.importorskip("paho.mqtt.client")
    from .test_events_mqtt import Broker, Subscriber

    video = os.path.join(REPO, "media", "vtest.avi")
    if not os.path.isfile(video):
        pytest.skip("media/vtest.avi missing (make video)")
    os.makedirs(str(tmp_path / "broker"))
    broker = Broker(tmp_path / "broker").start()
    sub = Subscriber(broker.port, "p/#", client_id="people-sub", persistent=True)
    data = base_config(
        video, str(tmp_path / "cache"), model=person_detector, engine="onnxruntime",
        frame_size=[240, 320], frames=FRAMES, in_flight=2, check=False, scheduler="lbs",
        trainer={"frames": 8}, source={"realtime": True, "fps": FPS, "drop": "none", "loop": False},
        events={"enabled": True, "camera": "street", "tracker": {"min_frames": 2, "max_unseen_s": 1.0},
                "mqtt": {"host": "127.0.0.1", "port": broker.port, "topic_prefix": "p", "queue_max": 5,
                         "reconnect_min_s": 1, "reconnect_max_s": 1}})
    data.pop("weights")
    out = str(tmp_path / "out")
    run = LocalRun(write_config(str(tmp_path / "people.yml"), data), out)
    try:
        wait_for(lambda: len(sub.events("p/street/events")) >= 3, 240, "the first events", run)
        broker.stop(signal.SIGKILL)  # killed: no goodbye, nothing saved
        time.sleep(4.0)
        restarted = time.time()
        broker.start()
        code, report, log = run.finish(240)
        assert code == 0, log[-3000:]
        assert report["completed"] == FRAMES and report["lost"] == 0 and report["dropped"] == 0, report["completed"]
        wait_for(lambda: any(e["capture_time"] > restarted for e in sub.events("p/street/events")), 15,
                 "events captured after the broker came back")
        events = sub.events("p/street/events")
        retained = [p for t, p, r in sub.messages if t == "p/street/person/count"]
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        sub.close()
        broker.stop()

    assert "ONNX file" in report["weights_used"] and "sha256" in report["weights_used"], report["weights_used"]
    mq = report["events"]["mqtt"]
    assert report["events"]["kind"] == "detector" and report["events"]["tracks"] >= 2, report["events"]
    assert mq["dropped"] > 0 and mq["queued"] == 0 and mq["connected"] is True and mq["published"] > 0, mq
    # QoS 1 is at least once: a message the broker had not acknowledged when it stopped may come twice
    seen = list({(e["type"], e["track_id"], e["frame"]): e for e in events}.values())
    assert len(seen) <= mq["published"], (len(seen), mq)
    assert {e["label"] for e in seen} == {"person"} and {e["camera"] for e in seen} == {"street"}
    news = [e["track_id"] for e in seen if e["type"] == "new"]
    assert news == sorted(news) and len(set(news)) == len(news), news
    first = {e["track_id"]: e for e in seen if e["type"] == "new"}
    ends = [e for e in seen if e["type"] == "end"]
    assert ends, "no `end` arrived"
    for e in ends:
        if e["track_id"] in first:
            assert first[e["track_id"]]["frame"] < e["frame"] or first[e["track_id"]]["frame"] == e["frame"]
        assert e["snapshot"] and e["snapshot_box"], e
    import cv2

    snaps = os.path.join(out, "snapshots")
    for e in ends:
        img = cv2.imread(os.path.join(snaps, "%d.jpg" % e["track_id"]))
        assert img is not None and img.shape[:2] == (240, 320), e
        assert green_edges(img, e["snapshot_box"]) >= 0.9, (e, green_edges(img, e["snapshot_box"]))
    assert retained, "no person count"
    print("people: %d tracks, %d events arrived (%s), mqtt %s, %d snapshots checked"
          % (report["events"]["tracks"], len(seen), json.dumps(report["events"]["by_type"]), mq, len(ends)))
