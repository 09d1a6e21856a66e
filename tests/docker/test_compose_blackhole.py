"""A network fault on the compose cluster: the worker0 <-> worker1 hop is blackholed for 20 s mid-run, then
restored. Nothing crashes: the hop's connection stalls (gRPC keepalive notices, worker0's forward fails with
UNAVAILABLE and is tried again with backoff on fresh channels, up to reliability.peer_wait_s), and once the
route is back the run completes with every frame, none lost or dropped, results exact.

The blackhole is a `blackhole` route to the peer's address in each container's network namespace (entered
with nsenter from the host, as the netem helper does), so packets between the two vanish both ways while
both containers stay healthy and keep talking to the master. The test checks that it really cut the hop: the
bytes worker0 sends to worker1 (the netem helper's htb class for that peer, read with `tc -s`) grow before
the cut, stay flat for the whole 20 s, and grow again after the restore.
"""
import json
import re
import subprocess
import threading
import time

import pytest
from dockerutil import REPO, ComposeRun, docker, joined_workers, up_build
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


def _ns(container_pid: int, *argv: str) -> str:
    return subprocess.run(["nsenter", "-t", str(container_pid), "-n"] + list(argv), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=30, check=True).stdout


def sent_to(container_pid: int, peer_ip: str) -> int:
    """Bytes that left the namespace for `peer_ip`: the htb class its u32 filter (match <hex ip>/ffffffff at 16,
    the destination address) points to. ValueError when no filter names the peer (the helper has not shaped it)."""
    want = "".join("%02x" % int(b) for b in peer_ip.split("."))
    flowid = None
    for line in _ns(container_pid, "tc", "filter", "show", "dev", "eth0").splitlines():
        m = re.search(r"flowid (\S+)", line)
        if m:
            flowid = m.group(1)
        m = re.search(r"match ([0-9a-f]{8})/ffffffff at 16", line)
        if m and m.group(1) == want and flowid:
            break
    else:
        raise ValueError("no tc filter for %s in namespace of pid %d" % (peer_ip, container_pid))
    out = _ns(container_pid, "tc", "-s", "class", "show", "dev", "eth0", "classid", flowid)
    return int(re.search(r"Sent (\d+) bytes", out).group(1))


class HopBytes:
    """Samples sent_to(pid, peer) every `period` s in a thread: [(time, bytes)]."""

    def __init__(self, pid: int, peer_ip: str, period: float = 0.5) -> None:
        self.pid, self.peer_ip, self.period = pid, peer_ip, period
        self.samples = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                self.samples.append((time.time(), sent_to(self.pid, self.peer_ip)))
            except (subprocess.SubprocessError, ValueError):
                pass  # not shaped yet, or the container is gone at the end
            self.done.wait(self.period)

    def now(self) -> int:
        return sent_to(self.pid, self.peer_ip)

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)

    def longest_flat_s(self) -> float:
        """Longest stretch between two samples with no byte sent in between."""
        best, start = 0.0, None
        for (t0, b0), (t1, b1) in zip(self.samples, self.samples[1:]):
            if b1 == b0:
                start = t0 if start is None else start
                best = max(best, t1 - start)
            else:
                start = None
        return best


def test_hop_blackholed_for_20_s_run_completes_nothing_lost(wheels_present, tmp_path):
    run = ComposeRun(tmp_path, "cnnvideo-hole", "hole.yml", FRAMES, frame_size=[120, 160], in_flight=2,
                     group_size=5, scheduler="lbs", trainer={"frames": 20},
                     reliability={"restart": True, "retries": 3, "peer_wait_s": 120.0})
    project, out, env, compose = run.project, run.out, run.env, run.compose
    log = hop = None
    cut = []
    t0 = time.time()
    try:
        proc = subprocess.run(compose + ["up", *up_build(), "-d"], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-5000:]
        t_up = time.time() - t0
        names = {"master": "%s-master-1" % project}
        log = MasterLog(names["master"])
        log.wait_for(lambda: "2 of 2 workers" in "".join(log.lines), 900)  # the pool's workers join
        names.update(joined_workers(project, "".join(log.lines)))
        ips = {s: _ip(names[s]) for s in ("worker0", "worker1")}
        hop = HopBytes(_pid(names["worker0"]), ips["worker1"])
        log.wait_for(lambda: log.sent >= CUT_AT, 900)  # generous: CI runs the integration tier beside it
        before = hop.now()
        assert before > 0, "no bytes on the w0->w1 hop before the cut (the netem helper shapes it)"
        for me, peer in (("worker0", "worker1"), ("worker1", "worker0")):
            _route(names[me], "add", ips[peer])
            cut.append((me, peer))
        t_cut = time.time()
        sent_at_cut = log.sent
        time.sleep(1.0)  # what htb had queued before the route went leaves now
        flat_from = hop.now()
        time.sleep(CUT_S - 1.0)
        flat_to = hop.now()
        sent_during = log.sent - sent_at_cut  # frames the master could still push into worker0's queue
        for me, peer in cut:
            _route(names[me], "del", ips[peer])
        cut = []
        t_restore = time.time()
        assert flat_to == flat_from, "%d bytes crossed the blackholed hop" % (flat_to - flat_from)
        log.wait_for(lambda: log.sent >= min(sent_at_cut + 20, FRAMES), 900)
        resumed_s = time.time() - t_restore
        after = hop.now()
        assert after > flat_to, "no bytes on the w0->w1 hop after the restore"

        code = docker("wait", names["master"], timeout=900).strip()
        text = log.stop()
        assert code == "0", "master exited %s:\n%s" % (code, text[-5000:])
        report = json.loads((out / "report.json").read_text())
        assert report["frames"] == FRAMES and report["completed"] == FRAMES, text[-3000:]
        assert report["lost"] == 0 and report["dropped"] == 0
        assert report["max_abs_err"] <= 1e-4  # the detector on ORT: float rounding at some cuts
        assert sorted(p["frame"] for p in report["per_frame"]) == list(range(FRAMES))
        assert report["reliability"]["worker_restarts"] == {"w0": 0, "w1": 0}  # a network fault, no crash
        hop.stop()
        flat_s = hop.longest_flat_s()
        assert CUT_S - 1.5 <= flat_s, "the hop carried bytes during the cut (longest flat %.1f s)" % flat_s
        w0 = subprocess.run(["docker", "logs", names["worker0"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, timeout=60).stdout
        retries = len(re.findall(r"cannot forward frame \d+ to worker w1 .*trying again", w0))
        print("\ncompose blackhole w0<->w1 for %.0f s: up %.0f s; w0->w1 bytes %d before the cut, flat for %.1f s "
              "(sampled every 0.5 s), %d after; w0 forward retries %d; %d frames sent by the master during the cut; "
              "progress again %.1f s after the restore; %d/%d frames, lost %d, dropped %d, retried %d, resyncs %d, "
              "max_abs_err %s, run %.1f s, total %.0f s"
              % (t_restore - t_cut, t_up, before, flat_s, after, retries, sent_during, resumed_s,
                 report["completed"], report["frames"], report["lost"], report["dropped"], report["retried"],
                 report["reliability"]["resyncs"], report["max_abs_err"], report["wall_s"], time.time() - t0))
    finally:
        for me, peer in cut:
            try:
                _route(names[me], "del", ips[peer])
            except AssertionError:
                pass
        if hop is not None:
            hop.stop()
        if log is not None:
            log.stop()
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
