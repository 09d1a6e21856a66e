"""A pool of workers in real processes (`cnnvideo local`): full replication and a hybrid over real gRPC, with every
frame exact against the unsplit model, results in frame order, and a replica SIGKILLed mid-run."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.integration.helpers import LocalRun, base_config, run_local, write_config

FRAMES = 800  # 40 s at 20 fps
THREE = ["127.0.0.1:50060", "127.0.0.1:50061", "127.0.0.1:50062"]  # `cnnvideo local` gives each a free port


def _lines(out):
    with open(os.path.join(out, "results.jsonl")) as fh:
        return [json.loads(line) for line in fh]


def test_replicas_and_a_hybrid_run_every_frame_exactly_in_frame_order(tmp_path, synthetic_video):
    """Three workers: `replicas` (the whole model on each) and a fixed hybrid (stage 0 on w0 and w1, stage 1 on w2).
    Every frame completes with max abs error 0 against the unsplit model, every worker of a stage gets frames,
    results.jsonl lists the frames in order with each frame's route and the bytes of each link it crossed."""
    cache = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache, frames=24, in_flight=4, scheduler="replicas", trainer={"frames": 8},
                       cluster={"workers": THREE}, bandwidth=[3])
    proc, report, out = run_local(tmp_path, data, name="replicas")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == 24 and report["max_abs_err"] == 0.0
    assert report["pool"]["shape"] == "replicas"
    assert all(n > 0 for n in report["pool"]["results_per_worker"].values())
    lines = _lines(out)
    assert [e["frame"] for e in lines] == list(range(24))
    assert {e["route"][0] for e in lines} == {0, 1, 2}
    for e in lines:
        w = e["route"][0]
        assert set(e["bytes"]) == {"m->w%d" % w, "w%d->m" % w}

    data.update(scheduler="fixed", scheduler_options={"cuts": [0, 9, 23], "groups": [[0, 1], [2]]})
    proc, report, out = run_local(tmp_path, data, name="hybrid")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["completed"] == 24 and report["max_abs_err"] == 0.0
    assert report["pool"]["shape"] == "hybrid" and report["pool"]["groups"] == [[0, 1], [2]]
    lines = _lines(out)
    assert [e["frame"] for e in lines] == list(range(24))
    assert {tuple(e["route"]) for e in lines} == {(0, 2), (1, 2)}
    assert all("w%d->w2" % e["route"][0] in e["bytes"] for e in lines)


def test_a_replica_killed_mid_run_is_left_out_then_taken_back(tmp_path, synthetic_video):
    """Full replication on three workers; w1 is SIGKILLed mid-run. The run goes on without it (no frame lost, all
    exact), and once the supervisor has restarted it the master takes it back and sends it frames again. Leaving it
    out and taking it back touch w1's links alone: no new generation, and the other replicas' input links never
    start over (one keyframe each, the first), while w1's starts over once (two keyframes)."""
    cache = str(tmp_path / "cache")
    # a camera's pace (20 fps, nothing dropped) keeps the run going while the supervisor restarts the worker
    data = base_config(synthetic_video, cache, frames=FRAMES, in_flight=3, scheduler="replicas", trainer={"frames": 8},
                       source={"realtime": True, "fps": 20, "drop": "none"},
                       limits={"worker_down_s": 5},
                       reliability={"restart": True, "max_restarts": 10, "retries": 20, "peer_wait_s": 60.0},
                       cluster={"workers": THREE}, bandwidth=[3])
    cfg_path = write_config(str(tmp_path / "kill.yml"), data)
    run = LocalRun(cfg_path, str(tmp_path / "kill"))
    run.wait_for(lambda: run.sent >= 60, 300)
    os.kill(run.pids["w1"], signal.SIGKILL)
    t_kill = time.time()
    code, report, text = run.finish(600)
    assert code == 0, text[-4000:]
    assert report["completed"] == FRAMES and report["lost"] == 0 and report["max_abs_err"] == 0.0
    events = report["pool"]["left_out"]
    assert any(1 in e["left_out"] for e in events), events
    assert any(1 in e["back"] for e in events), events
    rel = report["reliability"]
    assert rel["resyncs"] == 0 and rel["generation"] == 0 and rel["replica_resyncs"] >= 1, rel
    keyframes = {h["name"]: h["keyframes"] for h in report["hops"]}
    assert keyframes["m->w0"] == 1 and keyframes["m->w2"] == 1 and keyframes["m->w1"] >= 2, keyframes
    lines = _lines(str(tmp_path / "kill"))
    assert [e["frame"] for e in lines] == list(range(FRAMES))
    assert any(e["route"][0] == 1 for e in lines[-100:]), "w1 got no frame after it came back"
    assert time.time() > t_kill


HYBRID_FRAMES = 720  # 36 s at 20 fps: a restart and take-back took 19 s on the loaded CI host; it must be back early


@pytest.mark.parametrize("groups,killed,untouched", [
    ([[0, 1], [2]], 1, ["m->w0", "w0->w2", "w2->m"]),  # a replica of the first stage
    ([[0], [1, 2]], 1, ["m->w0", "w0->w2", "w2->m"]),  # a replica of the last stage
], ids=["stage0", "stage1"])
def test_a_hybrid_replica_killed_mid_run_is_resynced_alone(tmp_path, synthetic_video, groups, killed, untouched):
    """A hybrid on three workers (two stages, one of them on two replicas); a replica is SIGKILLed mid-run. Every
    stage keeps a replica, so the master leaves it out alone: no new generation (no global resync), its frames go
    again on routes without it, every frame completes once, exactly and in frame order, and the links that do not
    touch it keep their references (one keyframe each, the first), while its own links start over when the
    supervisor's restart is taken back, after which it gets frames again. The per-frame overhead is measured from
    every worker's process CPU across the kill (the restarted one starts its count again) and stored for the next
    run (cnnvideo.plan.overhead)."""
    cache = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache, frames=HYBRID_FRAMES, in_flight=3, scheduler="fixed",
                       scheduler_options={"cuts": [0, 9, 23], "groups": groups}, trainer={"frames": 8},
                       source={"realtime": True, "fps": 20, "drop": "none"},
                       limits={"worker_down_s": 5},
                       reliability={"restart": True, "max_restarts": 10, "retries": 20, "peer_wait_s": 60.0},
                       cluster={"workers": THREE}, bandwidth=[3])
    cfg_path = write_config(str(tmp_path / "hybrid-kill.yml"), data)
    run = LocalRun(cfg_path, str(tmp_path / "hybrid-kill"))
    run.wait_for(lambda: run.sent >= 40, 300)
    os.kill(run.pids["w%d" % killed], signal.SIGKILL)
    code, report, text = run.finish(600)
    assert code == 0, text[-4000:]
    assert report["completed"] == HYBRID_FRAMES and report["lost"] == 0 and report["max_abs_err"] == 0.0
    rel = report["reliability"]
    assert rel["resyncs"] == 0 and rel["generation"] == 0 and rel["replica_resyncs"] >= 1, rel
    events = report["pool"]["left_out"]
    assert any(killed in e["left_out"] and e.get("scope") == "replica" for e in events), events
    assert any(killed in e["back"] and e.get("scope") == "replica" for e in events), events
    keyframes = {h["name"]: h["keyframes"] for h in report["hops"]}
    assert all(keyframes[name] == 1 for name in untouched), keyframes
    own = [name for name in keyframes if "w%d" % killed in name]
    assert own and all(keyframes[name] >= 2 for name in own), keyframes
    lines = _lines(str(tmp_path / "hybrid-kill"))
    assert [e["frame"] for e in lines] == list(range(HYBRID_FRAMES))
    assert any(killed in e["route"] for e in lines[-60:]), "w%d got no frame after it came back" % killed
    over = report["overhead"]
    assert set(over["workers"]) == {"w0", "w1", "w2"} and not over["used"], over
    key, device = over["stored"]  # the figures of this device at this cap, and the device's for any other cap
    assert key.startswith(device + "/"), over
    assert all(o["cpu_per_frame_ms"] > 0 and o["stage_cpu_ms"] > 0 for o in over["workers"].values()), over


LEAVE_FRAMES = 300  # 15 s at 20 fps


def test_a_replica_sent_sigterm_finishes_its_frames_and_leaves(tmp_path, synthetic_video):
    """Full replication on three workers; w1 gets SIGTERM mid-run (as `docker compose stop` sends). It tells the
    master it is leaving: the master routes it no new frame, waits for the frames already routed through it, then
    leaves it out and ends its run, and w1 exits 0 (the supervisor does not restart a role that left). No frame is
    sent again, none is lost, every one is exact, and the frames after the leave all go to w0 and w2."""
    cache = str(tmp_path / "cache")
    data = base_config(synthetic_video, cache, frames=LEAVE_FRAMES, in_flight=3, scheduler="replicas",
                       trainer={"frames": 8}, source={"realtime": True, "fps": 20, "drop": "none"},
                       reliability={"restart": True, "max_restarts": 10, "retries": 3, "peer_wait_s": 60.0},
                       cluster={"workers": THREE}, bandwidth=[3])
    run = LocalRun(write_config(str(tmp_path / "leave.yml"), data), str(tmp_path / "leave"))
    run.wait_for(lambda: run.sent >= 60, 300)
    os.kill(run.pids["w1"], signal.SIGTERM)
    run.wait_for(lambda: run.count("left the pool after"), 120)
    code, report, text = run.finish(600)
    assert code == 0, text[-4000:]
    assert report["completed"] == LEAVE_FRAMES and report["lost"] == 0 and report["max_abs_err"] == 0.0
    assert report["retried"] == 0, text[-4000:]  # nothing was sent again
    rel = report["reliability"]
    assert rel["resyncs"] == 0 and rel["generation"] == 0, rel
    events = report["pool"]["left_out"]
    assert [e["left_out"] for e in events if e.get("scope") == "left"] == [[1]], events
    assert "every run ended by its master" in text, text[-4000:]  # w1's own line
    assert "is leaving: no new frames go to it" in text and "its frames finished, none is sent again" in text
    assert "w1 exited" not in text, text[-4000:]  # it left: the supervisor does not restart it
    lines = _lines(str(tmp_path / "leave"))
    assert [e["frame"] for e in lines] == list(range(LEAVE_FRAMES))
    assert all(e["route"][0] != 1 for e in lines[-60:]), "w1 still got frames after it left"
    assert any(e["route"][0] == 1 for e in lines[:60])
