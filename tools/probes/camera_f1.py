"""Each camera's boxes on a shared pool against its own unsplit run (issue 35), side by side in one invocation:
`cnnvideo local` runs vtest.avi (`door`) and megamind.avi (`yard`) as two cameras, offline (every frame taken, so
every run sees the same frames), every frame checked on the camera's master against the unsplit fp32 model:

  fp32-pool   ORT fp32, lossless deltas, 4 replicas (the issue's "F1 1.0 on fp32")
  int8-pool   ORT int8, input threshold 4, 4 replicas
  int8-edge   ORT int8, input threshold 4, `edge`: one device runs the int8 model whole (what int8-pool must match)
  int8-pool-lossless, int8-edge-lossless   the same two, lossless deltas

Prints JSON: per run and camera, frames completed / lost, detection F1, precision, recall and the max abs error
of the outputs against the unsplit model.

Usage: python tools/probes/camera_f1.py [--frames 120] [--workers 4] [--out DIR]
Setting: person detector (trained person-ssdlite), 480x720, no caps and no link shaping (agreement does not depend
on them), 6 frames in flight per camera.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from two_cameras import REPO, run  # noqa: E402

RUNS = {
    "fp32-pool": {"precision": "fp32", "delta": {"input_threshold": 0}, "scheduler": "replicas"},
    "int8-pool": {"precision": "int8", "delta": {"input_threshold": 4}, "scheduler": "replicas"},
    "int8-edge": {"precision": "int8", "delta": {"input_threshold": 4}, "scheduler": "edge"},
    "int8-pool-lossless": {"precision": "int8", "delta": {"input_threshold": 0}, "scheduler": "replicas"},
    "int8-edge-lossless": {"precision": "int8", "delta": {"input_threshold": 0}, "scheduler": "edge"},
}


def config(args, over: dict) -> dict:
    vtest, other = (os.path.join(REPO, "media", n) for n in ("vtest.avi", "megamind.avi"))
    cfg = {
        "cluster": {"workers": ["127.0.0.1:%d" % (50280 + i) for i in range(args.workers)]},
        "model": "person-ssdlite", "engine": "onnxruntime", "int8": {"calibration_start": 400},
        "frame_size": [480, 720], "mode": "delta", "seed": 0, "frames": args.frames, "in_flight": 6,
        "check": True, "check_share": 1.0, "bandwidth": [3.0],
        "trainer": {"frames": 30, "video": vtest},
        "source": {"mode": "offline"}, "local": {"links": "none", "cpus": "none"},
        "cameras": {"door": {"video": vtest}, "yard": {"video": other}},
    }
    cfg.update(over)
    return cfg


def figures(report: dict) -> dict:
    det = report.get("detection_agreement") or {}
    return {"completed": report.get("completed"), "frames": report.get("frames"), "lost": report.get("lost"),
            "f1": det.get("f1"), "precision": det.get("precision"), "recall": det.get("recall"),
            "checked": (report.get("check") or {}).get("checked"), "max_abs_err": report.get("max_abs_err"),
            "plan": (report.get("pool") or {}).get("shape") or report.get("cuts")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--frames", type=int, default=120)
    ap.add_argument("--out", default=os.path.join(REPO, "out", "camera-f1"))
    args = ap.parse_args()
    out = {"setting": "person-ssdlite ORT, 480x720, 2 cameras (vtest, megamind) offline, %d frames each, every "
                      "frame checked against the unsplit fp32 model, %d workers, no caps, no shaping, 6 in flight"
                      % (args.frames, args.workers)}
    ok = True
    for name, over in RUNS.items():
        combined = run(config(args, over), os.path.join(args.out, name))
        ok = ok and combined["exit_code"] == 0
        cams = {}
        for cam, c in combined["cameras"].items():
            with open(c["report"]) as fh:
                cams[cam] = figures(json.load(fh))
        out[name] = cams
        print("%s: %s" % (name, json.dumps(cams)), file=sys.stderr, flush=True)
    for suffix in ("", "-lossless"):
        for cam in ("door", "yard"):
            pool, edge = out["int8-pool" + suffix][cam]["f1"], out["int8-edge" + suffix][cam]["f1"]
            out.setdefault("int8_pool_minus_edge_f1" + suffix.replace("-", "_"), {})[cam] = (
                None if pool is None or edge is None else round(pool - edge, 4))
    print(json.dumps(out, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
