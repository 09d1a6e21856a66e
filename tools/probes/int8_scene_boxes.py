"""Which boxes the int8 person detector gets wrong on one scene of `cnnvideo bench int8-scenes`, and by how much:
every box int8 adds (a false positive) or drops (a false negative) against the unsplit fp32 model at score 0.5, with
the score the other side gives the same box (the best IoU >= 0.5 box down to score 0.05; 0 when it has none), and
the int8 score error of the boxes both find at score >= 0.3.

Usage: python tools/probes/int8_scene_boxes.py [--scene walkers] [--heads 0] [--band 0] [--method minmax]
       [--symmetric]
Needs the bench's clips (run the bench once with --cache-dir out/bench-cache). The int8 model is built as the bench's
`after` row (the camera's 16 frames, every 5th), with the knobs given. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os

import numpy as np

from cnnvideo.artifacts import onnx_dir, onnx_model_path
from cnnvideo.model.engines import EngineSpec, StageFactory
from cnnvideo.model.onnx_graph import load_graph
from cnnvideo.results.detections import PERSON_SSDLITE, match
from cnnvideo.tools.bench import int8_scenes as bench


def _boxes(stage, frames, graph, threshold):
    spec = dataclasses.replace(PERSON_SSDLITE, score_threshold=threshold)
    return bench._detections(stage, frames, graph, spec, graph.frame_size)


def _other_score(box, others) -> float:
    pairs = match([box], others, 0.5)
    return round(float(others[pairs[0][1]].score), 3) if pairs else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache-dir", default="out/bench-cache")
    ap.add_argument("--scene", default="walkers")
    ap.add_argument("--heads", type=int, default=0)
    ap.add_argument("--band", type=int, default=0)
    ap.add_argument("--method", default="minmax")
    ap.add_argument("--symmetric", action="store_true")
    args = ap.parse_args()
    size = (480, 720)
    g = load_graph(onnx_model_path(bench.MODEL), size)
    k = g.num_segments
    key = "%s %dx%d weights %s" % (bench.MODEL, size[0], size[1], g.digest)
    clip = "media/vtest.avi" if args.scene == "vtest" else os.path.join(args.cache_dir, "scenes", args.scene + ".avi")
    frames = bench._read(clip, size, 100)
    fp32 = StageFactory(g, EngineSpec("onnxruntime", "fp32", 1, "stop"), onnx_dir(args.cache_dir), key).stage(0, k)
    base = StageFactory(g, EngineSpec("onnxruntime", "int8", 1, "stop"), onnx_dir(args.cache_dir), key)
    base.heads, base.band, base.method, base.symmetric = args.heads, args.band, args.method, args.symmetric
    int8 = base.with_calibration(bench._camera_calibration(g, key, frames, 16, 5, clip)).stage(0, k)
    ref_low, got_low = _boxes(fp32, frames, g, 0.05), _boxes(int8, frames, g, 0.05)
    added, dropped, errors = [], [], []
    for i, (ref, got) in enumerate(zip(ref_low, got_low)):
        ref5, got5 = [d for d in ref if d.score >= 0.5], [d for d in got if d.score >= 0.5]
        hit_got = {a for a, _, _ in match(got5, ref5, 0.5)}
        hit_ref = {b for _, b, _ in match(got5, ref5, 0.5)}
        added += [{"frame": i, "int8": round(d.score, 3), "fp32": _other_score(d, ref)}
                  for j, d in enumerate(got5) if j not in hit_got]
        dropped += [{"frame": i, "fp32": round(d.score, 3), "int8": _other_score(d, got)}
                    for j, d in enumerate(ref5) if j not in hit_ref]
        ref3, got3 = [d for d in ref if d.score >= 0.3], [d for d in got if d.score >= 0.3]
        errors += [got3[a].score - ref3[b].score for a, b, _ in match(got3, ref3, 0.5)]
    n_ref = sum(1 for ref in ref_low for d in ref if d.score >= 0.5)
    err = np.asarray(errors)
    near = sum(1 for ref in ref_low for d in ref if 0.4 <= d.score < 0.6)
    print(json.dumps({"scene": args.scene, "heads": args.heads, "band": args.band, "method": args.method,
                      "symmetric": args.symmetric,
                      "reference_boxes": n_ref, "fp32_boxes_scored_0.4_to_0.6": near,
                      "added": added, "dropped": dropped,
                      "score_error": {"boxes": len(errors), "mean": round(float(err.mean()), 4),
                                      "std": round(float(err.std()), 4),
                                      "max_abs": round(float(np.abs(err).max()), 4)}}, indent=1))


if __name__ == "__main__":
    main()
