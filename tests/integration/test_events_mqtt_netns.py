"""Events reach a broker on the host's 127.0.0.1 when `cnnvideo local` runs as root with its default links (tc):
the launcher then re-runs itself in a network namespace of its own, whose loopback is not the host's, and the
master dials the broker from the host's network (cnnvideo.hostnet). A real mosquitto on the host's 127.0.0.1,
a paho subscriber in the test, alexnet with random weights on a tiny clip of two scenes (black, white) whose
top-1 labels differ. Every wait is bounded."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cnnvideo import hostnet

from .helpers import base_config, env, run_local
from .test_events_master import MOSQUITTO, free_port, wait_for

mqtt = pytest.importorskip("paho.mqtt.client")

pytestmark = pytest.mark.skipif(not os.path.exists(MOSQUITTO), reason="mosquitto not installed (Debian package)")
SCENE = 4  # frames per scene
FRAMES = 2 * SCENE


def need_tc():
    """Skip unless `cnnvideo local` picks tc links by default here (root, iproute2, htb in a namespace)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: only then does `cnnvideo local` run in a network namespace (tc links)")
    from cnnvideo.tools import linkemu

    ok, why = linkemu.netns_possible()
    if not ok:
        pytest.skip("tc in a network namespace is not possible here: %s" % why)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def two_scenes(tmp_path_factory):
    """FRAMES frames at 96x128: black then white, SCENE each."""
    from cnnvideo.video.frames import write_video

    frames = [np.full((96, 128, 3), 0 if i < SCENE else 255, np.uint8) for i in range(FRAMES)]
    return write_video(str(tmp_path_factory.mktemp("scenes") / "scenes.avi"), iter(frames))


def tc_config(video, cache, mqtt_cfg):
    """A short run with the default links (no `local.links`: tc as root) and no updates between label changes."""
    data = base_config(video, cache, frames=FRAMES, in_flight=2, check=False, trainer={"frames": 4},
                       events={"enabled": True, "camera": "door", "label_change": {"update_interval_s": 1000},
                               "mqtt": dict({"host": "127.0.0.1", "topic_prefix": "tc/cnn", "reconnect_min_s": 1,
                                             "reconnect_max_s": 1}, **mqtt_cfg)})
    data["local"] = {"cpus": "none"}
    return data


def master_log(out):
    with open(os.path.join(out, "master.log")) as fh:
        return fh.read()


def test_events_reach_the_hosts_broker_under_tc_links(tmp_path, two_scenes, cache_dir):
    """The run is in its own namespace (tc links), yet the subscriber on the host's broker gets `online`, then
    `new` and `end` events in which every `end` closes the `new` of the same id and label; a late subscriber gets
    the retained count of each label (0 once its track ended) and `offline`; report.json says every event was
    acknowledged and none queued or dropped."""
    need_tc()
    from .test_events_mqtt import Broker, Subscriber

    os.makedirs(str(tmp_path / "broker"))
    broker = Broker(tmp_path / "broker").start()
    sub = Subscriber(broker.port, "tc/cnn/#")
    try:
        proc, report, out = run_local(tmp_path, tc_config(two_scenes, cache_dir, {"port": broker.port}), "up",
                                      timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "[local] links: tc in network namespace" in proc.stderr and report["link_emulation"] == "tc"
        log = master_log(out)
        assert "events.mqtt: connected to 127.0.0.1:%d" % broker.port in log and "cannot connect" not in log, log
        ev = report["events"]
        n = sum(ev["by_type"].values())
        assert ev["tracks"] >= 1 and ev["by_type"].get("new") == ev["tracks"] == ev["by_type"].get("end"), ev
        assert ev["mqtt"] == {"host": "127.0.0.1", "port": broker.port, "published": n, "queued": 0, "dropped": 0,
                              "connected": True}, ev
        wait_for(lambda: len(sub.events("tc/cnn/door/events")) >= n, 10, "%d events at the subscriber" % n)
        wait_for(lambda: ("offline", False) in sub.on("tc/cnn/available"), 10, "`offline`")
        assert sub.on("tc/cnn/available")[0] == ("online", False)
        events = [e for e in sub.events("tc/cnn/door/events") if e["type"] in ("new", "end")]
        opened = {}
        for e in events:
            assert e["camera"] == "door"
            if e["type"] == "new":
                assert e["track_id"] == len(opened) + 1 and e["track_id"] not in opened, events
                opened[e["track_id"]] = e["label"]
            else:
                assert opened.get(e["track_id"]) == e["label"], (e, opened)
        assert [e["type"] for e in events].count("end") == len(opened) == ev["tracks"], events
        late = Subscriber(broker.port, "tc/cnn/#")
        try:
            wait_for(lambda: late.on("tc/cnn/available") == [("offline", True)], 5, "the retained `offline`")
            wait_for(lambda: len([m for m in late.messages if m[0].endswith("/count")]) >= len(set(opened.values())),
                     5, "the retained counts")
            counts = {t: (p, r) for t, p, r in late.messages if t.endswith("/count")}
        finally:
            late.close()
        from cnnvideo.events.mqtt import topic_level

        assert counts == {"tc/cnn/door/%s/count" % topic_level(lb): ("0", True) for lb in set(opened.values())}, counts
        print("tc links: %d events over mqtt (%s), labels %s" % (n, ev["by_type"], sorted(set(opened.values()))))
    finally:
        sub.close()
        broker.stop()


def test_events_with_no_broker_are_counted_under_tc_links(tmp_path, two_scenes, cache_dir):
    """No broker on the host's port: under tc links too the master logs once that it cannot connect, the run
    completes, and report.json counts what the queue (queue_max 1) could not hold as dropped."""
    need_tc()
    port = free_port()
    proc, report, out = run_local(tmp_path, tc_config(two_scenes, cache_dir, {"port": port, "queue_max": 1}),
                                  "down", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["link_emulation"] == "tc"
    log = master_log(out)
    assert log.count("events.mqtt: cannot connect to 127.0.0.1:%d" % port) == 1, log
    ev = report["events"]
    n = sum(ev["by_type"].values())
    assert n >= 2 and ev["mqtt"] == {"host": "127.0.0.1", "port": port, "published": 0, "queued": 1,
                                     "dropped": n - 1, "connected": False}, ev


RECONNECT_CHILD = """
import json, sys, time
from cnnvideo import hostnet
from cnnvideo.events.mqtt import MqttPublisher, MqttSettings
from cnnvideo.events.types import Event


def until(cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)
    return cond()


pub = MqttPublisher(MqttSettings(port=int(sys.argv[1]), topic_prefix="rc", reconnect_min_s=1, reconnect_max_s=1))
pub.start(run_in=hostnet.in_netns)
print("connected" if until(lambda: pub.stats().connected, 10) else "not connected", flush=True)
sys.stdin.readline()  # the broker was stopped and started again
back = until(lambda: pub.stats().connected, 15)
pub.publish_event(Event(type="new", track_id=7, label="a", score=1, box=(0, 0, 1, 1), capture_time=1, frame=3))
until(lambda: pub.stats().published == 1, 10)
s = pub.close(timeout=2)
print(json.dumps({"reconnected": back, "published": s.published, "dropped": s.dropped}), flush=True)
"""


def test_reconnects_stay_in_the_hosts_network(tmp_path):
    """A publisher in a network namespace of its own, started with the master's `run_in` (cnnvideo.hostnet), keeps
    dialling from the host's network: the broker on the host's 127.0.0.1 is stopped and started again on the same
    port, the publisher reconnects by itself and an event sent afterwards arrives."""
    from .test_events_mqtt import Broker, Subscriber

    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("needs root, unshare and ip (a network namespace, and setns back into the host's)")
    broker = Broker(tmp_path).start()
    sub = Subscriber(broker.port, "rc/#", client_id="rc-sub", persistent=True)
    child_env = dict(env(), **{hostnet.HOST_NETNS_ENV: "/proc/%d/ns/net" % os.getpid()})
    script = 'ip link set lo up && exec "$0" -c "$1" "$2"'  # a namespace of its own, its loopback up
    child = subprocess.Popen(["unshare", "-n", "sh", "-c", script, sys.executable, RECONNECT_CHILD, str(broker.port)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env)
    try:
        assert child.stdout.readline().strip() == "connected"
        wait_for(lambda: ("online", False) in sub.on("rc/available"), 5, "`online`")
        broker.stop()
        broker.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        out = child.stdout.readline()
        assert child.wait(30) == 0
        assert json.loads(out) == {"reconnected": True, "published": 1, "dropped": 0}, out
        wait_for(lambda: sub.events("rc/cam/events"), 10, "the event sent after the reconnect")
        assert [(e["track_id"], e["frame"]) for e in sub.events("rc/cam/events")] == [(7, 3)]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)
        sub.close()
        broker.stop()
