"""`cnnvideo bench churn`: workers joining and leaving a running pool, one event every few seconds (issue 45).

One `cnnvideo local` run of the config (with `cluster.join` set) plays its frames; meanwhile `--cycles` times a
`cnnvideo local-worker` joins (the master's "joined the pool" line), serves for `--serve-s` seconds, and is sent SIGTERM
(it drains and leaves: the master's "left the pool" line). Prints, as JSON: every frame completed, none lost, how many
were sent again, the largest error against the unsplit model (exact: 0), and each join and leave with its time.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List

import yaml

from .join import Joiner, LocalCluster, _report, write_join_config


def run(args) -> int:
    with open(args.config) as fh:
        cfg = yaml.safe_load(fh)
    work = os.path.abspath(args.out)
    os.makedirs(work, exist_ok=True)
    path, _ = write_join_config(work, "churn", cfg)
    out = os.path.join(work, "churn")
    run_ = LocalCluster(path, out)
    events: List[Dict[str, Any]] = []
    t0 = time.time()

    def count(text: str) -> int:
        return sum(text in ln for ln in list(run_.lines))

    def wait(text: str, n: int, timeout: float) -> bool:
        deadline = time.time() + timeout
        while count(text) < n:
            if run_.proc.poll() is not None or time.time() > deadline:
                return False
            time.sleep(0.1)
        return True

    run_.wait_sent(args.start_at, args.timeout)
    for i in range(args.cycles):
        j = Joiner(out)
        if not wait("joined the pool (", i + 1, 120):
            j.stop()
            break
        events.append({"event": "join", "port": j.port, "at_s": round(time.time() - t0, 2)})
        time.sleep(args.serve_s)
        j.proc.terminate()  # SIGTERM: it drains its frames and leaves
        left = wait("left the pool after", i + 1, 120)
        j.stop()
        if not left:
            break
        events.append({"event": "leave", "port": j.port, "at_s": round(time.time() - t0, 2)})
    code = run_.wait(args.timeout)
    rep = _report(out)
    results = {"config": args.config, "cycles_asked": args.cycles, "events": events, "exit": code,
               "frames": rep["frames"], "completed": rep["completed"], "lost": rep["lost"],
               "retried": rep["retried"], "max_abs_err": rep.get("max_abs_err"), "resyncs":
               rep["reliability"].get("resyncs"), "throughput_fps": rep["throughput_fps"],
               "frames_sent_per_worker": rep["pool"].get("frames_sent_per_worker"),
               "pool_events": rep["pool"].get("left_out")}
    text = json.dumps(results, indent=1)
    with open(os.path.join(work, "churn.json"), "w") as fh:
        fh.write(text + "\n")
    print(text)
    return 0 if code == 0 else 1
