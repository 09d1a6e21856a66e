"""Several cameras on one cluster (issue 35) with `cnnvideo local`: one master per camera on the same trainer and
workers, real processes over real gRPC."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from tests.integration.helpers import REPO, base_config, env, write_config

FRAMES = 30
DOWN = "http://127.0.0.1:9/none.mjpg"
MOSQUITTO = "/usr/sbin/mosquitto"  # nothing listens on the discard port: the stream cannot be opened


def _retained_counts(sub):
    """The cameras with a retained count topic (<prefix>/<camera>/<label>/count) among what `sub` got."""
    with sub.lock:
        return {t.split("/")[2] for t, _, r in sub.messages if t.endswith("/count") and r}


def _lines(path):
    with open(path) as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.skipif(not os.path.exists(MOSQUITTO), reason="mosquitto not installed (Debian package)")
def test_two_cameras_share_the_pool_exactly_and_a_camera_down_at_start_stops_nothing(tmp_path, synthetic_video):
    """Two scenes (two synthetic clips) as cameras `door` and `yard` (weight 2) on two replicas, and a third camera
    whose stream cannot be opened. The run goes on without the third (its section says down, the exit code is 0);
    each live camera completes every frame, exact against the unsplit model (its own frames, never the other
    camera's), with its own results.jsonl (each line naming the camera) and report; both workers serve both
    cameras; the combined report gives each camera's fps and share; yard's window of frames in flight is twice
    door's. A real mosquitto gets each camera's `new` and `end` events on its own topic, naming the camera,
    retained counts per camera and each camera's own availability topic."""
    pytest.importorskip("paho.mqtt.client")
    from cnnvideo.video.frames import synthetic_frames, write_video

    from .test_events_mqtt import Broker, Subscriber

    other = write_video(str(tmp_path / "yard.avi"), synthetic_frames(40, (96, 128), seed=7))
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=FRAMES, in_flight=3, scheduler="replicas",
                       cluster={"workers": ["127.0.0.1:1", "127.0.0.1:2"]})
    del data["video"]
    data["cameras"] = {"door": {"video": synthetic_video}, "yard": {"video": other, "weight": 2},
                       "gate": {"video": DOWN}}
    os.makedirs(str(tmp_path / "broker"))
    broker = Broker(tmp_path / "broker").start()
    sub = Subscriber(broker.port, "t/cnn/#")
    data["events"] = {"enabled": True, "label_change": {"update_interval_s": 0.5},
                      "mqtt": {"host": "127.0.0.1", "port": broker.port, "topic_prefix": "t/cnn",
                               "client_id": "site"}}
    cfg = write_config(str(tmp_path / "cams.yml"), data)
    out = tmp_path / "out"
    try:
        proc = subprocess.run([sys.executable, "-m", "cnnvideo", "local", "-c", cfg, "--out", str(out)], cwd=REPO,
                              env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=600)
        for name in ("door", "yard"):
            evs = sub.events("t/cnn/%s/events" % name)
            kinds = {e["type"] for e in evs}
            assert {"new", "end"} <= kinds and {e["camera"] for e in evs} == {name}, (name, evs[:4])
        late = Subscriber(broker.port, "t/cnn/#")  # what the broker retained: each camera's counts
        try:
            deadline = time.time() + 10
            while time.time() < deadline and len(_retained_counts(late)) < 2:
                time.sleep(0.2)
            assert _retained_counts(late) == {"door", "yard"}, late.messages[:10]
            # each master's availability is its own (one camera's end does not mark the other offline)
            with late.lock:
                available = {t for t, _, r in late.messages if t.endswith("/available") and r}
            assert available == {"t/cnn/door/available", "t/cnn/yard/available"}, late.messages[:10]
        finally:
            late.close()
    finally:
        sub.close()
        broker.stop()
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "[local] camera gate is down" in proc.stderr
    combined = json.loads((out / "report.json").read_text())
    cams = combined["cameras"]
    assert cams["gate"]["status"] == "down" and cams["gate"]["error"], cams["gate"]
    for name in ("door", "yard"):
        c = cams[name]
        assert c["status"] == "completed" and c["completed"] == FRAMES and c["lost"] == 0, c
        assert c["max_abs_err"] == 0.0 and c["fps"] > 0, c
        report = json.loads((out / name / "report.json").read_text())
        assert report["camera"] == name and report["pool"]["shape"] == "replicas"
        assert all(n > 0 for n in report["pool"]["frames_sent_per_worker"].values()), report["pool"]
        lines = _lines(str(out / name / "results.jsonl"))
        assert [e["frame"] for e in lines] == list(range(FRAMES)) and {e["camera"] for e in lines} == {name}
    assert abs(cams["door"]["share"] + cams["yard"]["share"] - 1.0) < 1e-3
    assert combined["total_fps"] > 0
    windows = {n: yaml.safe_load((out / n / "config.yml").read_text())["in_flight"] for n in ("door", "yard")}
    assert windows == {"door": 2, "yard": 4}, windows  # in_flight 3 x weight / mean weight (1.33)
    # the two masters' frames were told apart on the workers: each worker held a run per camera
    for w in ("w0", "w1"):
        log = (out / ("%s.log" % w)).read_text()
        assert log.count("generation 0 started") >= 2, log[-2000:]


def test_every_camera_down_is_one_line(tmp_path, synthetic_video):
    """With no camera that opens (stream URLs are opened by their masters, not probed before: a single-client
    server would spend its one connection on a probe), `cnnvideo local` exits non-zero with one line of its own
    naming every camera, and the combined report says why each is down."""
    data = base_config(synthetic_video, str(tmp_path / "cache"), trainer={"frames": 8})
    del data["video"]
    data["trainer"]["video"] = synthetic_video  # (no camera to fit on)
    data["cameras"] = {"a": {"video": DOWN}, "b": {"video": DOWN.replace("none", "other")}}
    cfg = write_config(str(tmp_path / "down.yml"), data)
    out = tmp_path / "o"
    proc = subprocess.run([sys.executable, "-m", "cnnvideo", "local", "-c", cfg, "--out", str(out)],
                          cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("cnnvideo local:")]
    assert proc.returncode != 0 and len(ours) == 1, proc.stderr[-3000:]
    assert "every camera is down" in ours[0] and "a: " in ours[0] and "b: " in ours[0], ours
    cams = json.loads((out / "report.json").read_text())["cameras"]
    assert {n: c["status"] for n, c in cams.items()} == {"a": "down", "b": "down"}
    assert all("cannot open stream" in c["error"] for c in cams.values()), cams
