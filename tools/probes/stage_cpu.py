"""Wall and thread-CPU milliseconds of each stage of a pinned plan, in this process (no network, one ORT thread).

Usage: python tools/probes/stage_cpu.py CUTS [--fp32-stem-int8]
  CUTS: comma list of cuts, e.g. 0,9,17,36,74 (trained MobileNetV2, 480x720, ORT int8, 4 calibration frames each
  timed 3 times; stages cached in /tmp/stage-cpu-cache-<variant>).
  --fp32-stem-int8: quantise the half-resolution stem too (the engine keeps it fp32), to see what it costs.
Run it inside a cgroup (cpu.cfs_quota_us 10000 of 100000) for the figure under a 0.1 cap.
Why: under a CPU cap a stage's wall time holds the throttled waits that land in it; its thread CPU does not.
Prints one JSON line: {"a-b": [median wall ms, median thread-CPU ms, total wall ms]}.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from cnnvideo import config
from cnnvideo.model.engines import factory as engine_factory
from cnnvideo.model.engines import ort_int8
from cnnvideo.model.loading import load_graph


def main(argv) -> None:
    cuts = [int(c) for c in argv[0].split(",")]
    stem_int8 = "--fp32-stem-int8" in argv
    variant = "stem-int8" if stem_int8 else "engine"
    cfg = config.from_dict({"model": "mobilenet_v2", "weights": "imagenet", "frame_size": [480, 720],
                            "engine": "onnxruntime", "precision": "int8",
                            "cache_dir": "/tmp/stage-cpu-cache-" + variant}, check_files=False)
    if stem_int8:
        quantize = ort_int8.quantize_stage
        ort_int8.quantize_stage = lambda *a, **k: quantize(*a, **dict(k, stem_area=0))
    fac = engine_factory.factory_for(cfg, load_graph(cfg))
    xs, out = fac.calibration.inputs(0)[:4], {}
    for a, b in zip(cuts, cuts[1:]):
        stage = fac.stage(a, b)
        ys = [stage.run(x) for x in xs]
        walls, cpus = [], []
        for _ in range(3):
            for x in xs:
                t, c = time.perf_counter(), time.thread_time()
                stage.run(x)
                walls.append(time.perf_counter() - t)
                cpus.append(time.thread_time() - c)
        out["%d-%d" % (a, b)] = [round(float(np.median(walls)) * 1e3, 2), round(float(np.median(cpus)) * 1e3, 2),
                                 round(float(np.sum(walls)) * 1e3, 1)]
        xs = ys
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
