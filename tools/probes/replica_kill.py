"""A replica killed mid-run (issue 37): one `cnnvideo local` run of full replication on N workers, one replica
SIGKILLed once `--kill-at` frames were sent; the supervisor restarts it and the master takes it back. Prints JSON:
the pool's fps before the kill, while the replica was out (kill -> taken back) and after, their ratios, how many
frames the replica got after its return, and the run's completed / lost / dropped frames, resyncs and agreement.

Usage: python tools/probes/replica_kill.py [--workers 4] [--frames 400] [--kill-at 120] [--victim w1]
       [--precision int8|fp32] [--out DIR]
Setting (the issue's): person detector (trained person-ssdlite), ORT int8 (or fp32), vtest.avi at 480x720, caps
0.1 per worker, tc 3 MB/s into each worker, 6 in flight, input threshold 4, a fifth of the frames checked.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(args) -> dict:
    return {
        "cluster": {"workers": ["127.0.0.1:%d" % (50160 + i) for i in range(args.workers)]},
        "model": "person-ssdlite", "engine": "onnxruntime", "precision": args.precision,
        "int8": {"calibration_start": 400},
        "video": os.path.join(REPO, "media", "vtest.avi"), "frame_size": [480, 720], "source": {"mode": "offline"},
        "mode": "delta", "delta": {"input_threshold": 4}, "seed": 0, "frames": args.frames, "in_flight": 6,
        "scheduler": "replicas", "check": True, "check_share": 0.2, "trainer": {"frames": 30},
        "bandwidth": [3.0], "cpus": {"workers": args.caps},
        "limits": {"worker_down_s": 5},
        "reliability": {"restart": True, "max_restarts": 5, "retries": 5, "peer_wait_s": 120.0},
    }


def rate(times, lo: float, hi: float) -> float:
    """Results a second with result_time in [lo, hi)."""
    n = sum(lo <= t < hi for t in times)
    return n / (hi - lo) if hi > lo else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--kill-at", type=int, default=120)
    ap.add_argument("--victim", default="w1")
    ap.add_argument("--caps", type=float, default=0.1)
    ap.add_argument("--precision", default="int8", help="int8 calibrates on frames 400 on: a run of more frames "
                    "(to see the replica come back: a restart under a 0.1 cap takes tens of seconds) needs fp32")
    ap.add_argument("--out", default=os.path.join(REPO, "out", "replica-kill"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cfg_path = os.path.join(args.out, "replica-kill.yml")
    with open(cfg_path, "w") as fh:
        yaml.safe_dump(config(args), fh)
    proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", cfg_path, "--out", args.out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    state = {"pids": {}, "sent": 0, "t_kill": None, "t_back": None, "killed": None}
    log = open(os.path.join(args.out, "replica-kill.log"), "w")

    def follow():
        for line in proc.stderr:
            log.write(line)
            if line.startswith("[local] started"):
                parts = line.split()
                state["pids"][parts[2]] = int(parts[4])
            elif "[master]" in line and "sent frame " in line:
                state["sent"] = max(state["sent"], int(line.split("sent frame ")[1].split("/")[0]))
            elif "[master]" in line and "taken back" in line and state["t_kill"] and not state["t_back"]:
                state["t_back"] = time.time()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    while proc.poll() is None and state["t_kill"] is None:
        if state["sent"] >= args.kill_at and args.victim in state["pids"]:
            os.kill(state["pids"][args.victim], signal.SIGKILL)
            state["t_kill"] = time.time()
        time.sleep(0.05)
    code = proc.wait()
    reader.join(5)
    log.close()
    with open(os.path.join(args.out, "report.json")) as fh:
        report = json.load(fh)
    with open(os.path.join(args.out, "results.jsonl")) as fh:
        lines = [json.loads(x) for x in fh]
    times = sorted(e["result_time"] for e in lines if e.get("result_time"))
    t_kill, t_back = state["t_kill"], state["t_back"]
    victim = int(args.victim[1:])
    out = {
        "setting": "person-ssdlite ORT %s, vtest 480x720 (looping), %d workers at caps %.2f, tc 3 MB/s per link, "
                   "6 in flight, input threshold 4, full replication; %s SIGKILLed after %d frames sent"
                   % (args.precision, args.workers, args.caps, args.victim, args.kill_at),
        "exit_code": code,
        "frames": report.get("frames"), "completed": report.get("completed"), "lost": report.get("lost"),
        "dropped": report.get("dropped"), "retried": report.get("retried"),
        "resyncs": report["reliability"]["resyncs"], "replica_resyncs": report["reliability"].get("replica_resyncs"),
        "left_out": report["pool"]["left_out"], "f1": (report.get("detection_agreement") or {}).get("f1"),
    }
    if t_kill and t_back and times:
        warm = times[min(30, len(times) - 1)]  # past the first results (stages warming, keyframes)
        out["out_s"] = round(t_back - t_kill, 2)
        out["fps_before"] = round(rate(times, warm, t_kill), 2)
        out["fps_out"] = round(rate(times, t_kill, t_back), 2)
        out["fps_after"] = round(rate(times, t_back + 1.0, times[-1]), 2)
        out["ratio_out"] = round(out["fps_out"] / out["fps_before"], 3) if out["fps_before"] else None
        out["ratio_after"] = round(out["fps_after"] / out["fps_before"], 3) if out["fps_before"] else None
        out["victim_frames_after_back"] = sum(1 for e in lines if (e.get("route") or [None])[0] == victim
                                              and e.get("result_time", 0) > t_back)
    print(json.dumps(out, indent=1))
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
