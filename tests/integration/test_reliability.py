"""Reliability with real processes: workers SIGKILLed mid-run are restarted by `cnnvideo local`, the master
resyncs every hop with keyframes and re-sends the frames in flight; every frame ends exactly once."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from .helpers import REPO, base_config, env, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


class LocalRun:
    """`cnnvideo local` in the background with its stderr followed: child pids, frames sent, resyncs."""

    def __init__(self, cfg_path: str, out: str) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", cfg_path, "--out", out],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO)
        self.lines = []
        self.pids = {}
        self.sent = 0
        self.resyncs = 0
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()
        self.out_thread = threading.Thread(target=lambda: setattr(self, "stdout", self.proc.stdout.read()),
                                           daemon=True)
        self.out_thread.start()

    def _pump(self) -> None:
        for line in self.proc.stderr:
            with self.cond:
                self.lines.append(line)
                if line.startswith("[local] started"):
                    parts = line.split()
                    self.pids[parts[2]] = int(parts[4])
                if "[master]" in line and "sent frame " in line:
                    self.sent = max(self.sent, int(line.split("sent frame ")[1].split("/")[0]))
                if "[master]" in line and "resynchronised at generation" in line:
                    self.resyncs += 1
                self.cond.notify_all()

    def wait_for(self, predicate, timeout: float) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: predicate() or self.proc.poll() is not None, timeout), \
                "".join(self.lines[-40:])
            assert self.proc.poll() is None, "".join(self.lines[-40:])

    def finish(self, timeout: float):
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(5)
        self.out_thread.join(5)
        import json

        path = os.path.join(self.out, "report.json")
        report = json.load(open(path)) if os.path.isfile(path) else None
        return code, report, "".join(self.lines)


def test_worker1_killed_three_times_run_completes_exactly(tmp_path, synthetic_video, cache_dir):
    data = base_config(synthetic_video, cache_dir, frame_size=[64, 96], frames=200, in_flight=3, scheduler="lbs",
                       reliability={"restart": True, "max_restarts": 5, "retries": 3, "reconnect_s": 120.0})
    run = LocalRun(write_config(str(tmp_path / "r.yml"), data), str(tmp_path / "r"))
    for k, at in enumerate((31, 91, 151)):
        run.wait_for(lambda at=at, k=k: run.sent >= at and run.resyncs >= k, 600)
        pid = run.pids["w1"]
        os.kill(pid, signal.SIGKILL)
        run.wait_for(lambda pid=pid: run.pids["w1"] != pid, 120)  # the launcher restarted it
    code, report, text = run.finish(600)
    assert code == 0, text[-4000:]
    assert report["frames"] == 200 and report["completed"] == 200 and report["lost"] == 0, text[-3000:]
    assert report["restarts"] == 3 and report["dropped"] == 0
    assert report["reliability"]["worker_restarts"] == {"w0": 0, "w1": 3}
    assert report["supervisor_restarts"] == {"w1": 3}
    assert report["retried"] >= 1
    assert report["max_abs_err"] is not None and report["max_abs_err"] <= 1e-4
    frames = [p["frame"] for p in report["per_frame"]]
    assert sorted(frames) == list(range(200))  # each frame once
    assert all(p["status"] == "completed" for p in report["per_frame"])
    assert "reliability" in run.stdout and "restarts 3" in run.stdout


def test_no_restart_worker_killed_stops_with_one_line(tmp_path, synthetic_video, cache_dir):
    """reliability.restart false: the old behaviour (stop within 15 s, one line naming the worker)."""
    data = base_config(synthetic_video, cache_dir, frame_size=[64, 96], frames=5000, in_flight=2, scheduler="lbs",
                       check=False, reliability={"restart": False})
    run = LocalRun(write_config(str(tmp_path / "n.yml"), data), str(tmp_path / "n"))
    run.wait_for(lambda: run.sent >= 31, 600)
    os.kill(run.pids["w1"], signal.SIGKILL)
    killed = time.time()
    code, report, text = run.finish(60)
    assert code != 0 and time.time() - killed <= 15
    errors = [ln for ln in text.splitlines() if "cnnvideo master: error:" in ln]
    assert len(errors) == 1 and "w1" in errors[0] and "down" in errors[0], text[-3000:]
    assert "restarting" not in text
