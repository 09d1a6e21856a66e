"""The CFS burst probe (docs/results, "The CFS burst as an expectation"): in one capped container, profile the ORT
stages once, then N times: rescale the profile as a run start does, and time five 1-in-flight passes of the whole
model after 0.3 s idle each (the burst a stage gets) and the whole model back to back (its fluid time).

    docker run --rm --network none --cpus 0.4 -v $PWD/shared:/src/shared:ro -v $PWD/scripts:/probe \
        -v /tmp/probe-cache:/cache -e PYTHONPATH=/src/shared --entrypoint python3 cnnvideo/worker \
        /probe/burst_probe.py fp32 8

(/tmp/probe-cache must be writable by the image's user.) One JSON line per round."""
from __future__ import annotations

import json
import sys
import time

import numpy as np

from cnnvideo import config
from cnnvideo.model.engines import factory_for
from cnnvideo.model.loading import load_graph
from cnnvideo.plan.profiling import _engine_time, _random_frame, profile_worker, rescale_engine


def main(precision: str, rounds: int) -> None:
    cfg = config.from_dict({"model": "mobilenet_v2", "weights": "imagenet", "frame_size": [480, 720], "seed": 0,
                            "engine": "onnxruntime", "precision": precision, "cache_dir": "/cache",
                            "int8": {"calibration_start": 400}}, check_files=False)
    graph = load_graph(cfg)
    stages = factory_for(cfg, graph)
    t = time.time()
    prof = profile_worker(graph, 3, stages=stages)
    print(json.dumps({"profile_s": round(time.time() - t, 1), "reference_s": prof.reference,
                      "bounds": list(prof.reference_bounds)}), flush=True)
    whole = stages.stage(0, len(graph.cuts) - 1)
    x = _random_frame(graph)
    if whole.q_in is not None:
        x = whole.q_in.quantize(x)
    for _ in range(rounds):
        time.sleep(2.0)
        _, factor = rescale_engine(prof, stages, graph, 3)
        time.sleep(0.5)
        bursts = []
        for _ in range(5):
            time.sleep(0.3)
            w = time.perf_counter()
            whole.run(x)
            bursts.append(time.perf_counter() - w)
        fluid = _engine_time(whole.run, x, 3)
        print(json.dumps({"factor": round(factor, 3), "burst_median_s": round(float(np.median(bursts)), 4),
                          "fluid_whole_s": round(fluid, 4),
                          "profile_fluid_s": round(float(prof.seconds.sum()) * factor, 4)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fp32", int(sys.argv[2]) if len(sys.argv) > 2 else 8)
