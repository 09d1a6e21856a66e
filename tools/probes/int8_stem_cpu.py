"""CPU a frame of the whole person detector on ORT fp32 and int8 under each fp32 stem rule (ort_engine.stem_area:
`frame`, the rule before issue 46; `model`, the engine's; `quarter`, a study) and the study rows that keep more of
it fp32 (the predictors, blocks of the backbone, every block down to the finest head: `cnnvideo bench
int8-scenes`), timed interleaved in this process (one ORT thread, `time.process_time`), on frame 0 of vtest.avi at
480x720.

Usage: python tools/probes/int8_stem_cpu.py [--cache-dir out/bench-cache] [--runs 25]
Calibration: 16 frames of vtest.avi from 400, every 10th (the timing does not depend on it). Prints one JSON line:
{variant: median CPU ms}. docs/results/int8-scenes/README.md cites it.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from cnnvideo.artifacts import calibration_path, onnx_dir, onnx_model_path
from cnnvideo.model.engines import EngineSpec, StageFactory
from cnnvideo.model.engines.camera_calibration import RECIPES
from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
from cnnvideo.model.onnx_graph import load_graph
from cnnvideo.tools.bench.int8_scenes import _blocks
from cnnvideo.video.frames import read_frames

# name, stem rule, precision, study knobs (StageFactory attributes)
VARIANTS = (("fp32", "model", "fp32", {}), ("int8 frame rule (before)", "frame", "int8", {"weight_bits": 8}),
            ("int8 model rule (after)", "model", "int8", {}),
            ("int8 model rule, 8-bit weights", "model", "int8", {"weight_bits": 8}),
            ("int8 quarter rule", "quarter", "int8", {}),
            ("int8 + predictors fp32", "model", "int8", {"heads": 2}),
            ("int8 + predictors and blocks 8-13 fp32", "model", "int8", {"heads": 2, "keep": _blocks(8, 13)}),
            ("int8 + predictors and blocks 4-13 fp32", "model", "int8", {"heads": 2, "keep": _blocks(4, 13)}),
            ("int8 + predictors and the finest head's two maps fp32", "model", "int8", {"heads": 2, "band": 2}),
            ("int8 + every block down to the finest head fp32", "model", "int8", dict(RECIPES["fp32-head"])))
# (the last row is the recipe the master's fit check gives a camera whose int8 boxes do not fit: stem `head`,
# predictors fp32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default="out/bench-cache")
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--rows", default="", help="the rows to time, their names split at ';' (default: all)")
    args = ap.parse_args()
    names = [n.strip() for n in args.rows.split(";") if n.strip()]
    unknown = sorted(set(names) - {v[0] for v in VARIANTS})
    if unknown:
        ap.error("no such row: %s (rows: %s)" % (", ".join(unknown), "; ".join(v[0] for v in VARIANTS)))
    size = (480, 720)
    g = load_graph(onnx_model_path("person-ssdlite"), size)
    k = g.num_segments
    key = "person-ssdlite %dx%d weights %s" % (size[0], size[1], g.digest)
    spec = CalibrationSpec("media/vtest.avi", 16, 400, 10)

    def cal():
        return load_or_measure(g, spec, calibration_path(args.cache_dir, "person-ssdlite", size), key)

    stages = {}
    for name, stem, precision, knobs in VARIANTS:
        if names and name not in names:
            continue
        f = StageFactory(g, EngineSpec("onnxruntime", precision, 1, "stop"), onnx_dir(args.cache_dir), key, cal)
        f.stem = stem
        for knob, value in knobs.items():
            setattr(f, knob, value)
        stages[name] = f.stage(0, k)
    x = next(iter(read_frames("media/vtest.avi", size, limit=1, loop=False)))[np.newaxis]
    times = {n: [] for n in stages}
    for _ in range(3):
        for s in stages.values():
            s.run(x)
    for _ in range(args.runs):
        for n, s in stages.items():
            t = time.process_time()
            s.run(x)
            times[n].append(time.process_time() - t)
    print(json.dumps({n: round(1000 * float(np.median(t)), 1) for n, t in times.items()}))


if __name__ == "__main__":
    main()
