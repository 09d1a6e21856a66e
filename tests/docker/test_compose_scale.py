"""The compose pool grows and shrinks while a run goes on, by compose's own commands (issue 45): a camera-like run
(a looped clip at 8 fps until the master is stopped) starts on 2 workers; `docker compose up -d --scale worker=4
--no-recreate` adds two containers, which join the running pool (as w2 and w3, shaped by the netem helper as they
appear) and get frames; `--scale worker=3 --no-recreate` then stops one (SIGTERM: it drains its frames and leaves).
Stopped with SIGTERM, the master drains and reports: every frame sent completed in order, exact against the
unsplit model, none lost or sent again."""
import json
import re
import subprocess

import pytest
from dockerutil import REPO, ComposeRun, docker, shaped_peers, up_build
from test_compose_reliability import MasterLog

pytestmark = pytest.mark.docker


def _compose(run, env, *args, timeout=900):
    proc = subprocess.run(run.compose + list(args), cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-5000:]
    return proc.stdout


def test_scale_up_then_down_while_the_run_goes_on(wheels_present, tmp_path):
    run = ComposeRun(tmp_path, "cnnvideo-scale", "scale.yml", 0, scheduler="replicas", model="alexnet",
                     weights="random", frame_size=[96, 128], trainer={"frames": 16}, fallback=[], in_flight=4,
                     source={"realtime": True, "fps": 8, "drop": "none", "loop": True},
                     reliability={"restart": True, "max_restarts": 10, "retries": 3, "peer_wait_s": 120.0})
    env = dict(run.env, WORKERS="2", WORKER_CPUS="0.3")
    log = None
    try:
        _compose(run, env, "up", *up_build(), "-d", timeout=1800)
        master = "%s-master-1" % run.project
        log = MasterLog(master)
        log.wait_for(lambda: log.sent >= 21, 900)
        _compose(run, env, "up", "-d", "--scale", "worker=4", "--no-recreate")
        text = lambda: "".join(log.lines)  # noqa: E731
        log.wait_for(lambda: len(re.findall(r"w[23] at \S+ joined the pool", text())) == 2, 600)
        joined_at = log.sent
        log.wait_for(lambda: log.sent >= joined_at + 60, 600)  # frames flow over four workers
        _compose(run, env, "up", "-d", "--scale", "worker=3", "--no-recreate")  # compose stops worker-4
        log.wait_for(lambda: "left the pool after" in text(), 300)
        left_at = log.sent
        log.wait_for(lambda: log.sent >= left_at + 24, 300)  # and on over three
        docker("kill", "-s", "TERM", master)  # the master takes no new frame, drains and reports
        code = docker("wait", master, timeout=600).strip()
        netem = subprocess.run(["docker", "logs", "%s-netem-1" % run.project], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True, timeout=60).stdout
    finally:
        master_log = log.stop() if log is not None else ""
        subprocess.run(run.compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    assert code == "0", master_log[-5000:]
    report = json.loads((run.out / "report.json").read_text())
    assert report["completed"] == report["frames"] > left_at and report["lost"] == 0, master_log[-3000:]
    assert report["retried"] == 0 and report["max_abs_err"] == 0.0, master_log[-3000:]
    events = report["pool"]["left_out"]
    assert [e["joined"] for e in events if e.get("scope") == "joined"] == [[2], [3]], events
    assert [e["left_out"] for e in events if e.get("scope") == "left"] != [], events
    assert "none is sent again" in master_log
    lines = [json.loads(line) for line in (run.out / "results.jsonl").read_text().splitlines()]
    assert [e["frame"] for e in lines] == list(range(report["completed"]))
    served = {w: sum(e["route"][0] == w for e in lines) for w in range(4)}
    assert all(served[w] > 0 for w in (2, 3)), served
    # the helper shaped the new containers as they appeared, and the master's egress to them
    seen = shaped_peers(netem)
    assert any({"worker-3", "worker-4"} <= set(peers) for peers in seen.get("master-1", [])), seen.get("master-1")
    assert "worker-4 appeared" in netem and "worker-4 went away" in netem, netem[-3000:]
    print("\ncompose scale 2 -> 4 -> 3: %d frames, served per worker %s, events %s"
          % (report["completed"], served, [(e.get("scope"), e.get("joined") or e.get("left_out")) for e in events]))
