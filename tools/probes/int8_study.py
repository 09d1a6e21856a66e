"""int8 recipes on the whole trained mobilenet_v2 at 480x720, against torch fp32: top-1 agreement, top-1 in the
int8 top-5, top-5 overlap and max logit error on three disjoint sets of vtest.avi frames (eval 0-29, as
`cnnvideo bench engine`; dev 100-390 every 10th; held-out 560-790 every 5th), calibrated on frames 400-550 every
10th (16) unless a row says otherwise. One JSON line per recipe (docs/results/engine/int8-study.jsonl).

    .venv/bin/python tools/probes/int8_study.py [--only NAME ...] > docs/results/engine/int8-study.jsonl
    flock /tmp/cnnvideo-cpu.lock .venv/bin/python tools/probes/int8_study.py --timing 25   # one JSON line: speed
    .venv/bin/python tools/probes/int8_study.py --sensitivity   # one line per block: only that block int8
    flock /tmp/cnnvideo-cpu.lock .venv/bin/python tools/probes/int8_study.py --op-profile   # where int8 time goes

Times are single-thread medians of 7 runs of one frame, ORT int8 against ORT fp32 in the same process (not under
the cpu lock: ratios only, noisy); `cnnvideo bench engine` gives the speed figures."""
from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from cnnvideo.model.engines import ort_int8
from cnnvideo.model.engines.ort_engine import export_stage, session
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import Preprocess, build_model
from cnnvideo.results.labels import top1_agreement, top1_in_top5, top5_overlap
from cnnvideo.video.frames import read_frames

SETS = {"eval": list(range(0, 30)), "dev": list(range(100, 400, 10)), "heldout": list(range(560, 795, 5))}
CALIB = list(range(400, 560, 10))


def _sets_metrics(logits, ref):
    out = {}
    for name, ids in SETS.items():
        a, b = [logits[i] for i in ids], [ref[i] for i in ids]
        out[name] = {"top1_agreement": round(top1_agreement(a, b), 4), "top1_in_top5": round(top1_in_top5(a, b), 4),
                     "top5_overlap": round(top5_overlap(a, b), 4),
                     "max_abs_err": round(float(np.abs(np.array(a) - np.array(b)).max()), 3),
                     "flipped": [i for i, x, y in zip(ids, a, b) if int(np.argmax(x)) != int(np.argmax(y))]}
    return out


def _run(sess, x):
    return sess.run(None, {"x": x})


def _torch_run(model, x):
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(x))


def _median_s(fn, x, n=7):
    fn(x)
    t = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn(x)
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--video", default="media/vtest.avi")
    ap.add_argument("--only", nargs="*", default=None, help="recipe names to run (default: all)")
    ap.add_argument("--timing", type=int, default=0, metavar="ROUNDS",
                    help="instead: time torch fp32, ORT fp32 and the previous and engine int8 recipes in turn")
    ap.add_argument("--sensitivity", action="store_true",
                    help="instead: per features.* block, only that block int8 (bias-corrected on 8 calibration "
                         "frames), RMS logit error on the eval and dev frames")
    ap.add_argument("--op-profile", action="store_true",
                    help="instead: ORT's own profile of the engine int8 recipe, share of kernel time per op type and "
                         "of the nodes kept fp32 (one JSON line)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    graph = LayerGraph.from_model(build_model("mobilenet_v2", "imagenet", 0), (480, 720))
    k = graph.num_segments
    wanted = sorted(set(CALIB) if args.timing or args.op_profile
                    else set(sum(SETS.values(), [])) | set(CALIB) | set(range(400, 544, 3)))
    frames = {i: f[np.newaxis] for i, f in enumerate(read_frames(args.video, (480, 720), wanted[-1] + 1, loop=False))
              if i in set(wanted)}
    model = graph.stage_module(0, k)
    fp32, _ = export_stage(graph, 0, k)
    fp32_sess = session(fp32, 1)
    area = 240 * 360
    stock_fp32_nodes = ort_int8.fp32_nodes

    def depthwise_too(m, first_conv, classifier, stem_area=0):
        """The engine's fp32 nodes plus every depthwise (grouped) convolution."""
        grouped = [n.name for n in m.graph.node if n.op_type == "Conv"
                   and any(a.name == "group" and a.i > 1 for a in n.attribute)]
        return stock_fp32_nodes(m, first_conv, classifier, stem_area) + grouped

    base = dict(first_conv=True, classifier=True, stem_area=0, correct_bias=False)
    recipes = [
        ("all int8 (minmax)", dict(first_conv=False, classifier=False, stem_area=0, correct_bias=False), None),
        ("first conv + classifier fp32 (previous engine recipe)", base, None),
        ("previous + depthwise convs fp32", base, depthwise_too),
        ("previous, entropy", dict(base, method="entropy"), None),
        ("previous, percentile", dict(base, method="percentile"), None),
        ("previous + output bias correction", dict(base, correct_bias=True), None),
        ("previous + half-resolution stem fp32", dict(base, stem_area=area), None),
        ("previous + stem fp32 + bias correction (engine recipe)", dict(base, stem_area=area, correct_bias=True),
         None),
        ("engine recipe, 48 calibration frames 400-541 (every 3rd)", dict(base, stem_area=area, correct_bias=True),
         list(range(400, 544, 3))),
        ("engine recipe, percentile", dict(base, stem_area=area, correct_bias=True, method="percentile"), None),
        ("engine recipe, reduce_range (7-bit weights)", dict(base, stem_area=area, correct_bias=True,
                                                             reduce_range=True), None),
        ("engine recipe, u8 weights", dict(base, stem_area=area, correct_bias=True, weights="u8"), None),
        ("all int8 but first conv + classifier, reduce_range + bias correction",
         dict(base, correct_bias=True, reduce_range=True), None),
        ("engine recipe + quarter-resolution blocks fp32", dict(base, stem_area=120 * 180, correct_bias=True), None),
    ]
    workdir = tempfile.mkdtemp(prefix="cnnvideo-int8-study-")
    x0 = frames[CALIB[0]] if args.timing or args.op_profile else frames[0]
    if args.timing:
        calib = [frames[i] for i in CALIB]
        runs = {"torch-fp32": functools.partial(_torch_run, model),
                "onnxruntime-fp32": functools.partial(_run, fp32_sess)}
        for label, kw in (("onnxruntime-int8 previous recipe", base),
                          ("onnxruntime-int8 engine recipe", dict(base, stem_area=area, correct_bias=True)),
                          ("onnxruntime-int8 engine recipe, reduce_range",
                           dict(base, stem_area=area, correct_bias=True, reduce_range=True))):
            runs[label] = functools.partial(_run, session(ort_int8.quantize_stage(fp32, calib, None, None, workdir,
                                                                                   **kw), 1))
        times = {label: [] for label in runs}
        for _ in range(args.timing + 1):
            for label, fn in runs.items():
                t0 = time.perf_counter()
                fn(x0)
                times[label].append(time.perf_counter() - t0)
        med = {label: float(np.median(t[1:])) for label, t in times.items()}
        print(json.dumps({"frame_size": [480, 720], "threads": 1, "rounds": args.timing, "median_s": med,
                          "speedup_vs_torch_fp32": {k: med["torch-fp32"] / v for k, v in med.items()}}))
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    if args.op_profile:
        q = ort_int8.quantize_stage(fp32, [frames[i] for i in CALIB], None, None, workdir,
                                    **dict(base, stem_area=area, correct_bias=True))
        print(json.dumps(_op_profile(q, frames[CALIB[0]], workdir)))
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    with torch.no_grad():
        ref = {i: model(torch.from_numpy(frames[i])).numpy()[0] for i in sorted(set(sum(SETS.values(), [])))}
    if args.sensitivity:
        _sensitivity(fp32, frames, ref, workdir)
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    for name, kw, extra in recipes:
        if args.only and name not in args.only:
            continue
        calib = extra if isinstance(extra, list) else CALIB
        ort_int8.fp32_nodes = extra if callable(extra) else stock_fp32_nodes
        t0 = time.perf_counter()
        q = ort_int8.quantize_stage(fp32, [frames[i] for i in calib], None, None, workdir, **copy.deepcopy(kw))
        build = time.perf_counter() - t0
        ort_int8.fp32_nodes = stock_fp32_nodes
        sess = session(q, 1)
        logits = {i: sess.run(None, {"x": frames[i]})[0][0] for i in ref}
        row = {"recipe": name, "calibration_frames": len(calib), "build_s": round(build, 1),
               **_sets_metrics(logits, ref)}
        t_q = _median_s(functools.partial(_run, sess), x0)
        t_f = _median_s(functools.partial(_run, fp32_sess), x0)
        row.update({"int8_s": round(t_q, 4), "ort_fp32_s": round(t_f, 4), "int8_vs_ort_fp32": round(t_f / t_q, 2)})
        print(json.dumps(row), flush=True)
    if not args.only or "torch.ao fx int8 (x86 qconfig)" in args.only:
        print(json.dumps(_fx_row(frames, ref)), flush=True)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _sensitivity(fp32: bytes, frames, ref, workdir: str) -> None:
    """mobilenet_v2's features.* blocks one at a time: every other node fp32 (the first conv and classifier always),
    bias-corrected on frames 400-540 every 20th; RMS / max logit error and agreement on the eval + dev frames."""
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, pre = os.path.join(workdir, "s.onnx"), os.path.join(workdir, "s.pre.onnx")
    with open(src, "wb") as fh:
        fh.write(fp32)
    quant_pre_process(src, pre, skip_symbolic_shape=True)
    nodes = list(onnx.load(pre).graph.node)
    # convolutions in graph order: features.0 has 1, features.1 2, features.2-17 3 each, features.18 1
    conv_block = [0, 1, 1] + [b for b in range(2, 18) for _ in range(3)] + [18]
    block, ci = {}, -1
    for n in nodes:
        ci += n.op_type == "Conv"
        block[n.name] = conv_block[ci] if ci >= 0 else -1
    stock = ort_int8.fp32_nodes
    calib = [frames[i] for i in range(400, 560, 20)]
    ids = SETS["eval"] + SETS["dev"]
    for b in range(1, 19):
        ort_int8.fp32_nodes = lambda m, fc, cl, area=0, b=b: stock(m, fc, cl, area) + [
            n.name for n in m.graph.node if block.get(n.name, -1) != b]
        q = session(ort_int8.quantize_stage(fp32, calib, None, None, workdir, first_conv=True, classifier=True), 1)
        ort_int8.fp32_nodes = stock
        err = np.stack([q.run(None, {"x": frames[i]})[0][0] - ref[i] for i in ids])
        agree = np.mean([int(np.argmax(err[j] + ref[i])) == int(np.argmax(ref[i])) for j, i in enumerate(ids)])
        print(json.dumps({"only_int8": "features.%d" % b, "rms_logit_err": round(float(np.sqrt((err ** 2).mean())), 4),
                          "max_abs_err": round(float(np.abs(err).max()), 3), "top1_agreement": round(float(agree), 3)}),
              flush=True)


def _op_profile(model: bytes, x, workdir: str, runs: int = 20) -> dict:
    """ORT's per-node kernel times of `model` (one thread, the engine's session options) over `runs` runs after
    2 warm-ups: the share of each op type, and of the float Conv nodes (the layers the recipe keeps fp32)."""
    import collections

    sess = session(model, 1, "int8 model", profile_prefix=os.path.join(workdir, "ort-profile"))
    for _ in range(2):
        sess.run(None, {"x": x})
    t0 = time.perf_counter()
    for _ in range(runs):
        sess.run(None, {"x": x})
    wall = (time.perf_counter() - t0) / runs
    with open(sess.end_profiling()) as fh:
        events = [e for e in json.load(fh) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    events = events[len(events) * 2 // (runs + 2):]   # drop the warm-up runs
    per_op = collections.Counter()
    for e in events:
        per_op[e["args"]["op_name"]] += e["dur"]
    total = sum(per_op.values())
    return {"recipe": "engine recipe", "frame_size": [480, 720], "threads": 1, "runs": runs,
            "wall_s": round(wall, 4), "kernel_s": round(total / runs / 1e6, 4),
            "op_share": {k: round(v / total, 3) for k, v in per_op.most_common()},
            "fp32_conv_nodes": sum(1 for e in events if e["args"]["op_name"] == "Conv") // runs}


def _fx_row(frames, ref) -> dict:
    """torch.ao fx static int8 (x86 default qconfig: per-channel weights, histogram observers) on the same frames."""
    import warnings

    import torch
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    net = build_model("mobilenet_v2", "imagenet", 0).eval()
    pp = Preprocess()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        m = prepare_fx(copy.deepcopy(net), get_default_qconfig_mapping("x86"), (pp(torch.from_numpy(frames[0])),))
        for i in CALIB:
            m(pp(torch.from_numpy(frames[i])))
        q = convert_fx(m)
        logits = {i: q(pp(torch.from_numpy(frames[i]))).numpy()[0] for i in ref}
        t = _median_s(lambda x: q(pp(torch.from_numpy(x))), frames[0])
    return {"recipe": "torch.ao fx int8 (x86 qconfig)", "calibration_frames": len(CALIB),
            **_sets_metrics(logits, ref), "fx_int8_s": round(t, 4)}


if __name__ == "__main__":
    sys.exit(main())
