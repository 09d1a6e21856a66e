"""A pool made only of workers that join (`cluster.join`, no `cluster.workers`), in real processes over real gRPC:
the master waits, saying so, until `--min-workers` have joined, then runs every frame through them exact; stopped
while it waits it exits with one line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from cnnvideo.rpc.net import free_port
from tests.integration.helpers import REPO, base_config, env, stop_procs, write_config

TOKEN = "join-token-0123456789abcdef"


def _start(args, log_path: str) -> subprocess.Popen:
    e = env()
    e.pop("CNNVIDEO_JOIN_TOKEN", None)
    return subprocess.Popen([sys.executable, "-m", "cnnvideo"] + args, stdout=subprocess.DEVNULL,
                            stderr=open(log_path, "w"), env=e, cwd=REPO)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _wait_for(what: str, predicate, timeout: float, procs=()) -> None:
    deadline = time.time() + timeout
    while not predicate():
        dead = [p for p in procs if p.poll() is not None]
        assert not dead, "%s: a process exited (%s) first" % (what, [p.args[3:5] for p in dead])
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.3)


def _config(tmp_path, synthetic_video, frames: int) -> str:
    join = "127.0.0.1:%d" % free_port()
    data = base_config(synthetic_video, str(tmp_path / "cache"), frames=frames, scheduler="replicas",
                       trainer={"frames": 8},
                       cluster={"trainer": "127.0.0.1:%d" % free_port(), "workers": [], "join": join,
                                "join_token": TOKEN, "min_workers": 2})
    return write_config(str(tmp_path / "pool.yml"), data)


def test_the_master_waits_for_joining_workers_then_runs_exact(tmp_path, synthetic_video):
    """Master and trainer up, no worker: the master says it waits (0 of 2). One worker joins (listening on every
    interface: it gives the address on its route to the master): still waiting, 1 of 2. The second joins: the run
    starts with both as w0 and w1 (ids from the order they joined), and every frame completes in order, exact
    against the unsplit model, none lost, on both workers."""
    cfg = _config(tmp_path, synthetic_video, frames=24)
    out = str(tmp_path / "out")
    logs = {n: str(tmp_path / ("%s.log" % n)) for n in ("trainer", "master", "a", "b")}
    procs = [_start(["trainer", "-c", cfg], logs["trainer"]),
             _start(["master", "-c", cfg, "--out", out], logs["master"])]
    try:
        _wait_for("the master waiting", lambda: "0 of 2 joined" in _read(logs["master"]), 120, procs)
        procs.append(_start(["worker", "-c", cfg, "--join", _join(cfg), "--listen", "0.0.0.0:%d" % free_port()],
                            logs["a"]))
        _wait_for("the first join", lambda: "1 of 2 workers" in _read(logs["master"]), 180, procs)
        time.sleep(1.0)
        assert "run started" not in _read(logs["master"]).lower()
        procs.append(_start(["worker", "-c", cfg, "--join", _join(cfg), "--listen", "127.0.0.1:%d" % free_port()],
                            logs["b"]))
        code = procs[1].wait(600)
    finally:
        stop_procs(procs)
    text = _read(logs["master"])
    assert code == 0, text[-4000:]
    with open(os.path.join(out, "report.json")) as fh:
        report = json.load(fh)
    assert report["completed"] == report["frames"] == 24 and report["lost"] == 0, text[-3000:]
    assert report["max_abs_err"] == 0.0
    assert len(report["workers"]) == 2 and all(a.startswith("127.0.0.1:") for a in report["workers"])
    with open(os.path.join(out, "results.jsonl")) as fh:
        lines = [json.loads(line) for line in fh]
    assert [e["frame"] for e in lines] == list(range(24))
    assert {e["route"][0] for e in lines} == {0, 1}, "both joined workers serve"
    assert "joined the pool of the master at %s as w0" % _join(cfg) in _read(logs["a"])
    assert "as w1" in _read(logs["b"])


def test_a_master_stopped_while_waiting_for_workers_says_so(tmp_path, synthetic_video):
    """No worker ever joins: the master keeps waiting; SIGTERM ends it with exit 1 and one line naming the wait."""
    cfg = _config(tmp_path, synthetic_video, frames=8)
    log = str(tmp_path / "master.log")
    master = _start(["master", "-c", cfg, "--out", str(tmp_path / "out"), "--min-workers", "3"], log)
    try:
        _wait_for("the master waiting", lambda: "0 of 3 joined" in _read(log), 120, [master])
        master.send_signal(signal.SIGTERM)
        code = master.wait(60)
    finally:
        stop_procs([master])
    assert code == 1
    assert "stopped while waiting for workers to join (3 needed)" in _read(log)


def _join(cfg_path: str) -> str:
    import yaml

    with open(cfg_path) as fh:
        return yaml.safe_load(fh)["cluster"]["join"]
