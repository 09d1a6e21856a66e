"""`cnnvideo bench soak`: a long `cnnvideo local` run; each process's peak RSS at frame N and at the end.

Samples /proc/<pid>/status (VmHWM = peak resident set, VmRSS) of every role the launcher starts, twice a
second, and prints whether each peak at the end stays within 10% of its peak at `--at` frames.
With `--realtime`, the video (vtest.avi by default) plays as if live, looped, `frames: 0`, for `--seconds`; the
first peak is taken `--warmup-s` after the first frame was sent, and the run ends with SIGTERM (the master
drains and reports).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict

import yaml

from cnnvideo.results import report as rpt
from cnnvideo.video.frames import synthetic_frames, write_video


def _status_kb(pid: int) -> Dict[str, int]:
    out = {}
    try:
        with open("/proc/%d/status" % pid) as fh:
            for line in fh:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def run(args) -> int:
    work = args.out or tempfile.mkdtemp(prefix="cnnvideo-soak-")
    os.makedirs(work, exist_ok=True)
    h, w = args.frame_size
    realtime = bool(getattr(args, "realtime", False))
    if realtime:
        video = os.path.abspath(args.video or os.path.join("media", "vtest.avi"))
    else:
        video = write_video(os.path.join(work, "soak.avi"), synthetic_frames(50, (h, w), seed=3))
    cfg = {
        "model": args.model, "weights": "random", "video": video, "frame_size": [h, w], "mode": "delta",
        "check": not args.no_check, "frames": args.frames, "in_flight": args.in_flight, "scheduler": "lbs",
        "profile_iters": 1, "trainer": {"frames": 20}, "cache_dir": os.path.join(work, "cache"),
        "limits": {"worker_down_s": 30.0},
    }
    if realtime:
        cfg.update({"frames": 0, "source": {"realtime": True, "loop": True}, "check_share": args.check_share,
                    "trainer": {"frames": 20}})
    cfg_path = os.path.join(work, "soak.yml")
    with open(cfg_path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", cfg_path, "--out",
                             os.path.join(work, "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    pids: Dict[str, int] = {}
    state = {"sent": 0, "first_sent_at": 0.0}
    at: Dict[str, Dict[str, int]] = {}
    last: Dict[str, Dict[str, int]] = {}
    peak_rss: Dict[str, int] = {}
    lock = threading.Lock()
    done = threading.Event()

    def pump() -> None:
        for line in proc.stderr:
            with lock:
                if line.startswith("[local] started"):
                    parts = line.split()
                    pids[parts[2]] = int(parts[4])
                elif "[master]" in line and "sent frame " in line:
                    state["sent"] = max(state["sent"], int(line.split("sent frame ")[1].split("/")[0]))
                    state["first_sent_at"] = state["first_sent_at"] or time.time()
            if args.verbose_children:
                sys.stderr.write(line)

    def sample() -> None:
        while not done.is_set():
            with lock:
                items = list(pids.items())
                sent = state["sent"]
                first = state["first_sent_at"]
            if realtime:
                sent = args.at if first and time.time() - first >= args.warmup_s else 0
                if first and time.time() - first >= args.seconds and proc.poll() is None and not state.get("term"):
                    state["term"] = time.time()
                    proc.send_signal(signal.SIGTERM)  # the launcher lets the master drain and report
            for name, pid in items:
                st = _status_kb(pid)
                if "VmHWM" in st:  # keep the highest peak seen (a process tearing down reports less)
                    if st["VmHWM"] >= last.get(name, {}).get("VmHWM", 0):
                        last[name] = st
                    peak_rss[name] = max(peak_rss.get(name, 0), st.get("VmRSS", 0))
                    if sent >= args.at and name not in at:
                        at[name] = dict(st)
            time.sleep(0.5)

    threads = [threading.Thread(target=pump, daemon=True), threading.Thread(target=sample, daemon=True)]
    for t in threads:
        t.start()
    stdout = proc.stdout.read()
    code = proc.wait()
    done.set()
    for t in threads:
        t.join(5)

    path = os.path.join(work, "out", "report.json")
    report = rpt.read(path) if os.path.isfile(path) else {}
    roles = {}
    first_key = "peak_rss_kB_after_warmup" if realtime else "peak_rss_kB_at_frame_%d" % args.at
    for name in sorted(last):
        a = at.get(name, {}).get("VmHWM")
        b = last[name].get("VmHWM")
        growth = None if not a else (b - a) / float(a)
        roles[name] = {first_key: a, "peak_rss_kB_end": b,
                       "growth_pct": None if growth is None else round(100 * growth, 2),
                       "within_10pct": None if growth is None else growth <= 0.10,
                       "max_sampled_rss_kB": peak_rss.get(name)}
    result = {
        "frames": report.get("frames") if realtime else args.frames, "model": args.model,
        "realtime": realtime, "video": video if realtime else "synthetic",
        "seconds": args.seconds if realtime else None, "warmup_s": args.warmup_s if realtime else None,
        "source": report.get("source"), "capture_latency_s": report.get("capture_latency_s"),
        "processed_fps": report.get("processed_fps"), "check": report.get("check"),
        "frame_size": [h, w], "in_flight": args.in_flight,
        "exit_code": code, "wall_s": round(time.time() - t0, 1),
        "completed": report.get("completed"), "lost": report.get("lost"), "dropped": report.get("dropped"),
        "throughput_fps": report.get("throughput_fps"), "max_abs_err": report.get("max_abs_err"),
        "processes": roles, "all_within_10pct": bool(roles) and all(r["within_10pct"] for r in roles.values()),
        "work_dir": work,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(stdout)
        for name, r in roles.items():
            print("%-8s peak RSS %s kB at frame %d, %s kB at the end (%s%%)" % (
                name, r[first_key], args.at, r["peak_rss_kB_end"], r["growth_pct"]))
    return 0 if code == 0 and result["all_within_10pct"] else 1
