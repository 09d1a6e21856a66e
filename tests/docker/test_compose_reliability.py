"""Worker crashes in the compose cluster: worker1 dies twice mid-run, comes back, and the run ends exact.

Fault 1 is a crash: SIGKILL to every process in worker1's container but its init, so the init exits 137 and
compose's `restart: on-failure` brings the container back (docker's restart manager, no help from the test).
Fault 2 is `docker kill worker1`. The engine (checked on 20.10) records that as a manual stop, which no
restart policy undoes (not on-failure, not unless-stopped, not always), so the test plays the operator
and `docker start`s it. Either way the master waits (reliability.peer_wait_s) for the new instance, resyncs
every hop with keyframes and re-sends the frames in flight.

The cluster runs detached and the test waits for the master: `up --exit-code-from master` implies
--abort-on-container-exit, which tears everything down at the first worker exit, restarting or not.
"""
import json
import re
import subprocess
import threading
import time

import pytest
from dockerutil import REPO, ComposeRun, docker, joined_workers, up_build

pytestmark = pytest.mark.docker
FRAMES = 80
KILL_AT = (21, 41)  # "sent frame N/80" lines of the master (logged for frames 1, 11, 21, ...)
# How long the master waits for worker1 to serve again. Alone, docker restarts it within a second and it serves in
# 4 s. In one CI run, beside the other tiers, the engine took 134 s: the new container's veth sat on the bridge,
# not yet moved into its namespace, for 100 s (dockerd and kernel logs). 120 s then failed a run that would have
# completed; the test is about recovery, not about how fast a busy engine restarts a container.
PEER_WAIT_S = 420.0


class MasterLog:
    """`docker logs -f` of the master container, followed: highest frame sent, resyncs seen."""

    def __init__(self, container: str) -> None:
        self.proc = subprocess.Popen(["docker", "logs", "-f", container], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, universal_newlines=True)
        self.lines = []
        self.sent = 0
        self.resyncs = 0
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            with self.cond:
                self.lines.append(line)
                m = re.search(r"sent frame (\d+)/", line)
                if m:
                    self.sent = max(self.sent, int(m.group(1)))
                if "resynchronised at generation" in line:
                    self.resyncs += 1
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, predicate, timeout: float, peer: str = "") -> None:
        """Wait for predicate over the log; on failure show the master's log and, when named, the peer's."""
        with self.cond:
            ok = self.cond.wait_for(lambda: predicate() or self.proc.poll() is not None, timeout)
            if ok and predicate():
                return
            tail = "".join(self.lines[-40:])
        raise AssertionError("master log so far:\n" + tail + (_peer_state(peer) if peer else ""))

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(10)
        self.thread.join(5)
        return "".join(self.lines)


def _peer_state(container: str) -> str:
    """The peer's docker state and the tail of its log (all its instances), for a failure message."""
    state = docker("inspect", "-f", "{{json .State}} restarts={{.RestartCount}}", container, check=False)
    proc = subprocess.run(["docker", "logs", "-t", "--tail", "60", container], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    return "\n%s: %s\n%s log tail:\n%s" % (container, state.strip(), container, proc.stdout)


def _restart_count(container: str) -> int:
    return int(docker("inspect", "-f", "{{.RestartCount}}", container).strip())


def _running(container: str) -> bool:
    return docker("inspect", "-f", "{{.State.Running}}", container).strip() == "true"


def test_worker1_killed_twice_compose_restarts_it_and_the_run_completes(wheels_present, tmp_path):
    """report.json: completed == frames, lost 0, restarts >= 2, max_abs_err <= 1e-4; worker1 restarted by docker."""
    run = ComposeRun(tmp_path, "cnnvideo-kill", "reliability.yml", FRAMES, frame_size=[120, 160], in_flight=2,
                     group_size=5, trainer={"frames": 20},
                     reliability={"restart": True, "retries": 3, "peer_wait_s": PEER_WAIT_S})
    project, out, env, compose = run.project, run.out, run.env, run.compose
    log = None
    t0 = time.time()
    try:
        proc = subprocess.run(compose + ["up", *up_build(), "-d"], cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-5000:]
        t_up = time.time() - t0
        names = {"master": "%s-master-1" % project}
        log = MasterLog(names["master"])
        log.wait_for(lambda: "2 of 2 workers" in "".join(log.lines), 900)  # the pool's workers join
        worker1 = names["worker1"] = joined_workers(project, "".join(log.lines))["worker1"]

        # fault 1: worker1 crashes (SIGKILL to all its processes but docker-init, which then exits 137)
        log.wait_for(lambda: log.sent >= KILL_AT[0], 900)  # generous: CI runs the integration tier beside it
        docker("exec", worker1, "sh", "-c", "kill -KILL -1")
        t_kill1 = time.time()
        log.wait_for(lambda: log.resyncs >= 1, 600, worker1)
        crash_recovery = time.time() - t_kill1
        restarted_by_docker = _restart_count(worker1)  # `docker start` below resets the count
        assert restarted_by_docker >= 1, "on-failure did not restart worker1 after a crash"

        # fault 2: `docker kill` (a manual stop: no policy restarts it), then the operator starts it again
        log.wait_for(lambda: log.sent >= KILL_AT[1], 900)
        docker("kill", worker1, timeout=PEER_WAIT_S)
        t_kill2 = time.time()
        docker("wait", worker1, timeout=PEER_WAIT_S)  # stopped; then, had a policy restarted it, it would run by now
        time.sleep(3)
        assert not _running(worker1), "docker restarted a container stopped by `docker kill`"
        docker("start", worker1, timeout=PEER_WAIT_S)  # a busy engine can take minutes (above)
        log.wait_for(lambda: log.resyncs >= 2, 600, worker1)
        kill_recovery = time.time() - t_kill2

        code = docker("wait", names["master"], timeout=600).strip()
        text = log.stop()
        assert code == "0", "master exited %s:\n%s" % (code, text[-5000:])
        report = json.loads((out / "report.json").read_text())
        assert report["frames"] == FRAMES and report["completed"] == FRAMES, text[-3000:]
        assert report["lost"] == 0 and report["dropped"] == 0
        assert report["restarts"] >= 2, report["reliability"]
        by_worker = report["reliability"]["worker_restarts"]
        assert by_worker["w1"] >= 2 and by_worker["w0"] == 0, by_worker
        assert report["max_abs_err"] is not None and report["max_abs_err"] <= 1e-4
        frames = sorted(p["frame"] for p in report["per_frame"])
        assert frames == list(range(FRAMES))  # each frame once
        print("\ncompose kills: up %.0f s; crash -> resynced in %.1f s (docker RestartCount %d), docker kill + start "
              "-> resynced in %.1f s; %d/%d frames, lost %d, retried %d, restarts %d, resyncs %d, max_abs_err %.2g, "
              "run %.1f s, total %.0f s" % (t_up, crash_recovery, restarted_by_docker, kill_recovery,
                                            report["completed"], report["frames"], report["lost"],
                                            report["retried"], report["restarts"],
                                            report["reliability"]["resyncs"], report["max_abs_err"],
                                            report["wall_s"], time.time() - t0))
    finally:
        if log is not None:
            log.stop()
        subprocess.run(compose + ["down", "-v", "--timeout", "5"], cwd=str(REPO), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
