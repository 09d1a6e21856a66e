"""Reliability with real processes: workers SIGKILLed mid-run are restarted by `cnnvideo local`, the master
resyncs every hop with keyframes and re-sends the frames in flight; every frame ends exactly once."""
from __future__ import annotations

import os
import signal
import time

import pytest

from .helpers import LocalRun, base_config, write_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def test_worker1_killed_three_times_run_completes_exactly(tmp_path, synthetic_video, cache_dir):
    data = base_config(synthetic_video, cache_dir, frame_size=[64, 96], frames=200, in_flight=3, scheduler="lbs",
                       reliability={"restart": True, "max_restarts": 5, "retries": 3, "peer_wait_s": 120.0})
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
