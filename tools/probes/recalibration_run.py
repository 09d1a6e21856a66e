"""A camera that calibrates int8 at dusk and then sees daylight, run through `cnnvideo local`: how soon the master
finds the calibration stale, how long calibrating again takes, and whether the boxes agree again after the switch
(docs/results/recalibration). The clip: vtest.avi at 240x320, its first 60 frames at a quarter of their light, then
240 frames as they are, played as a looping camera at 10 fps; person-ssdlite int8, 2 workers (`replicas`, uncapped,
unshaped), every frame checked against the unsplit fp32 model.

Usage: python tools/probes/recalibration_run.py [--out out/recalibration] [--frames 450]
Prints one JSON line: the run's int8_calibration (with `refreshed`), detection_agreement, reliability, frames."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import yaml

from cnnvideo.video.frames import read_frames, write_video

SIZE = (240, 320)
DARK, DAY = 60, 240


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/recalibration")
    ap.add_argument("--frames", type=int, default=450)
    ap.add_argument("--video", default="media/vtest.avi")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    frames = list(read_frames(args.video, SIZE, limit=DARK + DAY, loop=False))
    dark = [(f.astype(np.float32) * 0.25).astype(np.uint8) for f in frames[:DARK]]
    clip = write_video(os.path.join(args.out, "dusk.avi"), iter(dark + frames[DARK:]))
    cfg = {"model": "person-ssdlite", "engine": "onnxruntime", "precision": "int8", "video": clip,
           "frame_size": list(SIZE), "mode": "delta", "check": True, "frames": args.frames, "in_flight": 4,
           "scheduler": "replicas", "profile_iters": 1, "bandwidth": [3.0, 3.0], "trainer": {"frames": 8},
           "cache_dir": os.path.join(args.out, "cache"), "source": {"realtime": True, "fps": 10, "loop": True},
           "local": {"links": "none", "cpus": "none"},
           "int8": {"calibration": "camera", "calibration_frames": 8, "calibration_stride": 2,
                    "recalibrate_below": 0.8, "recalibrate_window": 24}}
    path = os.path.join(args.out, "dusk.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    run = os.path.join(args.out, "run")
    proc = subprocess.run([sys.executable, "-m", "cnnvideo", "local", "-c", path, "--out", run],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return proc.returncode
    with open(os.path.join(run, "report.json")) as fh:
        report = json.load(fh)
    cal = {k: v for k, v in report["int8_calibration"].items() if k not in ("frame_times_s", "quantized_cuts")}
    print(json.dumps({"int8_calibration": cal, "detection_agreement": report["detection_agreement"],
                      "reliability": report["reliability"], "frames": report["frames"],
                      "completed": report["completed"], "lost": report["lost"],
                      "throughput_fps": report["throughput_fps"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
