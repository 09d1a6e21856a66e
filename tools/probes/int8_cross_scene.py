"""A calibration from another scene: the person detector's int8 model calibrated on one scene and scored on every
scene. The calibration is the camera recipe of `cnnvideo bench int8-scenes`' after row (the scene's first 16 frames,
every 5th; the engine's int8 recipe, so 7-bit weights today). The score is the F1 of its boxes against the unsplit ORT
fp32 model on the same frames (IoU >= 0.5, same label, score >= 0.5), whole model, one thread, 480x720, 100 frames a
scene. Scenes: the bench's vtest, beach, walkers and person, and three made from vtest's frames 0-99: vtest-dim
(pixels x0.3), vtest-night (x0.18 plus Gaussian noise of sd 3, seeded by the frame's index) and vtest-bright
(x1.8 + 30); each clipped to 0-255.

Usage: python tools/probes/int8_cross_scene.py [--cache-dir out/bench-cache] [--out FILE.json] [--fit F1]
Renders the bench's clips into CACHE_DIR/scenes. Logs one line per calibration scene on stderr, then prints one JSON
object, {calibration scene: {scored scene: F1}}, and writes it to --out if given. With --fit, each calibration first
goes through the master's fit check at that F1 (master/calibration_fit.py, as the bench's `after + fit check` row)
and the object is {"f1": that matrix, "recipes": {calibration scene: recipe kept}, "fit": {scene: the check's
scores}}.
docs/results/int8-scenes/README.md cites it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from cnnvideo.artifacts import onnx_dir, onnx_model_path
from cnnvideo.model.engines import EngineSpec, StageFactory
from cnnvideo.model.onnx_graph import load_graph
from cnnvideo.results.detections import PERSON_SSDLITE
from cnnvideo.tools.bench import int8_scenes as bench


def _made_from_vtest(frames):
    """The three scenes made from vtest's frames (float arithmetic, clipped, truncated back to uint8)."""
    return {
        "vtest-dim": [np.clip(f.astype(np.float32) * 0.3, 0, 255).astype(np.uint8) for f in frames],
        "vtest-night": [np.clip(f.astype(np.float32) * 0.18 + np.random.RandomState(i).normal(0, 3, f.shape), 0, 255)
                        .astype(np.uint8) for i, f in enumerate(frames)],
        "vtest-bright": [np.clip(f.astype(np.float32) * 1.8 + 30, 0, 255).astype(np.uint8) for f in frames],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default="out/bench-cache")
    ap.add_argument("--out", default="")
    ap.add_argument("--fit", type=float, default=0.0, help="run the master's fit check at this F1 (0: not)")
    args = ap.parse_args()
    size, n = (480, 720), 100
    g = load_graph(onnx_model_path(bench.MODEL), size)
    k = g.num_segments
    key = "%s %dx%d weights %s" % (bench.MODEL, size[0], size[1], g.digest)
    clips = bench._clips(["beach", "walkers", "person"], n, size, "media/photos", "media/vtest.avi",
                         os.path.join(args.cache_dir, "scenes"))
    frames = {name: bench._read(path, size, n) for name, path in clips.items()}
    frames.update(_made_from_vtest(frames["vtest"]))
    fp32 = StageFactory(g, EngineSpec("onnxruntime", "fp32", 1, "stop"), onnx_dir(args.cache_dir), key).stage(0, k)
    ref = {name: bench._detections(fp32, fr, g, PERSON_SSDLITE, size) for name, fr in frames.items()}
    print("fp32 boxes a frame: %s" % {name: round(float(np.mean([len(d) for d in r])), 2) for name, r in ref.items()},
          file=sys.stderr, flush=True)
    base = StageFactory(g, EngineSpec("onnxruntime", "int8", 1, "stop"), onnx_dir(args.cache_dir), key)
    out, recipes, fits = {}, {}, {}
    for cal_name, cal_frames in frames.items():
        cal = bench._camera_calibration(g, key, cal_frames, 16, 5, cal_name)
        if args.fit:
            bench._fit(cal, base, g, PERSON_SSDLITE, args.fit)
            recipes[cal_name], fits[cal_name] = cal.recipe or "default", cal.fit
        stage = base.with_calibration(cal).stage(0, k)
        out[cal_name] = {name: bench._f1(bench._detections(stage, fr, g, PERSON_SSDLITE, size), ref[name])["f1"]
                         for name, fr in frames.items()}
        print("calibrated on %s: %s" % (cal_name, json.dumps(out[cal_name])), file=sys.stderr, flush=True)
    if args.fit:
        out = {"f1": out, "recipes": recipes, "fit": fits, "fit_below": args.fit}
    print(json.dumps(out))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
