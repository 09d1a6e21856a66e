"""What a stage's compute costs a worker when its core idled before the run, against the same stage run back to
back: the config's model on its engine, the whole model (cuts 0..K) or `--cut C` (0..C and C..K), on the
config's video at its frame size, one thread. For each pause before a run (0 = back to back), the median thread
CPU milliseconds of a run over the frames, as JSON.

Usage: python tools/probes/ort_idle_cost.py CONFIG.yml [--frames 80] [--cut C] [--pauses 0,0.01,0.05,0.1]
Why: a chain's workers idle between frames, a bench's loop does not, so a worker may pay more for the model than a
back-to-back bench or profile says, on every worker of a chain. How much depends on the host: on an Intel Xeon VM the
int8 detector took about 10 ms a run back to back and about 12 ms after a pause of 10-100 ms (noisy), on an AMD EPYC
VM 4-10% more (docs/figures.md, detect-balance).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from cnnvideo import config as config_mod
from cnnvideo.model.engines import factory_for
from cnnvideo.model.loading import load_graph
from cnnvideo.video.frames import read_frames


def median_cpu_ms(stage, inputs, pause: float) -> float:
    """Median thread CPU of one run of `stage` over `inputs`, each run after `pause` seconds idle."""
    stage.run(inputs[0])
    spent = []
    for x in inputs:
        if pause > 0:
            time.sleep(pause)
        t = time.thread_time()
        stage.run(x)
        spent.append(time.thread_time() - t)
    return round(1e3 * float(np.median(spent)), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("--frames", type=int, default=80)
    ap.add_argument("--cut", type=int, default=0, help="also time the two stages of a split at this cut")
    ap.add_argument("--pauses", default="0,0.01,0.05,0.1", help="idle seconds before each run, comma-separated")
    args = ap.parse_args()
    cfg = config_mod.load(args.config)
    cfg.engine_options.threads = 1  # as a worker capped at one core or less runs it: its thread's CPU is all of it
    graph = load_graph(cfg)
    stages = factory_for(cfg, graph)
    k = len(graph.cuts) - 1
    shape = tuple(graph.cuts[0].shape)  # the frame as the first stage takes it (a batch of one)
    frames = [f.reshape(shape) for f in read_frames(cfg.video, tuple(cfg.frame_size), limit=args.frames, loop=False)]
    spans = [(0, k)] + ([(0, args.cut), (args.cut, k)] if 0 < args.cut < k else [])
    inputs = {0: frames}
    if len(spans) > 1:
        first = stages.stage(0, args.cut)
        inputs[args.cut] = [first.run(x) for x in frames]
    pauses = [float(p) for p in args.pauses.split(",")]
    out = {"model": cfg.model, "engine": stages.spec.label, "frame_size": list(cfg.frame_size),
           "frames": len(frames), "median_cpu_ms": {}}
    for a, b in spans:
        stage = stages.stage(a, b)
        out["median_cpu_ms"]["%d..%d" % (a, b)] = {"%g" % p: median_cpu_ms(stage, inputs[a], p) for p in pauses}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
