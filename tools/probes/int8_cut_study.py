"""Where a 2-worker int8 split of trained mobilenet_v2 loses top-1 agreement: for each cut, the int8 engine's whole
model and its split at the cut against torch fp32 on vtest.avi frames, the cut tensor's error (the first stage's
uint8 output dequantised against the fp32 tensor, relative RMS) and whether the hop's closed-loop uint8 delta
codec changes what the second stage receives. One JSON line per cut.

    .venv/bin/python tools/probes/int8_cut_study.py --cuts 18 19 20 25 27 --frames 40 --cache-dir /tmp/int8cut

Stages are built by the engine itself (StageFactory, onnxruntime int8, one thread) into --cache-dir, so a second
run with the same cache only loads them."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from cnnvideo.artifacts import calibration_path, onnx_dir
from cnnvideo.model.engines import EngineSpec, QParams, StageFactory, weights_digest
from cnnvideo.model.engines.quant import CalibrationSpec, load_or_measure
from cnnvideo.model.graph import LayerGraph
from cnnvideo.model.zoo import build_model
from cnnvideo.results.labels import top1_agreement
from cnnvideo.video.frames import read_frames
from cnnvideo.wire.hop import HopReceiver, HopSender


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--video", default="media/vtest.avi")
    ap.add_argument("--cuts", type=int, nargs="+", required=True)
    ap.add_argument("--frames", type=int, default=40, help="evaluation frames 0..N-1")
    ap.add_argument("--calibration-start", type=int, default=400)
    ap.add_argument("--calibration-frames", type=int, default=16)
    ap.add_argument("--cache-dir", required=True)
    args = ap.parse_args()

    torch.set_num_threads(1)
    size = (480, 720)
    graph = LayerGraph.from_model(build_model("mobilenet_v2", "imagenet", 0), size)
    k = graph.num_segments
    key = "mobilenet_v2 %dx%d weights %s" % (size[0], size[1], weights_digest(graph))
    spec = CalibrationSpec(args.video, args.calibration_frames, args.calibration_start, 10)
    cal_path = calibration_path(args.cache_dir, "mobilenet_v2", size)
    factory = StageFactory(graph, EngineSpec("onnxruntime", "int8", threads=1, on_error="stop"),
                           onnx_dir(args.cache_dir), key, lambda: load_or_measure(graph, spec, cal_path, key))
    clip = [f[np.newaxis] for f in read_frames(args.video, size, args.frames, loop=False)]
    ref_model = graph.stage_module(0, k)
    with torch.no_grad():
        ref = [ref_model(torch.from_numpy(f)).numpy() for f in clip]
    whole = [factory.stage(0, k).run(f) for f in clip]
    def rms(outs):  # RMS logit error against torch fp32, over every frame and class (less noisy than top-1)
        return round(float(np.sqrt(np.mean([(a - b) ** 2 for a, b in zip(outs, ref)]))), 4)

    margin = [float(np.diff(np.sort(r.ravel())[-2:])[0]) for r in ref]  # fp32 top-2 logit gap per frame

    def flips(outs):  # (frame, fp32 top-2 gap) of every frame whose top-1 differs from fp32's
        return [(i, round(margin[i], 3)) for i, (a, b) in enumerate(zip(outs, ref)) if a.argmax() != b.argmax()]

    top2 = [np.argsort(r.ravel())[-2:][::-1] for r in ref]

    def gap_shift(outs):  # mean change of the fp32 top-1 minus top-2 logit (< 0: towards flipping)
        return round(float(np.mean([(o.ravel()[t[0]] - o.ravel()[t[1]]) - (r.ravel()[t[0]] - r.ravel()[t[1]])
                                    for o, r, t in zip(outs, ref, top2)])), 4)

    base = {"frames": len(clip), "whole_gap_shift": gap_shift(whole),
            "calibration": spec.label, "whole_top1_agreement": top1_agreement(whole, ref),
            "whole_rms_logit_err": rms(whole), "whole_flips": flips(whole),
            "fp32_margin_median": round(float(np.median(margin)), 3),
            "fp32_margin_below_0.05": int(np.sum(np.array(margin) < 0.05))}
    print(json.dumps(base), flush=True)
    for cut in args.cuts:
        t0 = time.perf_counter()
        first, second = factory.stage(0, cut), factory.stage(cut, k)
        qp = factory.qparams(cut)
        if qp is None:  # a cut the calibration keeps float: nothing is rounded at it
            class _Float(QParams):
                def quantize(self, x):
                    return np.asarray(x, dtype=np.float32)

                def dequantize(self, q):
                    return np.asarray(q, dtype=np.float32)

            qp = _Float(0.0, 0)
        mid = [first.run(f) for f in clip]
        with torch.no_grad():
            mid_ref = [graph.stage_module(0, cut)(torch.from_numpy(f)).numpy() for f in clip]
        real = [qp.dequantize(m) for m in mid]
        err = np.array([np.sqrt(np.mean((a - b) ** 2)) / (np.sqrt(np.mean(b ** 2)) + 1e-12)
                        for a, b in zip(real, mid_ref)])
        # the hop: closed-loop delta codec at threshold 0 (what `cnnvideo local` sends at an int8 cut); decode
        # returns a view of the held tensor, valid until the next payload: copied
        sender, receiver = HopSender(0.0), HopReceiver(1 << 30)
        received = [np.array(receiver.decode(sender.encode(m, keyframe=i == 0))) for i, m in enumerate(mid)]
        hop_exact = all(np.array_equal(a, b) for a, b in zip(received, mid))
        split = [second.run(m) for m in received]
        # fp32 cut tensor quantised with the cut's parameters, then the int8 second stage: the second stage alone
        alone = [second.run(qp.quantize(m)) for m in mid_ref]
        tail = graph.stage_module(cut, k)
        with torch.no_grad():  # fp32 second stage on the cut's uint8 values: the rounding alone / with stage 1
            rounding = [tail(torch.from_numpy(qp.dequantize(qp.quantize(m)))).numpy() for m in mid_ref]
            first_only = [tail(torch.from_numpy(m)).numpy() for m in real]
        a, b = np.concatenate(real).astype(np.float64), np.concatenate(mid_ref).astype(np.float64)
        axes = (0, 2, 3) if b.ndim == 4 else (0,)
        ch = np.sqrt(((a - b) ** 2).mean(axis=axes)) / (np.sqrt((b ** 2).mean(axis=axes)) + 1e-12)
        lo = min(float(m.min()) for m in mid_ref)
        hi = max(float(m.max()) for m in mid_ref)
        row = {"cut": cut, "name": graph.cuts[cut].name, "float": factory.qparams(cut) is None,
               "scale": qp.scale, "zero_point": qp.zero_point,
               "eval_range": [round(lo, 3), round(hi, 3)],
               "split_top1_agreement": top1_agreement(split, ref),
               "split_vs_whole_top1": top1_agreement(split, whole),
               "second_stage_on_fp32_cut_top1": top1_agreement(alone, ref),
               "split_rms_logit_err": rms(split), "split_flips": flips(split), "split_gap_shift": gap_shift(split),
               "second_stage_on_fp32_cut_rms": rms(alone),
               "cut_rounding_only_top1": top1_agreement(rounding, ref), "cut_rounding_only_rms": rms(rounding),
               "first_stage_only_top1": top1_agreement(first_only, ref), "first_stage_only_rms": rms(first_only),
               "split_max_abs_err": float(max(np.abs(a - b).max() for a, b in zip(split, ref))),
               "cut_rel_rms_err": round(float(err.mean()), 4),
               "cut_channel_rel_rms_err_median": round(float(np.median(ch)), 4),
               "cut_channel_rel_rms_err_max": round(float(ch.max()), 4), "hop_lossless": hop_exact,
               "build_s": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    sys.exit(main())
