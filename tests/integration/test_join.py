"""Workers that join a running pool (`cnnvideo worker --join`), in real processes over real gRPC: a worker joins
mid-run and gets frames (none lost, every one exact), one with a wrong token is refused with a line on each side
while the pool runs on, and a join to an address that is not a master fails with one line."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from cnnvideo.rpc.net import free_port
from tests.integration.helpers import REPO, LocalRun, base_config, env, stop_procs, write_config

TOKEN = "join-token-0123456789abcdef"
FPS = 10  # the looped camera's rate: these runs last until a join is seen, so their CPU grows with it


def _lines(out):
    with open(os.path.join(out, "results.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def _worker(cfg_path: str, join: str, log_path: str, token: str = "", **change) -> subprocess.Popen:
    """`cnnvideo worker --join` on a free loopback port with the config at `cfg_path` but `token` as its join token
    (and the keys of `change`), its log in `log_path`."""
    with open(cfg_path) as fh:
        data = yaml.safe_load(fh)
    data["cluster"]["join_token"] = token
    data.update(change)
    cfg_path = write_config(log_path + ".yml", data)
    e = env()
    e.pop("CNNVIDEO_JOIN_TOKEN", None)
    return subprocess.Popen([sys.executable, "-m", "cnnvideo", "worker", "-c", cfg_path, "--join", join, "--listen",
                             "127.0.0.1:%d" % free_port()], stdout=subprocess.DEVNULL,
                            stderr=open(log_path, "w"), env=e, cwd=REPO)


def _state(port: int, ready, timeout: float = 60.0):
    """The master's /state.json once `ready(state)` holds."""
    deadline = time.time() + timeout
    while True:
        with urllib.request.urlopen("http://127.0.0.1:%d/state.json" % port, timeout=5) as r:
            st = json.load(r)
        if ready(st) or time.time() > deadline:
            return st
        time.sleep(0.5)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def test_a_worker_joins_mid_run_and_an_intruder_is_refused(tmp_path, synthetic_video):
    """Two workers, full replication, joins on with a token, a camera-like run (10 fps, looped) until SIGTERM. A
    worker with a wrong token, and one with another frame size, ask to join: each is refused (it exits 1 naming the
    refusal; the master logs one line) and the run goes on; a worker with the token, started beside them, joins:
    the master gives it id w2, re-plans onto three replicas, and frames reach it (/state.json lists the three
    members). Then SIGTERM: every frame sent completes, in order, exact against the unsplit model, and nothing is
    sent again. However slow the host, the run lasts until the joiner has served frames."""
    cache = str(tmp_path / "cache")
    join = "127.0.0.1:%d" % free_port()
    port = free_port()
    data = base_config(synthetic_video, cache, frames=0, in_flight=3, scheduler="replicas",
                       trainer={"frames": 8}, source={"realtime": True, "fps": FPS, "drop": "none", "loop": True},
                       reliability={"restart": True, "max_restarts": 10, "retries": 3, "peer_wait_s": 60.0},
                       cluster={"workers": ["127.0.0.1:50060", "127.0.0.1:50061"], "join": join,
                                "join_token": TOKEN}, bandwidth=[3], live_view={"port": port})
    out = str(tmp_path / "join")
    run = LocalRun(write_config(str(tmp_path / "join.yml"), data), out)
    workers = []
    try:
        run.wait_for(lambda: run.sent >= 40, 300)
        resolved = os.path.join(out, "config.yml")  # the launcher's config: the same settings as the pool's
        intruder = _worker(resolved, join, str(tmp_path / "intruder.log"), token="wrong-token-0123456789abcdef")
        misfit = _worker(resolved, join, str(tmp_path / "misfit.log"), token=TOKEN, frame_size=[64, 96])
        joiner = _worker(resolved, join, str(tmp_path / "w2.log"), token=TOKEN)
        workers += [intruder, misfit, joiner]
        assert intruder.wait(300) == 1 and misfit.wait(300) == 1
        said = _read(str(tmp_path / "intruder.log"))
        assert "refused this worker: wrong join token" in said, said[-2000:]
        said = _read(str(tmp_path / "misfit.log"))
        assert "refused this worker: it runs alexnet at 64x96" in said and "the pool runs alexnet at 96x128" in said
        run.wait_for(lambda: run.count("join refused") >= 2, 30)
        run.wait_for(lambda: run.count("joined the pool") >= 1, 300)
        state = _state(port, lambda st: len(st["members"]) == 3 and st["members"][2]["frames"] >= 20, 300)
        code, report, text = run.stop(300)  # the master takes no new frame, drains and reports
    finally:
        run.close(workers)
    assert code == 0, text[-4000:]
    assert report["completed"] == report["frames"] > 40 and report["lost"] == 0 and report["max_abs_err"] == 0.0
    assert report["retried"] == 0, text[-4000:]
    refused = sorted(ln.split(": ")[-1] for ln in text.splitlines() if "join refused" in ln)
    assert refused[1] == "wrong join token" and refused[0].startswith("it runs alexnet at 64x96"), refused
    assert "worker w2 at 127.0.0.1:" in text and "joined the pool" in text
    events = report["pool"]["left_out"]
    assert [e.get("joined") for e in events if e.get("scope") == "joined"] == [[2]], events
    lines = _lines(out)
    assert [e["frame"] for e in lines] == list(range(report["completed"]))
    first = min(e["frame"] for e in lines if e["route"][0] == 2)
    assert all(e["route"][0] in (0, 1) for e in lines[:first])
    assert sum(e["route"][0] == 2 for e in lines) >= 20
    assert "joined the pool of the master at %s as w2" % join in _read(str(tmp_path / "w2.log"))
    members = state["members"]
    assert [m["worker"] for m in members] == ["w0", "w1", "w2"] and {m["state"] for m in members} == {"serving"}
    assert members[0]["joined_at_s"] is None and members[2]["joined_at_s"] > 0 and members[2]["stage"] == 0
    assert members[2]["address"].startswith("127.0.0.1:") and members[2]["device"]


def test_a_join_to_an_address_that_is_not_a_master_fails_with_one_line(tmp_path, synthetic_video):
    """`--join` naming a worker's port (a gRPC server without the Join service) exits 1 with one line."""
    cache = str(tmp_path / "cache")
    port = free_port()
    data = base_config(synthetic_video, cache, cluster={"workers": ["127.0.0.1:%d" % port]}, bandwidth=[3])
    cfg = write_config(str(tmp_path / "w.yml"), data)
    target = subprocess.Popen([sys.executable, "-m", "cnnvideo", "worker", "-c", cfg, "-i", "0"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), cwd=REPO)
    try:
        from cnnvideo.rpc import net

        assert net.wait_healthy("127.0.0.1:%d" % port, 120)
        proc = subprocess.run([sys.executable, "-m", "cnnvideo", "worker", "-c", cfg, "--join",
                               "127.0.0.1:%d" % port, "--listen", "127.0.0.1:%d" % free_port()],
                              capture_output=True, text=True, env=env(), cwd=REPO, timeout=180)
    finally:
        stop_procs([target])
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and errors[0].endswith("is not a cnnvideo master (it has no Join service)"), \
        proc.stderr[-2000:]


def test_a_worker_joins_every_cameras_pool(tmp_path, synthetic_video):
    """Two cameras (two clips, camera-like: 10 fps, looped, until SIGTERM) on two workers with joins on: one
    `cnnvideo local-worker` joins the cluster, not one camera: each camera's master (its own join port, the first
    camera's cluster.join and the next) takes it in as w2 and sends it frames. Then SIGTERM: both cameras complete
    every frame they sent, in order, exact against the unsplit model, none sent again."""
    from cnnvideo.video.frames import synthetic_frames, write_video

    other = write_video(str(tmp_path / "yard.avi"), synthetic_frames(40, (96, 128), seed=7))
    join = "127.0.0.1:%d" % free_port()
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=0, in_flight=3, scheduler="replicas",
                       trainer={"frames": 8}, source={"realtime": True, "fps": FPS, "drop": "none", "loop": True},
                       reliability={"restart": True, "max_restarts": 10, "retries": 3, "peer_wait_s": 60.0},
                       cluster={"workers": ["127.0.0.1:50060", "127.0.0.1:50061"], "join": join}, bandwidth=[3])
    del data["video"]
    data["cameras"] = {"door": {"video": synthetic_video}, "yard": {"video": other}}
    out = str(tmp_path / "cams")
    run = LocalRun(write_config(str(tmp_path / "cams.yml"), data), out)
    joiner = None
    try:
        run.wait_for(lambda: run.count("sent frame 41/") >= 2, 300)  # (each camera's master)
        joiner = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local-worker", out], stdout=subprocess.DEVNULL,
                                  stderr=open(str(tmp_path / "local-worker.log"), "w"), env=env(), cwd=REPO)
        run.wait_for(lambda: run.count("joined the pool (") >= 2, 300)
        time.sleep(3.0)  # frames reach the joined worker on both cameras
        code, _, text = run.stop(300)
    finally:
        run.close([joiner])
    assert code == 0, text[-4000:]
    for camera in ("door", "yard"):
        with open(os.path.join(out, camera, "report.json")) as fh:
            report = json.load(fh)
        assert report["completed"] == report["frames"] > 0 and report["lost"] == 0, (camera, text[-3000:])
        assert report["retried"] == 0 and report["max_abs_err"] == 0.0, camera
        lines = _lines(os.path.join(out, camera))
        assert [e["frame"] for e in lines] == list(range(report["completed"])), camera
        assert any(e["route"][0] == 2 for e in lines), "camera %s sent the joined worker no frame" % camera
    said = "".join(_read(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".log"))
    assert said.count("as w2 (run") == 2 and "camera door)" in said and "camera yard)" in said, said[-2000:]


def _classes(namespace: str) -> str:
    return subprocess.run(["ip", "netns", "exec", namespace, "tc", "-s", "class", "show", "dev", "lo"],
                          capture_output=True, text=True, check=True).stdout


def _class_of(listing: str, minor: str) -> str:
    """The lines of htb class 1:<minor> in a `tc -s class show` listing ('' if it has none)."""
    blocks = listing.split("class htb ")
    return next((b for b in blocks if b.startswith("1:%s " % minor)), "")


def test_a_local_worker_joins_a_tc_cluster_and_its_hop_is_shaped(tmp_path, synthetic_video):
    """`cnnvideo local-worker` under `local.links: tc`: the cluster runs in a network namespace of its own, and the
    worker added to it runs inside that namespace with the hop into its port shaped like the others' (an htb class
    at the config's rate, 1 MB/s here). It joins as w1 and gets frames; the bytes its class carried are at least the
    input deltas the master sent it (results.jsonl), so its traffic went through the shaped class; SIGTERM to the
    local-worker: it leaves, and its class is removed. Every frame completes exactly, none sent again."""
    from cnnvideo.tools import linkemu

    if not linkemu.netns_possible()[0]:
        pytest.skip("tc in a network namespace is not possible here: %s" % linkemu.netns_possible()[1])
    join = "127.0.0.1:%d" % free_port()
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=0, in_flight=3, scheduler="replicas",
                       trainer={"frames": 8}, source={"realtime": True, "fps": FPS, "drop": "none", "loop": True},
                       reliability={"restart": True, "max_restarts": 10, "retries": 3, "peer_wait_s": 60.0},
                       cluster={"workers": ["127.0.0.1:50060"], "join": join}, bandwidth=[1.0],
                       local={"links": "tc"})
    out = str(tmp_path / "tc")
    run = LocalRun(write_config(str(tmp_path / "tc.yml"), data), out)
    joiner = None
    try:
        run.wait_for(lambda: run.sent >= 20, 300)
        namespace = _read(os.path.join(out, linkemu.NETNS_FILE)).strip()
        before = set(re.findall(r"class htb 1:([0-9a-f]+) ", _classes(namespace)))
        joiner = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local-worker", out], stdout=subprocess.DEVNULL,
                                  stderr=open(str(tmp_path / "local-worker.log"), "w"), env=env(), cwd=REPO)
        run.wait_for(lambda: run.count("joined the pool (") >= 1, 300)
        added = set(re.findall(r"class htb 1:([0-9a-f]+) ", _classes(namespace))) - before
        assert len(added) == 1, _classes(namespace)
        minor = added.pop()
        start = run.sent
        run.wait_for(lambda: run.sent >= start + 40, 300)  # frames go to the joined worker too
        upto = run.sent - 3  # frames whose input (3 in flight) had gone out when the class is read
        shaped = _class_of(_classes(namespace), minor)
        assert "rate 8Mbit ceil 8Mbit" in shaped, shaped
        joiner.send_signal(signal.SIGTERM)  # it drains and leaves; its class goes
        assert joiner.wait(120) == 0, _read(str(tmp_path / "local-worker.log"))[-3000:]
        run.wait_for(lambda: run.count("left the pool") >= 1, 120)
        assert _class_of(_classes(namespace), minor) == "", _classes(namespace)
        code, report, text = run.stop(300)
    finally:
        run.close([joiner])
    assert code == 0, text[-4000:]
    assert report["link_emulation"] == "tc"
    assert report["completed"] == report["frames"] > 0 and report["lost"] == 0 and report["max_abs_err"] == 0.0
    assert report["retried"] == 0, text[-3000:]
    lines = _lines(out)
    assert [e["frame"] for e in lines] == list(range(report["completed"]))
    to_joiner = [e for e in lines if e["route"][0] == 1]
    assert to_joiner, "the joined worker got no frame"
    carried = int(re.search(r"Sent (\d+) bytes", shaped).group(1))
    sent = sum(e["bytes"]["m->w1"] for e in to_joiner if e["frame"] < upto)
    print("the joined worker's class carried %d bytes; the master had sent it %d bytes of input" % (carried, sent))
    assert carried >= sent > 0, (carried, sent)
    assert "its hop shaped by tc at 1 MB/s" in _read(str(tmp_path / "local-worker.log"))


def test_a_pool_whose_every_worker_left_waits_for_a_join_and_goes_on(tmp_path, synthetic_video):
    """A pool that takes joins, scaled down to nothing and up again: its one worker is sent SIGTERM mid-run (a
    camera-like run, 10 fps, looped): it drains and leaves, and the master says that new frames wait for workers to
    join (no resync, no failure); while none is there no frame goes out. A worker then joins: the pool re-plans onto
    it and frames flow again. After SIGTERM every frame completes, in order, exact, none sent again."""
    join = "127.0.0.1:%d" % free_port()
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=0, in_flight=3, scheduler="replicas",
                       trainer={"frames": 8}, source={"realtime": True, "fps": FPS, "drop": "none", "loop": True},
                       reliability={"restart": True, "max_restarts": 10, "retries": 3, "peer_wait_s": 30.0},
                       cluster={"workers": ["127.0.0.1:50060"], "join": join}, bandwidth=[3])
    out = str(tmp_path / "empty")
    run = LocalRun(write_config(str(tmp_path / "empty.yml"), data), out)
    joiner = None
    try:
        run.wait_for(lambda: run.sent >= 30, 300)
        os.kill(run.pids["w0"], signal.SIGTERM)  # its frames finish, then it leaves: the pool has no worker
        run.wait_for(lambda: run.count("new frames wait for workers to join on %s" % join) >= 1, 120)
        time.sleep(1.0)
        idle_from = run.sent
        time.sleep(max(40.0 / FPS, 3.0))  # 40 frames' time: none of them goes out
        assert run.sent == idle_from, "".join(run.lines[-20:])
        joiner = _worker(os.path.join(out, "config.yml"), join, str(tmp_path / "w1.log"))
        run.wait_for(lambda: run.count("joined the pool (") >= 1, 300)
        run.wait_for(lambda: run.sent >= idle_from + 30, 300)
        code, report, text = run.stop(300)
    finally:
        run.close([joiner])
    said = ("leaving", "left the pool", "re-planned", "wait for workers", "joined the pool", "built on")
    print("".join(ln for ln in text.splitlines(True) if any(k in ln for k in said)))
    assert code == 0, text[-4000:]
    assert report["completed"] == report["frames"] > 60 and report["lost"] == 0 and report["max_abs_err"] == 0.0
    assert report["retried"] == 0 and report["reliability"]["resyncs"] == 0, text[-4000:]
    assert "left the pool after" in text and "re-planned for the 0 workers in the pool (without w0)" in text
    events = report["pool"]["left_out"]
    assert [e["scope"] for e in events if e.get("scope") in ("left", "joined")] == ["left", "joined"], events
    lines = _lines(out)
    assert [e["frame"] for e in lines] == list(range(report["completed"]))
    first = min(e["frame"] for e in lines if e["route"][0] == 1)
    assert all(e["route"][0] == 0 for e in lines[:first]) and all(e["route"][0] == 1 for e in lines[first:])
