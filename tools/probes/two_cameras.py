"""Two cameras on one pool against one camera alone (issue 35), side by side in one invocation: `cnnvideo local` runs
(1) vtest.avi alone as a camera, (2) megamind.avi alone, then (3) vtest.avi (`door`) and megamind.avi (`yard`, another
scene) as two cameras on the same workers. Each camera plays in real time at `--fps` (looping its file), faster than
the pool can take, so the pool is the bottleneck and the drop policy skips what it cannot take. Prints JSON: the alone
fps, each camera's fps, share, frames completed / lost / skipped and detection F1 against its own unsplit
reference (the master's check on a share of the frames), the total over vtest's alone fps, and the smaller share.
The two scenes cost the pool differently (megamind's deltas are larger), so the pair is also compared with `mix_fps`:
the rate one camera at a time would get on the pair's mix of frames, half from each scene (the harmonic mean of the
two alone rates); `total_over_mix` is what sharing the pool costs or gains.

Usage: python tools/probes/two_cameras.py [--workers 4] [--frames 300] [--fps 25] [--caps 0.1] [--out DIR]
Setting (the issue's): person detector (trained person-ssdlite), ORT int8, 480x720, caps 0.1 per worker, tc 3 MB/s
into each worker, 6 in flight per camera, input threshold 4, the optimal scheduler (pool plans), equal weights.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def base(args) -> dict:
    return {
        "cluster": {"workers": ["127.0.0.1:%d" % (50260 + i) for i in range(args.workers)]},
        "model": "person-ssdlite", "engine": "onnxruntime", "precision": "int8", "int8": {"calibration_start": 400},
        "frame_size": [480, 720], "mode": "delta", "delta": {"input_threshold": 4}, "seed": 0,
        "frames": args.frames, "in_flight": 6, "scheduler": "optimal", "check": True, "check_share": 0.2,
        "trainer": {"frames": 30, "video": os.path.join(REPO, "media", "vtest.avi")},
        "source": {"mode": "live", "realtime": True, "fps": args.fps, "drop": "oldest", "loop": True},
        "bandwidth": [3.0], "cpus": {"workers": args.caps},
    }


def run(cfg: dict, out: str) -> dict:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "probe.yml")
    with open(path, "w") as fh:
        yaml.safe_dump(cfg, fh)
    with open(os.path.join(out, "probe.log"), "w") as log:
        code = subprocess.call([sys.executable, "-m", "cnnvideo", "local", "-c", path, "--out", out], cwd=REPO,
                               stdout=log, stderr=subprocess.STDOUT)
    with open(os.path.join(out, "report.json")) as fh:
        report = json.load(fh)
    report["exit_code"] = code
    return report


def camera_figures(report: dict) -> dict:
    det = report.get("detection_agreement") or {}
    return {"fps": report.get("throughput_fps"), "completed": report.get("completed"), "frames": report.get("frames"),
            "lost": report.get("lost"), "skipped": report.get("skipped"), "f1": det.get("f1"),
            "p95_s": (report.get("latency_s") or {}).get("p95"), "plan": (report.get("pool") or {}).get("shape")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--fps", type=float, default=25.0)
    ap.add_argument("--caps", type=float, default=0.1)
    ap.add_argument("--out", default=os.path.join(REPO, "out", "two-cameras"))
    args = ap.parse_args()
    vtest, other = (os.path.join(REPO, "media", n) for n in ("vtest.avi", "megamind.avi"))
    alone_cfg = dict(base(args), video=vtest)
    alone = run(alone_cfg, os.path.join(args.out, "alone"))
    other_alone = run(dict(base(args), video=other), os.path.join(args.out, "alone-other"))
    pair_cfg = dict(base(args), cameras={"door": {"video": vtest}, "yard": {"video": other}})
    pair = run(pair_cfg, os.path.join(args.out, "pair"))
    cams = {}
    for name, c in pair["cameras"].items():
        with open(c["report"]) as fh:
            cams[name] = dict(camera_figures(json.load(fh)), share=c.get("share"), status=c["status"])
    one, one_other = camera_figures(alone), camera_figures(other_alone)
    total = sum(float(c["fps"] or 0) for c in cams.values())
    # the pool's rate for the pair's mix of frames, one camera at a time: half its frames from each scene
    mix = 2.0 / (1.0 / float(one["fps"]) + 1.0 / float(one_other["fps"])) if one["fps"] and one_other["fps"] else None
    out = {
        "setting": "person-ssdlite ORT int8, 480x720, %d workers at caps %.2f, tc 3 MB/s per link, 6 in flight per "
                   "camera, input threshold 4, optimal, each camera real time at %g fps (drop oldest), %d frames"
                   % (args.workers, args.caps, args.fps, args.frames),
        "alone": one, "alone_exit_code": alone["exit_code"],
        "alone_other": one_other, "alone_other_exit_code": other_alone["exit_code"],
        "pair": cams, "pair_exit_code": pair["exit_code"],
        "total_fps": round(total, 3),
        "total_over_alone": round(total / float(one["fps"]), 3) if one["fps"] else None,
        "mix_fps": round(mix, 3) if mix else None,
        "total_over_mix": round(total / mix, 3) if mix else None,
        "smallest_share": min(c["share"] or 0 for c in cams.values()),
    }
    print(json.dumps(out, indent=1))
    return 0 if alone["exit_code"] == other_alone["exit_code"] == pair["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
