"""A network fault on the compose cluster: the worker0 <-> worker1 hop is blackholed for 20 s mid-run, then
restored. Nothing crashes: the hop's TCP connection stalls, gRPC keepalive gives up on it, worker0 keeps
trying the forward with backoff on fresh channels (up to reliability.reconnect_s), and the run completes with
every frame, none lost or dropped, results exact.

The blackhole is a `blackhole` route to the peer's address in each container's network namespace (entered
with nsenter from the host, as the netem helper does), so packets between the two vanish both ways while
both containers stay healthy and keep talking to the master.
"""
import json
import os
import subprocess
import time
import uuid

import pytest
import yaml
from dockerutil import REPO, docker
from test_compose_reliability import MasterLog

pytestmark = pytest.mark.docker
FRAMES = 120
CUT_AT = 21  # "sent frame N/FRAMES" line of the master
CUT_S = 20.0


def _pid(container: str) -> int:
    return int(docker("inspect", "-f", "{{.State.Pid}}", container).strip())


def _ip(container: str) -> str:
    return docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", container).strip()


def _route(container: str, action: str, peer_ip: str) -> None:
    argv = ["nsenter", "-t", str(_pid(container)), "-n", "ip", "route", action, "blackhole", peer_ip + "/32"]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=30)
    assert proc.returncode == 0, "%s: %s" % (" ".join(argv), proc.stdout)


def test_hop_blackholed_for_20_s_run_completes_nothing_lost(wheels_present, tmp_path):
    project = "cnnvideo-hole-%s" % uuid.uuid4().hex[:8]
    configs = tmp_path / "configs"
    configs.mkdir()
    configs.chmod(0o755)  # the roles run as uid 10001
    cfg = yaml.safe_load((REPO / "configs" / "compose.yml").read_text())
    cfg.update(frames=FRAMES, frame_size=[120, 160], in_flight=2, group_size=5, scheduler="lbs",
               trainer={"frames": 20}, reliability={"restart": True, "retries": 3, "reconnect_s": 120.0})
    (configs / "hole.yml").write_text(yaml.safe_dump(cfg))
    override = tmp_path / "override.yml"
    mount = {"volumes": ["%s:/app/configs:ro" % configs]}
    override.write_text(yaml.safe_dump({"services": {s: mount for s in ("trainer", "worker0", "worker1",
                                                                          "master")}}))
    out = tmp_path / "out"
    env = dict(os.environ, OUT_DIR=str(out), FRAMES=str(FRAMES), CONFIG="hole.yml", COMPOSE_PROJECT_NAME=project)
    compose = ["docker", "compose", "-p", project, "-f", str(REPO / "docker-compose.yml"), "-f", str(override)]
    log = None
    cut = []
    t0 = time.time()
    try:
        proc = subprocess.run(compose + ["up", "--build", "-d"], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-5000:]
        t_up = time.time() - t0
        names = {s: "%s-%s-1" % (project, s) for s in ("master", "worker0", "worker1")}
        ips = {s: _ip(names[s]) for s in ("worker0", "worker1")}
        log = MasterLog(names["master"])
        log.wait_for(lambda: log.sent >= CUT_AT, 300)
        for me, peer in (("worker0", "worker1"), ("worker1", "worker0")):
            _route(names[me], "add", ips[peer])
            cut.append((me, peer))
        t_cut = time.time()
        sent_at_cut = log.sent
        time.sleep(CUT_S)
        sent_during = log.sent - sent_at_cut  # frames the master could still push into worker0's queue
        for me, peer in cut:
            _route(names[me], "del", ips[peer])
        cut = []
        t_restore = time.time()
        log.wait_for(lambda: log.sent >= min(sent_at_cut + 20, FRAMES), 300)
        resumed_s = time.time() - t_restore

        code = docker("wait", names["master"], timeout=900).strip()
        text = log.stop()
        assert code == "0", "master exited %s:\n%s" % (code, text[-5000:])
        report = json.loads((out / "report.json").read_text())
        assert report["frames"] == FRAMES and report["completed"] == FRAMES, text[-3000:]
        assert report["lost"] == 0 and report["dropped"] == 0
        assert report["max_abs_err"] == 0.0
        assert sorted(p["frame"] for p in report["per_frame"]) == list(range(FRAMES))
        assert report["reliability"]["worker_restarts"] == {"w0": 0, "w1": 0}  # a network fault, no crash
        print("\ncompose blackhole w0<->w1 for %.0f s: up %.0f s; %d frames sent during the cut; progress again "
              "%.1f s after the restore; %d/%d frames, lost %d, dropped %d, retried %d, resyncs %d, max_abs_err %s, "
              "run %.1f s, total %.0f s" % (t_restore - t_cut, t_up, sent_during, resumed_s, report["completed"],
                                            report["frames"], report["lost"], report["dropped"], report["retried"],
                                            report["reliability"]["resyncs"], report["max_abs_err"],
                                            report["wall_s"], time.time() - t0))
    finally:
        for me, peer in cut:
            try:
                _route(names[me], "del", ips[peer])
            except AssertionError:
                pass
        if log is not None:
            log.stop()
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
