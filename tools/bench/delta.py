"""`cnnvideo bench delta`: a 3-stage split over a real video, lossless and thresholded, error and bytes per hop."""
from __future__ import annotations

import json
import os
import time

import numpy as np

from cnnvideo.model.engines.torch_engine import TorchStage
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.tools.chain import LocalChain
from cnnvideo.video.frames import default_video, read_frames, synthetic_frames


def _frames(args, size):
    video = args.video or default_video()
    if video != "none" and os.path.isfile(video):
        return video, list(read_frames(video, size, limit=args.frames))
    return "synthetic", list(synthetic_frames(args.frames, size, seed=0))


def _run(graph, cuts, frames, reference, **options):
    chain = LocalChain(graph, cuts, mode="delta", **options)
    start = time.perf_counter()
    errors = [float(np.max(np.abs(chain.run(f) - r))) for f, r in zip(frames, reference)]
    wall = time.perf_counter() - start
    at = {str(n): errors[n - 1] for n in (1, 30, len(errors)) if n <= len(errors)}
    hops = [
        {"name": s.name, "bytes_per_frame": s.bytes_sent / s.frames,
         "ratio_vs_dense_fp32": s.bytes_sent / s.bytes_dense}
        for s in chain.stats
    ]
    windows = {"first_30": max(errors[:30]), "last_30": max(errors[-30:])}
    return {"options": options, "max_abs_err": max(errors), "err_at_frame": at, "err_window_max": windows,
            "hops": hops, "wall_s": wall}


def run(args) -> int:
    size = tuple(args.frame_size)
    graph = LayerGraph.from_model(build_model(args.model, "random", 0), size)
    k = len(graph.cuts) - 1
    cuts = [0, k // 3, 2 * k // 3, k]
    video, frames = _frames(args, size)
    whole = TorchStage(graph, 0, k)
    reference = [whole.run(f) for f in frames]
    result = {
        "model": args.model,
        "weights": "random (seed 0)",
        "video": video,
        "frames": len(frames),
        "frame_size": list(size),
        "cuts": [graph.cuts[c].name for c in cuts],
        "lossless": _run(graph, cuts, frames, reference),
        "thresholded": _run(graph, cuts, frames, reference, input_threshold=args.input_threshold,
                            threshold=args.threshold),
    }
    # single frames fluctuate with the scene: drift shows as the last window's worst exceeding the first's
    lossy = result["thresholded"]["err_window_max"]
    result["no_drift"] = lossy["last_30"] <= lossy["first_30"] * 1.5
    print(json.dumps(result, indent=None if args.json else 2))
    return 0
