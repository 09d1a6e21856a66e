"""A camera whose stream goes away mid-run, beside another one (issue 35): two real MJPEG streams served by ffmpeg
(`-listen 1`, real time, looping), vtest.avi as `door` and megamind.avi as `yard`, on one pool. First `yard` runs
alone; then both run, and door's stream server is stopped mid-run and started again on the same port a while later.
Prints JSON: yard's fps alone and while door was down (and their ratio), door's outage as its report counts it,
whether door came back with keyframes on its input links, and each camera's frames completed / lost / skipped.

Usage: python tools/probes/camera_outage.py [--workers 4] [--frames 390] [--fps 25] [--down-s 10] [--out DIR]
Setting: person detector (trained person-ssdlite), ORT int8, 480x720, caps 0.1 per worker, tc 3 MB/s into each
worker, 6 in flight per camera, input threshold 4, the optimal scheduler, equal weights, `source.reopen_s` 60.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stream:
    """ffmpeg serving `video` as MJPEG over HTTP at `fps` to one client, looping; stop() and start() again keep the
    URL (the camera going away and coming back)."""

    def __init__(self, video: str, fps: float) -> None:
        self.port = free_port()
        self.url = "http://127.0.0.1:%d/cam.mjpg" % self.port
        self.argv = ["ffmpeg", "-nostdin", "-loglevel", "error", "-re", "-stream_loop", "-1", "-i", video, "-an",
                     "-vf", "scale=720:480", "-c:v", "mjpeg", "-q:v", "3", "-r", "%g" % fps, "-f", "mpjpeg",
                     "-listen", "1", self.url]
        self.proc = None

    def start(self) -> "Stream":
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(1.0)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def base(args) -> dict:
    return {
        "cluster": {"workers": ["127.0.0.1:%d" % (50360 + i) for i in range(args.workers)]},
        "model": "person-ssdlite", "engine": "onnxruntime", "precision": "int8", "int8": {"calibration_start": 400},
        "frame_size": [480, 720], "mode": "delta", "delta": {"input_threshold": 4}, "seed": 0,
        "frames": args.frames, "in_flight": 6, "scheduler": "optimal", "check": True, "check_share": 0.2,
        "trainer": {"frames": 30, "video": os.path.join(REPO, "media", "vtest.avi")},
        "source": {"mode": "live", "realtime": True, "drop": "oldest", "reopen_s": 60.0},
        "bandwidth": [3.0], "cpus": {"workers": args.caps},
    }


def launch(cfg: dict, out: str):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "probe.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    log = open(os.path.join(out, "probe.log"), "w")
    proc = subprocess.Popen([sys.executable, "-m", "cnnvideo", "local", "-c", path, "--out", out], cwd=REPO,
                            stdout=log, stderr=subprocess.PIPE, universal_newlines=True)
    lines = []

    def pump():
        for line in proc.stderr:
            log.write(line)
            lines.append(line)

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return proc, lines, t


def result_times(path: str):
    with open(path) as fh:
        return sorted(json.loads(x)["result_time"] for x in fh)


def rate(times, lo: float, hi: float) -> float:
    return sum(lo <= t < hi for t in times) / (hi - lo) if hi > lo else 0.0


def figures(report: dict) -> dict:
    src = report.get("source") or {}
    return {"fps": report.get("throughput_fps"), "completed": report.get("completed"), "frames": report.get("frames"),
            "lost": report.get("lost"), "skipped": report.get("skipped"), "outages": src.get("outages"),
            "outage_s": src.get("outage_s"), "missed_frames": src.get("missed_frames"),
            "f1": (report.get("detection_agreement") or {}).get("f1"),
            "input_keyframes": {h["name"]: h["keyframes"] for h in report.get("hops") or []
                                if h["name"].startswith("m->")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--frames", type=int, default=390)
    ap.add_argument("--fps", type=float, default=25.0)
    ap.add_argument("--caps", type=float, default=0.1)
    ap.add_argument("--down-s", type=float, default=10.0)
    ap.add_argument("--out", default=os.path.join(REPO, "out", "camera-outage"))
    args = ap.parse_args()
    if shutil.which("ffmpeg") is None:
        print("camera_outage: ffmpeg is not installed (apt-get install ffmpeg)", file=sys.stderr)
        return 2
    door = Stream(os.path.join(REPO, "media", "vtest.avi"), args.fps)
    yard = Stream(os.path.join(REPO, "media", "megamind.avi"), args.fps)
    try:
        yard.start()
        alone_out = os.path.join(args.out, "alone")
        proc, _, t = launch(dict(base(args), video=yard.url), alone_out)
        proc.wait()
        t.join(5)
        yard.stop()
        with open(os.path.join(alone_out, "report.json")) as fh:
            alone = json.load(fh)
        alone_times = result_times(os.path.join(alone_out, "results.jsonl"))

        door.start()
        yard.start()
        pair_out = os.path.join(args.out, "pair")
        proc, lines, t = launch(dict(base(args), cameras={"door": {"video": door.url}, "yard": {"video": yard.url}}),
                                pair_out)
        t_down = t_up = None
        while proc.poll() is None:
            sent = sum("[master-door]" in ln and "sent frame " in ln for ln in lines)
            if t_down is None and sent >= 10:  # door's master logs every 10th frame: ~100 frames in
                door.stop()
                t_down = time.time()
            elif t_down is not None and t_up is None and time.time() - t_down >= args.down_s:
                door.start()
                t_up = time.time()
            time.sleep(0.2)
        t.join(5)
    finally:
        door.stop()
        yard.stop()
    with open(os.path.join(pair_out, "report.json")) as fh:
        pair = json.load(fh)
    reports = {}
    for name in ("door", "yard"):
        with open(os.path.join(pair_out, name, "report.json")) as fh:
            reports[name] = json.load(fh)
    yard_times = result_times(os.path.join(pair_out, "yard", "results.jsonl"))
    came_back = sum("came back after an outage" in ln for ln in lines if ln.startswith("[master-door]"))
    alone_fps = rate(alone_times, alone_times[min(30, len(alone_times) - 1)], alone_times[-1])
    yard_down = rate(yard_times, t_down + 2.0, t_up) if t_down and t_up else None  # door's share gone after ~2 s
    out = {
        "setting": "person-ssdlite ORT int8, 480x720, %d workers at caps %.2f, tc 3 MB/s per link, 6 in flight per "
                   "camera, input threshold 4, optimal; ffmpeg MJPEG streams at %g fps (door vtest, yard megamind), "
                   "%d frames a camera; door's server stopped for %.0f s" % (args.workers, args.caps, args.fps,
                                                                           args.frames, args.down_s),
        "yard_alone": dict(figures(alone), fps_window=round(alone_fps, 2)),
        "pair": {name: figures(r) for name, r in reports.items()},
        "pair_status": {n: c["status"] for n, c in pair["cameras"].items()},
        "yard_fps_while_door_down": round(yard_down, 2) if yard_down is not None else None,
        "yard_down_over_alone": round(yard_down / alone_fps, 3) if yard_down and alone_fps else None,
        "door_keyframe_log_lines": came_back,
    }
    print(json.dumps(out, indent=1))
    return 0 if all(s == "completed" for s in out["pair_status"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
